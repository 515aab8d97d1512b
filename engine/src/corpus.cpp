#include "chatbench/corpus.h"

#include "atomicfile.h"
#include "chatbench/error.h"
#include "chatbench/outputfile.h"
#include "jsondoc.h"
#include "text.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace chatbench {

namespace {
constexpr const char* kRaiseCorpusLimit = "chatbench-cli --max-corpus-mb raises the limit";
}

namespace {

const std::string kNotRegular = "not a regular file (a pipe, device or socket); only files and folders are read";

bool isYamlName(const fs::path& p)
{
    const auto ext = text::asciiLower(p.extension().string());
    return ext == ".yml" || ext == ".yaml";
}

// What a corpus folder holds: its YAML files, in subfolders and in folders reached through links
// too (each folder once, so a link loop ends), and what could not be read.
struct FolderScan {
    std::vector<fs::path> yamlFiles;
    std::vector<std::pair<fs::path, std::string>> unreadable; // a folder that could not be listed, and why
    std::vector<fs::path> brokenLinks; // .yml names whose link leads nowhere
    std::vector<fs::path> special; // .yml names that are a pipe, device or socket (or link to one)
    std::vector<fs::path> others; // files of other names, which a folder corpus does not read
};

FolderScan scanYamlFolder(const fs::path& root)
{
    FolderScan scan;
    std::set<std::string> seen;
    std::vector<fs::path> todo { root };
    while (!todo.empty()) {
        const fs::path dir = todo.back();
        todo.pop_back();
        std::error_code ec;
        if (const fs::path real = fs::canonical(dir, ec); !ec && !seen.insert(real.string()).second)
            continue;
        fs::directory_iterator it(dir, ec);
        for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
            std::error_code e2;
            const fs::path& path = it->path();
            if (it->is_directory(e2)) { // a link to a folder too
                todo.push_back(path);
            } else if (isYamlName(path)) {
                if (it->is_regular_file(e2))
                    scan.yamlFiles.push_back(path);
                else if (it->is_symlink(e2) && !fs::exists(path, e2))
                    scan.brokenLinks.push_back(path);
                else
                    scan.special.push_back(path);
            } else if (it->is_regular_file(e2) && path.filename().string().rfind('.', 0) != 0) {
                scan.others.push_back(path); // hidden files (.DS_Store, editors' backups) go unmentioned
            }
        }
        if (ec)
            scan.unreadable.emplace_back(dir, ec.message());
    }
    std::sort(scan.yamlFiles.begin(), scan.yamlFiles.end());
    std::sort(scan.unreadable.begin(), scan.unreadable.end());
    std::sort(scan.brokenLinks.begin(), scan.brokenLinks.end());
    std::sort(scan.special.begin(), scan.special.end());
    std::sort(scan.others.begin(), scan.others.end());
    return scan;
}

// The size cap was hit: never skipped as a bad record, always the end of loading.
struct TooMuchText : Error {
    using Error::Error;
};

// What a record costs besides its text, charged against the cap: a turn read (even an empty
// one), a pair kept (its three strings). Text alone would let a short file of aliases to a long
// list of tiny or empty turns take gigabytes or billions of steps.
constexpr int64_t kTurnCost = 64;
int64_t pairCost(const Pair& p)
{
    return static_cast<int64_t>(sizeof(Pair) + p.prompt.size() + p.response.size() + p.file.size());
}

// The corpus being filled and how: the pairing, and whether a bad record stops the load.
struct Loader {
    Corpus& corpus;
    const LoadOptions& opt;
    int64_t spent = 0; // everything charged so far: never decreases, so it bounds time as well as memory

    // A text's CR and U+FEFF escapes read as a file's own bytes are (text::normaliseBreaks), and
    // the text trimmed again, unless LoadOptions::keepEscapedBreaks. True when it changed.
    bool readEscapes(std::string& t) const
    {
        if (opt.keepEscapedBreaks)
            return false;
        std::string n = text::normaliseBreaks(t);
        if (n == t)
            return false;
        t = text::trim(n);
        return true;
    }

    // Every pair goes through here: the total is capped, and control characters (a JSON
    // "\u001b" or "\u0000" escape; the files themselves hold no NUL) are refused, as a record
    // whose text would reach the vocabulary and a terminal.
    void add(Pair p)
    {
        // A JSON or YAML escape puts a CR or U+FEFF in a text where a file's own bytes cannot
        // (the file loaders turn them into line breaks, or drop them): the Keras tokenizer does not
        // split at CR, so "one\r" would be a word of its own, and the vocabulary file refuses it.
        for (std::string* t : { &p.prompt, &p.response })
            if (readEscapes(*t) && t->empty())
                throw Error(p.file, p.line, "empty prompt or response");
        for (const std::string* t : { &p.prompt, &p.response })
            for (size_t i = 0; i < t->size(); ++i)
                // C0 controls, DEL, and C1 controls (U+0080-U+009F: C2 80 to C2 9F in UTF-8).
                if (const auto b = static_cast<unsigned char>((*t)[i]),
                    next = static_cast<unsigned char>(i + 1 < t->size() ? (*t)[i + 1] : 0);
                    (b < 0x20 && b != '\t' && b != '\n' && b != '\r') || b == 0x7F
                    || (b == 0xC2 && next >= 0x80 && next < 0xA0)) {
                    char code[8];
                    std::snprintf(code, sizeof code, "U+%04X", b == 0xC2 ? next : b);
                    throw Error(p.file, p.line,
                        std::string("the text holds the control character ") + code + " ("
                            + (t == &p.prompt ? "prompt" : "response") + ")");
                }
        charge(pairCost(p), p.file, p.line);
        corpus.pairs.push_back(std::move(p));
    }

    // Counts `cost` bytes; throws when the total goes over the cap.
    void charge(int64_t cost, const std::string& file, long line)
    {
        spent += cost;
        fits(0, file, line);
    }

    // Throws when `more` bytes (not yet counted: a conversation being read) would go over the cap.
    void fits(int64_t more, const std::string& file, long line) const
    {
        if (spent + more > opt.maxTextBytes)
            throw TooMuchText(file, line,
                "the corpus takes more than " + std::to_string(opt.maxTextBytes >> 20)
                    + " MiB (its text and records; YAML aliases repeating a long text or list?); raise the limit "
                      "to load it");
    }

    // Runs `read` for one record; a malformed record (Error) is skipped with a warning, or
    // rethrown when loading is strict.
    template <typename Read> void record(Read&& read)
    {
        try {
            read();
        } catch (const TooMuchText&) {
            throw;
        } catch (const Error& e) {
            if (opt.strict)
                throw;
            corpus.warnings.push_back({ e.file(), e.line(), e.message(), CorpusWarning::Kind::Record });
        }
    }

    // Throws when a record's line is longer than the limit.
    void lineFits(std::string_view l, const std::string& file, long line) const
    {
        if (static_cast<int64_t>(l.size()) > opt.maxLineBytes)
            throw Error(file, line, text::longLine(l.size(), static_cast<size_t>(opt.maxLineBytes)));
    }

    void note(const std::string& file, long line, const std::string& message)
    {
        corpus.warnings.push_back({ file, line, message, CorpusWarning::Kind::Note });
    }

    // The turns of one conversation (starting at `line`) as pairs, in the chosen pairing. An
    // empty turn (blank or null) splits it: the turns on either side of it are not a prompt and
    // its answer, so no pair is made across it. Each empty turn is noted (unless the reader said
    // why already), and so is a conversation that gives no pair.
    void addTurns(
        std::vector<std::pair<std::string, long>> turns, const std::string& file, long line, bool noteEmptyTurns = true)
    {
        const size_t before = corpus.pairs.size();
        bool split = false;
        std::vector<std::pair<std::string, long>> run;
        for (auto& t : turns) {
            readEscapes(t.first); // a turn left empty by it (only a U+FEFF) splits it as an empty one
            if (!t.first.empty()) {
                run.push_back(std::move(t));
                continue;
            }
            if (noteEmptyTurns)
                note(file, t.second, "empty turn: the conversation is split there (no pair across it)");
            split = true;
            addRun(run, file);
            run.clear();
        }
        addRun(run, file);
        if (corpus.pairs.size() == before && !split)
            note(file, line,
                turns.empty() ? "conversation without turns skipped"
                              : "conversation with fewer than two turns skipped");
    }

    void addRun(const std::vector<std::pair<std::string, long>>& turns, const std::string& file)
    {
        if (turns.size() < 2)
            return;
        if (opt.pairing == Pairing::FirstRest) {
            std::string rest = turns[1].first;
            for (size_t i = 2; i < turns.size(); ++i)
                rest += " " + turns[i].first;
            add({ turns[0].first, std::move(rest), file, turns[0].second });
            return;
        }
        for (size_t i = 0; i + 1 < turns.size(); ++i)
            add({ turns[i].first, turns[i + 1].first, file, turns[i].second });
    }
};

// 1-based line of the first byte-order mark or NUL byte after the start, or 0. yaml-cpp reads a
// BOM inside a file as the start of a new stream (dropping what follows) and a NUL as the end
// of its input.
long yamlStrayByte(const std::string& text, std::string& what)
{
    const size_t bom = text.find("\xEF\xBB\xBF");
    const size_t nul = text.find('\0');
    if (bom == std::string::npos && nul == std::string::npos)
        return 0;
    what = bom < nul ? "a byte-order mark (U+FEFF) inside the file; YAML allows one only at the start"
                     : "a NUL byte; YAML text cannot hold one";
    return text::lineOfOffset(text, std::min(bom, nul));
}

// The start of every document, from the parser's events alone (no nodes are built).
class YamlDocumentStarts : public YAML::EventHandler {
public:
    std::vector<YAML::Mark> starts;
    void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
    void OnDocumentEnd() override { }
    void OnNull(const YAML::Mark&, YAML::anchor_t) override { }
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override { }
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override { }
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override { }
    void OnSequenceEnd() override { }
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override { }
    void OnMapEnd() override { }
};

// yaml-cpp (0.7) does not consume a ',' that opens a document: it reports an empty document
// there and starts the next one at the same place, so LoadAll allocates empty documents until
// memory runs out. One pass over the parser's events finds such a document first.
void checkYamlDocumentsAdvance(const std::string& file, const std::string& text)
{
    std::istringstream in(text);
    YAML::Parser parser(in);
    YamlDocumentStarts docs;
    while (parser.HandleNextDocument(docs)) {
        const size_t n = docs.starts.size();
        if (n >= 2 && docs.starts[n - 1].pos == docs.starts[n - 2].pos) {
            const auto pos = static_cast<size_t>(std::max(0, docs.starts[n - 1].pos));
            const std::string what
                = pos < text.size() ? "'" + printable(std::string_view(text).substr(pos, 1)) + "'" : "this token";
            throw Error(file, docs.starts[n - 1].line + 1, "YAML: a document cannot start with " + what);
        }
    }
}

void loadYamlFile(Loader& L, const std::string& file)
{
    const std::string text = text::normalise(file, text::readFile(file, L.opt.maxTextBytes, kRaiseCorpusLimit),
        L.opt.latin1, static_cast<size_t>(L.opt.maxLineBytes));
    if (text::trim(text).empty())
        throw Error(file, 0, "file is empty");
    std::string stray;
    if (const long line = yamlStrayByte(text, stray))
        throw Error(file, line, stray);
    std::vector<YAML::Node> docs;
    try {
        checkYamlDocumentsAdvance(file, text);
        docs = YAML::LoadAll(text);
    } catch (const YAML::DeepRecursion& e) {
        throw Error(file, e.mark.line + 1,
            "YAML nested more than " + std::to_string(e.depth()) + " levels deep; a corpus needs two");
    } catch (const YAML::Exception& e) {
        // An unclosed [ or { is only noticed where the file ends; say so rather than blame that line.
        const bool unclosed = e.msg.find("not found") != std::string::npos;
        throw Error(
            file, e.mark.line + 1, "YAML: " + e.msg + (unclosed ? " (an unclosed [ or { earlier in the file)" : ""));
    }
    // Empty documents (a lone ---) are nothing; a second one with content would be silently
    // ignored by a one-document reader, so it is named.
    docs.erase(std::remove_if(docs.begin(), docs.end(), [](const YAML::Node& d) { return d.IsNull(); }), docs.end());
    if (docs.empty())
        throw Error(file, 1, "expected a 'conversations:' key (chatterbot corpus format)");
    if (docs.size() > 1)
        throw Error(file, docs[1].Mark().line + 1,
            "a second YAML document (after ---) starts here; a chatterbot corpus file holds one: merge their "
            "'conversations' lists");
    const YAML::Node& root = docs.front();
    if (!root.IsMap() || !root["conversations"])
        throw Error(file, 1, "expected a 'conversations:' key (chatterbot corpus format)");
    long firstKey = 0;
    for (const auto& kv : root) {
        if (!kv.first.IsScalar() || kv.first.Scalar() != "conversations")
            continue;
        if (firstKey)
            throw Error(file, kv.first.Mark().line + 1,
                "a second 'conversations:' key (the first is on line " + std::to_string(firstKey)
                    + "); YAML keeps only one of them: merge the lists");
        firstKey = kv.first.Mark().line + 1;
    }
    const YAML::Node convs = root["conversations"];
    if (!convs.IsSequence())
        throw Error(file, convs.Mark().line + 1, "'conversations' must be a list of lists");
    const size_t before = L.corpus.pairs.size();
    for (const YAML::Node& conv : convs) {
        L.record([&] {
            const long line = conv.Mark().line + 1;
            L.charge(kTurnCost, file, line);
            if (!conv.IsSequence())
                throw Error(file, line, "each conversation must be a list of turns, found a single text");
            std::vector<std::pair<std::string, long>> turns;
            int64_t text = 0; // the conversation's turns, held until they become pairs (charged then)
            for (const YAML::Node& turn : conv) {
                const long tline = turn.Mark().line + 1;
                L.charge(kTurnCost, file, tline);
                if (turn.IsNull()) { // "~" or nothing: an empty turn
                    turns.emplace_back(std::string(), tline);
                    continue;
                }
                if (!turn.IsScalar())
                    throw Error(file, tline, "a turn must be text, not a list or a map");
                L.fits(text += static_cast<int64_t>(turn.Scalar().size()), file, tline);
                turns.emplace_back(text::trim(turn.Scalar()), tline);
            }
            L.addTurns(std::move(turns), file, line);
        });
    }
    if (L.corpus.pairs.size() == before)
        L.note(file, 0, "no pairs");
}

void loadTsvFile(Loader& L, const std::string& file)
{
    const std::string text
        = text::normalise(file, text::readFile(file, L.opt.maxTextBytes, kRaiseCorpusLimit), L.opt.latin1, 0);
    long line = 0;
    for (std::string_view l : text::splitLines(text)) {
        ++line;
        if (text::trim(l).empty())
            continue;
        if (l.front() == '#') { // a comment; one that looks like a record is said so
            if (l.find('\t') != std::string_view::npos)
                L.note(file, line, "line starts with '#': skipped as a comment although it has a tab");
            continue;
        }
        L.record([&] {
            L.lineFits(l, file, line);
            const size_t tab = l.find('\t');
            if (tab == std::string_view::npos)
                throw Error(file, line, "expected 'prompt<TAB>response', found no tab");
            if (l.find('\t', tab + 1) != std::string_view::npos)
                throw Error(file, line, "expected exactly two tab-separated columns");
            std::string p = text::trim(l.substr(0, tab));
            std::string r = text::trim(l.substr(tab + 1));
            if (p.empty() || r.empty())
                throw Error(file, line, "empty prompt or response");
            L.add({ std::move(p), std::move(r), file, line });
        });
    }
}

// A text as one TSV column: no tab or line break inside it, trimmed as the reader trims.
std::string tsvColumn(const std::string& text)
{
    std::string out = text;
    for (char& ch : out)
        if (ch == '\t' || ch == '\n' || ch == '\r') // a column separator or a line break to the reader
            ch = ' ';
    return text::trim(out);
}

// One JSONL record: {"prompt", "response"} or {"messages": [...]}. Messages are strings, or
// objects with a string 'content' and maybe a 'role' (OpenAI's chat format): 'system' and
// 'developer' messages are instructions, not turns; the turns are 'user' and 'assistant' messages,
// alternating, so that no tool's output or second question is trained as a reply.
void addJsonRecord(Loader& L, const nlohmann::json& j, const std::string& file, long line)
{
    using nlohmann::json;
    if (!j.is_object())
        throw Error(file, line, "expected a JSON object");
    if (j.contains("messages") && (j.contains("prompt") || j.contains("response")))
        throw Error(file, line, "holds both 'messages' and 'prompt'/'response': a record is one or the other");
    if (j.contains("prompt") || j.contains("response")) {
        if (!j.contains("prompt") || !j["prompt"].is_string() || !j.contains("response") || !j["response"].is_string())
            throw Error(file, line, "'prompt' and 'response' must both be strings");
        std::string p = text::trim(j["prompt"].get<std::string>());
        std::string r = text::trim(j["response"].get<std::string>());
        if (p.empty() || r.empty())
            throw Error(file, line, "empty prompt or response");
        L.add({ std::move(p), std::move(r), file, line });
    } else if (j.contains("messages")) {
        const json& msgs = j["messages"];
        if (!msgs.is_array())
            throw Error(file, line, "'messages' must be a list");
        std::vector<std::pair<std::string, long>> turns;
        size_t withRole = 0, without = 0; // turns with a user or assistant role, and without a role
        std::string lastRole;
        size_t lastRoleAt = 0;
        for (size_t i = 0; i < msgs.size(); ++i) {
            const json& m = msgs[i];
            const std::string which = "message " + std::to_string(i + 1);
            std::string role; // "user", "assistant", or "" for a turn without one
            if (m.is_object() && m.contains("role")) {
                if (!m["role"].is_string())
                    throw Error(file, line, which + ": 'role' must be a string");
                const std::string r = text::asciiLower(m["role"].get<std::string>());
                if (r == "system" || r == "developer") // instructions, whatever their content's form
                    continue;
                if (r == "user" || r == "human")
                    role = "user";
                else if (r == "assistant" || r == "model" || r == "bot")
                    role = "assistant";
                else
                    throw Error(file, line,
                        which + " has the role '" + printable(m["role"].get<std::string>())
                            + "': the turns are 'user' and 'assistant' messages (also called 'human', 'model' or "
                              "'bot'); 'system' and 'developer' ones are skipped");
            }
            std::string content;
            if (m.is_string())
                content = m.get<std::string>();
            else if (m.is_object() && m.contains("content") && m["content"].is_string())
                content = m["content"].get<std::string>();
            else
                throw Error(file, line, which + ": each message must be a string or an object with a string 'content'");
            if (role.empty()) {
                ++without;
            } else {
                if (role == lastRole)
                    throw Error(file, line,
                        "messages " + std::to_string(lastRoleAt) + " and " + std::to_string(i + 1) + " are both '"
                            + role
                            + "': the turns of a conversation alternate between 'user' and 'assistant' (join the "
                              "two into one message)");
                lastRole = role;
                lastRoleAt = i + 1;
                ++withRole;
            }
            turns.emplace_back(text::trim(content), line);
        }
        if (withRole > 0 && without > 0)
            throw Error(file, line,
                "some messages have a 'user' or 'assistant' role and some have none: give every turn its role, or "
                "none");
        L.addTurns(std::move(turns), file, line);
    } else {
        throw Error(file, line, "expected {\"prompt\",\"response\"} or {\"messages\":[...]}");
    }
}

void loadJsonlFile(Loader& L, const std::string& file)
{
    using nlohmann::json;
    const std::string text
        = text::normalise(file, text::readFile(file, L.opt.maxTextBytes, kRaiseCorpusLimit), L.opt.latin1, 0);
    long line = 0;
    for (std::string_view l : text::splitLines(text)) {
        ++line;
        if (text::trim(l).empty())
            continue;
        L.record([&] {
            L.lineFits(l, file, line);
            json j;
            try {
                j = parseUniqueKeys(l);
            } catch (const RefusedJson& e) {
                throw Error(file, line, e.what());
            } catch (const json::exception& e) { // syntax, a number too large
                const std::string t = text::trim(l);
                throw Error(file, line,
                    "not valid JSON: " + jsonMessage(e)
                        + (t == "{" || t == "[" ? " (JSON Lines holds one whole record per line; this looks like a "
                                                  "JSON document spread over lines)"
                                                : ""));
            }
            if (j.is_array())
                throw Error(file, line,
                    "expected a JSON object, found a list (JSON Lines holds one object per line, not a JSON array)");
            try {
                addJsonRecord(L, j, file, line);
            } catch (const json::exception& e) { // a field of another type
                throw Error(file, line, "JSON: " + jsonMessage(e));
            }
        });
    }
}

void loadDialogFile(Loader& L, const std::string& file)
{
    const std::string text = text::normalise(file, text::readFile(file, L.opt.maxTextBytes, kRaiseCorpusLimit),
        L.opt.latin1, static_cast<size_t>(L.opt.maxLineBytes));
    std::vector<std::pair<std::string, long>> turns;
    long line = 0;
    for (std::string_view l : text::splitLines(text)) {
        ++line;
        std::string t = text::trim(l);
        if (t.empty()) { // a blank line ends a conversation
            if (!turns.empty()) {
                const long first = turns.front().second;
                L.addTurns(std::move(turns), file, first);
            }
            turns.clear();
        } else {
            turns.emplace_back(std::move(t), line);
        }
    }
    if (!turns.empty()) {
        const long first = turns.front().second;
        L.addTurns(std::move(turns), file, first);
    }
}

// Cornell Movie-Dialogs: fields separated by " +++$+++ ", Latin-1 text.
std::vector<std::string> cornellFields(std::string_view line)
{
    static const std::string sep = " +++$+++ ";
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
        const size_t pos = line.find(sep, start);
        if (pos == std::string_view::npos) {
            out.emplace_back(line.substr(start));
            break;
        }
        out.emplace_back(line.substr(start, pos - start));
        start = pos + sep.size();
    }
    return out;
}

// A Cornell file's text. The published corpus is Latin-1 (with Windows-1252 punctuation); a copy
// re-encoded as UTF-8 (valid UTF-8 throughout) is read as UTF-8 unless Latin-1 is asked for.
std::string cornellText(const Loader& L, const std::string& file)
{
    std::string bytes = text::readFile(file, L.opt.maxTextBytes, kRaiseCorpusLimit);
    const bool latin1 = L.opt.latin1 || text::invalidUtf8Offset(bytes) != std::string_view::npos;
    return text::normalise(file, std::move(bytes), latin1, static_cast<size_t>(L.opt.maxLineBytes));
}

void loadCornell(Loader& L, const fs::path& dir)
{
    const std::string linesFile = (dir / "movie_lines.txt").string();
    const std::string convFile = (dir / "movie_conversations.txt").string();
    std::map<std::string, std::pair<std::string, long>> lines;
    {
        const std::string text = cornellText(L, linesFile);
        long n = 0;
        for (std::string_view l : text::splitLines(text)) {
            ++n;
            if (text::trim(l).empty())
                continue;
            L.record([&] {
                auto f = cornellFields(l);
                if (f.size() != 5)
                    throw Error(
                        linesFile, n, "expected 5 fields separated by ' +++$+++ ', found " + std::to_string(f.size()));
                auto [it, fresh] = lines.try_emplace(text::trim(f[0]), text::trim(f[4]), n);
                if (!fresh)
                    throw Error(linesFile, n,
                        "line id '" + it->first + "' appears twice (first on line " + std::to_string(it->second.second)
                            + "); the first is kept");
            });
        }
    }
    const std::string text = cornellText(L, convFile);
    long n = 0;
    for (std::string_view l : text::splitLines(text)) {
        ++n;
        if (text::trim(l).empty())
            continue;
        L.record([&] {
            auto f = cornellFields(l);
            if (f.size() != 4)
                throw Error(
                    convFile, n, "expected 4 fields separated by ' +++$+++ ', found " + std::to_string(f.size()));
            const std::string& ids = f[3];
            const size_t open = ids.find('['), close = ids.rfind(']');
            if (open == std::string::npos || close == std::string::npos || close < open)
                throw Error(convFile, n, "expected a list of line ids like ['L1', 'L2']");
            std::vector<std::pair<std::string, long>> turns;
            std::string cur;
            bool inQuote = false;
            for (size_t i = open + 1; i < close; ++i) {
                const char ch = ids[i];
                if (ch == '\'' || ch == '"') {
                    if (inQuote) {
                        auto it = lines.find(cur);
                        if (it == lines.end())
                            throw Error(convFile, n, "line id '" + cur + "' is not in movie_lines.txt");
                        if (it->second.first.empty())
                            L.note(convFile, n,
                                "line id '" + cur
                                    + "' has no text (movie_lines.txt:" + std::to_string(it->second.second)
                                    + "): the conversation is split there (no pair across it)");
                        turns.emplace_back(it->second.first, n);
                        cur.clear();
                    }
                    inQuote = !inQuote;
                } else if (inQuote) {
                    cur.push_back(ch);
                }
            }
            if (turns.empty())
                throw Error(convFile, n, "the conversation lists no line ids");
            L.addTurns(std::move(turns), convFile, n, /*noteEmptyTurns=*/false);
        });
    }
    L.corpus.files = { linesFile, convFile };
}

// The format a file's name says, if it says one.
std::optional<CorpusFormat> formatFromName(const fs::path& p)
{
    const std::string ext = text::asciiLower(p.extension().string());
    if (ext == ".yml" || ext == ".yaml")
        return CorpusFormat::ChatterbotYaml;
    if (ext == ".jsonl" || ext == ".json" || ext == ".ndjson")
        return CorpusFormat::Jsonl;
    if (ext == ".tsv")
        return CorpusFormat::Tsv;
    return std::nullopt;
}

struct CsvRefused : Error {
    using Error::Error;
};

CorpusFormat sniffFile(const fs::path& p)
{
    if (const auto byName = formatFromName(p))
        return *byName;
    // By content: look at the first non-empty lines.
    std::string head = text::readHead(p.string(), 64 * 1024);
    if (head.size() >= 3 && head.compare(0, 3, "\xEF\xBB\xBF") == 0)
        head.erase(0, 3);
    int lines = 0, tabbed = 0;
    for (std::string_view l : text::splitLines(head)) {
        std::string t = text::trim(l);
        if (t.empty() || t[0] == '#')
            continue;
        if (lines == 0 && t[0] == '{')
            return CorpusFormat::Jsonl;
        if (t.rfind("conversations:", 0) == 0 || t.rfind("categories:", 0) == 0)
            return CorpusFormat::ChatterbotYaml;
        ++lines;
        if (l.find('\t') != std::string_view::npos)
            ++tabbed;
    }
    if (lines > 0 && tabbed * 2 > lines)
        return CorpusFormat::Tsv;
    // Read as dialog, a spreadsheet's pairs would chain header and rows into turns of one another
    // and cut quoted fields at their line breaks.
    if (text::asciiLower(p.extension().string()) == ".csv")
        throw CsvRefused(p.string(), 0,
            "comma-separated values (CSV) are not a corpus format: save the pairs as TSV (a prompt, a tab and its "
            "response on each line; a spreadsheet's \"Tab-separated values\"), or choose the dialog format "
            "(--format dialog) to read each line as a turn");
    return CorpusFormat::DialogText;
}

} // namespace

CorpusFormat detectFormat(const std::string& path)
{
    const fs::path p(path);
    std::error_code ec;
    if (const std::string why = text::unreachable(path); !why.empty())
        throw Error(path, 0, why);
    if (!fs::is_directory(p, ec) && !fs::is_regular_file(p, ec))
        throw Error(path, 0, kNotRegular);
    if (fs::is_directory(p, ec)) {
        if (fs::exists(p / "movie_lines.txt", ec) && fs::exists(p / "movie_conversations.txt", ec))
            return CorpusFormat::Cornell;
        // Loading reads YAML files in subfolders too (the chatterbot package keeps one folder per language).
        const FolderScan scan = scanYamlFolder(p);
        if (!scan.yamlFiles.empty())
            return CorpusFormat::ChatterbotYaml;
        if (!scan.special.empty())
            throw Error(scan.special.front().string(), 0, kNotRegular);
        throw Error(path, 0,
            "folder holds no .yml/.yaml files and no Cornell movie_lines.txt + movie_conversations.txt"
                + (scan.unreadable.empty() ? std::string()
                                           : " that could be read (" + scan.unreadable.front().first.string() + ": "
                            + scan.unreadable.front().second + ")"));
    }
    if (fs::file_size(p, ec) == 0 && text::readHead(path, 1).empty()) // /proc files report no size
        throw Error(path, 0, "file is empty");
    return sniffFile(p);
}

std::string toString(const CorpusWarning& w)
{
    return printable(w.file) + (w.line > 0 ? ":" + std::to_string(w.line) : std::string()) + ": " + w.message;
}

std::string kindName(CorpusWarning::Kind k)
{
    switch (k) {
    case CorpusWarning::Kind::Record: return "record";
    case CorpusWarning::Kind::File: return "file";
    case CorpusWarning::Kind::Note: break;
    }
    return "note";
}

std::string describeWarnings(const std::vector<CorpusWarning>& warnings, size_t max, const std::string& prefix)
{
    if (warnings.empty())
        return {};
    size_t records = 0, files = 0;
    for (const auto& w : warnings) {
        records += w.kind == CorpusWarning::Kind::Record;
        files += w.kind == CorpusWarning::Kind::File;
    }
    const size_t notes = warnings.size() - records - files;
    auto count
        = [](size_t n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); };
    std::vector<std::string> parts;
    if (records)
        parts.push_back(count(records, "malformed record skipped", "malformed records skipped"));
    if (files)
        parts.push_back(count(files, "unreadable file skipped", "unreadable files skipped"));
    if (notes)
        parts.push_back(count(notes, "note", "notes"));
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i)
        out += (i ? ", " : "") + parts[i];
    out += "\n";
    for (size_t i = 0; i < warnings.size() && i < max; ++i)
        out += prefix + toString(warnings[i]) + "\n";
    if (warnings.size() > max)
        out += prefix + "... and " + std::to_string(warnings.size() - max) + " more\n";
    return out;
}

int64_t Corpus::skippedRecords() const
{
    return std::count_if(
        warnings.begin(), warnings.end(), [](const CorpusWarning& w) { return w.kind == CorpusWarning::Kind::Record; });
}

int64_t Corpus::skippedFiles() const
{
    return std::count_if(
        warnings.begin(), warnings.end(), [](const CorpusWarning& w) { return w.kind == CorpusWarning::Kind::File; });
}

namespace {

Corpus loadCorpusUnguarded(const std::string& path, const LoadOptions& options);

} // namespace

Corpus loadCorpus(const std::string& path, const LoadOptions& options)
{
    try {
        return loadCorpusUnguarded(path, options);
    } catch (const std::bad_alloc&) {
        // The cap (--max-corpus-mb) is above what this machine can give (a raised cap, a memory
        // limit): said with the file, not as a bare "std::bad_alloc".
        throw Error(path, 0,
            "out of memory while loading the corpus (it may take up to " + std::to_string(options.maxTextBytes >> 20)
                + " MiB, the --max-corpus-mb limit): free memory, or lower the limit to learn which text is too large");
    }
}

namespace {

Corpus loadCorpusUnguarded(const std::string& path, const LoadOptions& options)
{
    Corpus corpus;
    corpus.path = path;
    try {
        corpus.format = options.format == CorpusFormat::Auto ? detectFormat(path) : options.format;
    } catch (const CsvRefused&) {
        if (!options.csvAsDialog)
            throw;
        corpus.format = CorpusFormat::DialogText;
    }
    corpus.pairing = options.pairing;
    Loader L { corpus, options };
    const fs::path p(path);
    std::error_code ec;
    if (const std::string why = text::unreachable(path); !why.empty())
        throw Error(path, 0, why);
    const bool isDir = fs::is_directory(p, ec);
    // A format guessed from a file's content may be the wrong guess: failures say so.
    const bool guessed = options.format == CorpusFormat::Auto && !isDir && !formatFromName(p);
    const std::string guess
        = " (read as " + formatName(corpus.format) + ", guessed from the content; choose the format if it is another)";

    if (corpus.format == CorpusFormat::Cornell) {
        if (!isDir)
            throw Error(path, 0, "the Cornell format is a folder with movie_lines.txt and movie_conversations.txt");
        loadCornell(L, p);
        // YAML files beside the Cornell pair are not read: said, as a YAML folder says what it
        // leaves (an outside pass found them dropped without a word, even with --strict).
        if (const std::vector<fs::path> yaml = scanYamlFolder(p).yamlFiles; !yaml.empty())
            L.note(path, 0,
                std::to_string(yaml.size()) + " YAML file(s) not read, since a folder with movie_lines.txt is read as "
                    + "Cornell: " + printable(yaml[0].filename().string())
                    + (yaml.size() > 1 ? " and " + std::to_string(yaml.size() - 1) + " more" : "")
                    + "; a YAML file or a folder of them is read when named on its own");
    } else if (isDir) {
        if (corpus.format != CorpusFormat::ChatterbotYaml)
            throw Error(path, 0, "only chatterbot YAML and Cornell corpora can be folders");
        FolderScan scan = scanYamlFolder(p);
        // A folder that cannot be listed is skipped with a warning (strict: an error), as a file
        // that cannot be read.
        for (const auto& [dir, why] : scan.unreadable) {
            if (options.strict)
                throw Error(dir.string(), 0, "folder cannot be read: " + why);
            corpus.warnings.push_back(
                { dir.string(), 0, "folder cannot be read: " + why + " (folder skipped)", CorpusWarning::Kind::File });
        }
        for (const auto& link : scan.brokenLinks)
            L.note(link.string(), 0, "broken link skipped");
        // A pipe or device named .yml would block or never end: skipped as an unreadable file is.
        for (const auto& f : scan.special) {
            if (options.strict)
                throw Error(f.string(), 0, kNotRegular);
            corpus.warnings.push_back({ f.string(), 0, kNotRegular + " (file skipped)", CorpusWarning::Kind::File });
        }
        if (!scan.others.empty()) {
            const auto& o = scan.others;
            L.note(path, 0,
                std::to_string(o.size())
                    + " file(s) not read, since a folder is read as chatterbot YAML (.yml, .yaml): "
                    + printable(o[0].filename().string())
                    + (o.size() > 1 ? (o.size() == 2 ? " and " : ", ") + printable(o[1].filename().string()) : "")
                    + (o.size() > 2 ? " and " + std::to_string(o.size() - 2) + " more" : "")
                    + "; a file of another format is read when named on its own");
        }
        std::vector<fs::path> files = std::move(scan.yamlFiles);
        // A file reached twice (a link beside its target) is read once.
        std::vector<fs::path> unique;
        std::map<std::string, std::string> seen;
        for (const auto& f : files) {
            std::error_code e2;
            const std::string real = fs::canonical(f, e2).string();
            const auto [at, fresh] = seen.try_emplace(e2 ? f.string() : real, f.string());
            if (fresh)
                unique.push_back(f);
            else
                L.note(f.string(), 0, "the same file as " + at->second + ": read once");
        }
        files = std::move(unique);
        for (const auto& f : files) {
            // In a folder an empty file is skipped with a note, and one that cannot be read or
            // parsed with a warning (strict: an error), rather than failing the lot.
            if (fs::file_size(f, ec) == 0) {
                L.note(f.string(), 0, "empty file skipped");
                continue;
            }
            const size_t before = corpus.pairs.size();
            const size_t warned = corpus.warnings.size();
            try {
                loadYamlFile(L, f.string());
                corpus.files.push_back(f.string());
            } catch (const TooMuchText&) {
                throw;
            } catch (const Error& e) {
                if (options.strict || files.size() == 1)
                    throw;
                corpus.pairs.resize(before);
                corpus.warnings.resize(warned);
                corpus.warnings.push_back(
                    { e.file(), e.line(), e.message() + " (file skipped)", CorpusWarning::Kind::File });
            }
        }
    } else {
        if (fs::file_size(p, ec) == 0 && text::readHead(path, 1).empty())
            throw Error(path, 0, "file is empty");
        try {
            switch (corpus.format) {
            case CorpusFormat::ChatterbotYaml: loadYamlFile(L, path); break;
            case CorpusFormat::Tsv: loadTsvFile(L, path); break;
            case CorpusFormat::Jsonl: loadJsonlFile(L, path); break;
            case CorpusFormat::DialogText: loadDialogFile(L, path); break;
            default: break;
            }
        } catch (const TooMuchText&) {
            throw;
        } catch (const Error& e) {
            if (!guessed)
                throw;
            throw Error(e.file(), e.line(), e.message() + guess);
        }
        corpus.files.push_back(path);
    }
    if (corpus.pairs.empty()) {
        // Nothing usable: blame the first thing skipped, where it is, when something was.
        const auto bad = std::find_if(corpus.warnings.begin(), corpus.warnings.end(),
            [](const CorpusWarning& w) { return w.kind != CorpusWarning::Kind::Note; });
        if (bad != corpus.warnings.end()) {
            const int64_t skipped = corpus.skippedRecords() + corpus.skippedFiles();
            throw Error(bad->file, bad->line,
                bad->message + " (no usable pairs left; " + std::to_string(skipped) + " record(s) or file(s) skipped)"
                    + (guessed ? guess : std::string()));
        }
        // Only notes (empty turns, one-turn conversations): the first says why.
        throw Error(path, 0,
            "no prompt/response pairs found (format " + formatName(corpus.format) + ")"
                + (corpus.warnings.empty() ? std::string()
                                           : "; " + std::to_string(corpus.warnings.size())
                            + " note(s), the first: " + toString(corpus.warnings.front())));
    }
    return corpus;
}

} // namespace

std::string pairsTsv(const std::vector<Pair>& pairs)
{
    std::string out = "# prompt<TAB>response\n";
    for (const Pair& p : pairs) {
        const std::string prompt = tsvColumn(p.prompt);
        out += (prompt.empty() || prompt.front() != '#' ? "" : " ") + prompt + '\t' + tsvColumn(p.response) + '\n';
    }
    return out;
}

std::string pairsJsonl(const std::vector<Pair>& pairs)
{
    std::string out;
    for (const Pair& p : pairs) {
        nlohmann::ordered_json j;
        j["prompt"] = p.prompt;
        j["response"] = p.response;
        out += j.dump() + '\n';
    }
    return out;
}

CorpusFormat exportFormat(const std::string& path)
{
    const std::optional<CorpusFormat> byName = formatFromName(path);
    if (byName == CorpusFormat::ChatterbotYaml)
        throw Error(path, 0,
            "a .yml or .yaml file is read as a chatterbot YAML corpus, and export writes TSV or JSON Lines: name the "
            "file .tsv, or .jsonl to keep every character of the texts");
    return byName == CorpusFormat::Jsonl ? CorpusFormat::Jsonl : CorpusFormat::Tsv;
}

void writePairs(const std::vector<Pair>& pairs, const std::string& path)
{
    writeOutputFile(path, exportFormat(path) == CorpusFormat::Jsonl ? pairsJsonl(pairs) : pairsTsv(pairs));
}

Split splitPairs(const std::vector<Pair>& pairs, double validationFraction, uint64_t seed)
{
    std::vector<size_t> idx(pairs.size());
    for (size_t i = 0; i < idx.size(); ++i)
        idx[i] = i;
    // std::shuffle's algorithm is unspecified; a hand-rolled Fisher–Yates keeps splits stable
    // across standard libraries.
    std::mt19937_64 rng(seed);
    for (size_t i = idx.size(); i > 1; --i)
        std::swap(idx[i - 1], idx[rng() % i]);
    size_t nVal = static_cast<size_t>(validationFraction * static_cast<double>(pairs.size()) + 0.5);
    if (validationFraction > 0 && nVal == 0 && pairs.size() >= 2)
        nVal = 1;
    if (nVal >= pairs.size())
        nVal = pairs.size() > 1 ? pairs.size() - 1 : 0;
    std::vector<bool> isVal(pairs.size(), false);
    for (size_t i = 0; i < nVal; ++i)
        isVal[idx[i]] = true;
    Split s;
    for (size_t i = 0; i < pairs.size(); ++i)
        (isVal[i] ? s.validation : s.train).push_back(pairs[i]);
    return s;
}

std::string defaultCorpusPath()
{
    if (const char* env = std::getenv("CHATBENCH_CORPUS"); env && *env)
        return env;
    std::error_code ec;
    if (fs::exists("datasets/chatbench", ec))
        return "datasets/chatbench";
    return CHATBENCH_DATASETS_DIR "/chatbench";
}

} // namespace chatbench
