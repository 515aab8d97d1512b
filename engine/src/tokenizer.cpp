#include "chatbench/tokenizer.h"

#include "atomicfile.h"
#include "chatbench/error.h"
#include "jsondoc.h"
#include "text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <clocale>
#include <cwctype>
#include <locale.h>
#include <map>
#include <wctype.h>

namespace chatbench {

namespace {

// Keras' Tokenizer default `filters` argument.
constexpr std::string_view kKerasFilters = "!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~\t\n";

const std::vector<std::string> kSpecials = { "<pad>", "<unk>", "<start>", "<end>" };

// The code point at s[i] and its length in bytes; an invalid byte stands for itself (length 1, -1).
std::pair<long, size_t> decodeAt(const std::string& s, size_t i)
{
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + len > s.size()
        || text::invalidUtf8Offset(std::string_view(s).substr(i, len)) != std::string_view::npos)
        return { -1, 1 };
    long cp = len == 1 ? b : b & (0x7F >> len);
    for (size_t k = 1; k < len; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    return { cp, len };
}

void appendUtf8(std::string& out, long cp)
{
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

// Lowercase as Python's str.lower (which Keras' Tokenizer calls): Unicode's case mapping from the
// C library's UTF-8 tables, with str.lower's two context rules: U+0130 (İ) becomes "i̇", and a
// capital sigma ending a word becomes ς. Bytes that are not UTF-8 stay as they are.
std::string unicodeLower(const std::string& s)
{
    static const locale_t utf8 = [] {
        locale_t l = ::newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
        return l ? l : ::newlocale(LC_CTYPE_MASK, "C.utf8", static_cast<locale_t>(nullptr));
    }();
    std::string out;
    out.reserve(s.size());
    bool prevCased = false;
    for (size_t i = 0; i < s.size();) {
        const auto [cp, len] = decodeAt(s, i);
        if (cp < 0) {
            out.push_back(s[i]);
            ++i;
            prevCased = false;
            continue;
        }
        long lower = cp;
        if (cp >= 0x80 && !utf8) // never a different tokenization on a machine without the tables
            throw Error("this system has no C.UTF-8 locale: non-ASCII words cannot be lowercased as Keras does");
        if (cp < 0x80)
            lower = cp >= 'A' && cp <= 'Z' ? cp - 'A' + 'a' : cp;
        else if (cp == 0x130)
            lower = -0x130;
        else if (cp == 0x3A3) {
            const size_t next = i + len;
            const long after = next < s.size() ? decodeAt(s, next).first : -1;
            const bool nextCased = after > 0 && utf8 && ::iswalpha_l(static_cast<wint_t>(after), utf8);
            lower = prevCased && !nextCased ? 0x3C2 : 0x3C3;
        } else if (utf8)
            lower = static_cast<long>(::towlower_l(static_cast<wint_t>(cp), utf8));
        if (lower == -0x130) {
            appendUtf8(out, 'i');
            appendUtf8(out, 0x307);
        } else {
            appendUtf8(out, lower);
        }
        prevCased = utf8 && ::iswalpha_l(static_cast<wint_t>(cp), utf8);
        i += len;
    }
    return out;
}

bool isWordByte(unsigned char b)
{
    return std::isalnum(b) || b >= 0x80;
}

} // namespace

std::vector<std::string> Tokenizer::split(const std::string& input) const
{
    // Keras lowercases as Python does; vocabularies saved before that was recorded (and the
    // punctuation mode) keep the ASCII lowercasing they were built with.
    const std::string s = m_options.mode == TokenizerMode::Keras && m_options.unicodeLowercase
        ? unicodeLower(input)
        : text::asciiLower(input);
    std::vector<std::string> out;
    std::string cur;
    auto flush = [&] {
        if (!cur.empty())
            out.push_back(std::move(cur));
        cur.clear();
    };
    if (m_options.mode == TokenizerMode::Keras) {
        for (char ch : s) {
            if (ch == ' ' || kKerasFilters.find(ch) != std::string_view::npos)
                flush();
            else
                cur.push_back(ch);
        }
        flush();
        return out;
    }
    for (size_t i = 0; i < s.size(); ++i) {
        const auto b = static_cast<unsigned char>(s[i]);
        if (isWordByte(b)) {
            cur.push_back(s[i]);
        } else if (s[i] == '\'' && !cur.empty() && i + 1 < s.size()
            && isWordByte(static_cast<unsigned char>(s[i + 1]))) {
            cur.push_back(s[i]); // keep "don't" and "it's" whole
        } else {
            flush();
            if (!std::isspace(b))
                out.emplace_back(1, s[i]);
        }
    }
    flush();
    return out;
}

Tokenizer Tokenizer::build(const std::vector<Pair>& pairs, const TokenizerOptions& options)
{
    Tokenizer tok;
    tok.m_options = options;
    std::map<std::string, int64_t> counts;
    for (const Pair& p : pairs) {
        for (const auto& w : tok.split(p.prompt))
            ++counts[w];
        for (const auto& w : tok.split(p.response))
            ++counts[w];
    }
    std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
    // Most frequent first; ties alphabetical so the ids do not depend on hash order.
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    tok.m_words = kSpecials;
    for (const auto& [w, n] : sorted) {
        if (n < options.minFrequency)
            break;
        if (options.maxSize > 0 && static_cast<int>(tok.m_words.size()) >= options.maxSize)
            break;
        tok.m_words.push_back(w);
        tok.m_counts[w] = n;
    }
    for (size_t i = 0; i < tok.m_words.size(); ++i)
        tok.m_ids[tok.m_words[i]] = static_cast<int64_t>(i);
    return tok;
}

Tokenizer Tokenizer::fromWords(const std::vector<std::string>& words, const TokenizerOptions& options)
{
    Tokenizer tok;
    tok.m_options = options;
    for (const std::string* w : { &options.startWord, &options.endWord })
        if (w->find_first_of(" \t\n\r\f\v") != std::string::npos || w->find('\0') != std::string::npos)
            throw Error("the start or end word ('" + printable(*w) + "') holds white space");
    tok.m_words = kSpecials;
    tok.m_words.insert(tok.m_words.end(), words.begin(), words.end());
    for (size_t i = 0; i < tok.m_words.size(); ++i) {
        if (tok.m_words[i].empty() || tok.m_words[i].find_first_of(" \t\n\r\f\v") != std::string::npos)
            throw Error("word " + std::to_string(i) + " of the vocabulary ('" + printable(tok.m_words[i])
                + "') is empty or holds white space");
        if (!tok.m_ids.emplace(tok.m_words[i], static_cast<int64_t>(i)).second)
            throw Error("word '" + tok.m_words[i] + "' appears twice in the vocabulary");
    }
    return tok;
}

Encoded Tokenizer::encode(const std::string& text, size_t maxIds) const
{
    Encoded e;
    e.words = split(text);
    for (size_t i = 0; i < e.words.size(); ++i) {
        if (e.ids.size() == maxIds) {
            e.wordsLeftOut = e.words.size() - i;
            e.words.resize(i);
            break;
        }
        const std::string& w = e.words[i];
        auto it = m_ids.find(w);
        if (!m_options.startWord.empty() && (w == m_options.startWord || w == m_options.endWord)) {
            e.ids.push_back(w == m_options.startWord ? kStart : kEnd); // an imported model's, as Keras reads them
            continue;
        }
        // Special-token spellings typed by a user are words like any other, not control tokens.
        if (it == m_ids.end() || it->second < 4) {
            if (!m_options.dropUnknown)
                e.ids.push_back(kUnk);
            e.unknown.push_back(w);
        } else {
            e.ids.push_back(it->second);
        }
    }
    return e;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const
{
    std::string out;
    for (int64_t id : ids) {
        if (id == kEnd)
            break;
        if (id == kPad || id == kStart)
            continue;
        const std::string& w = word(id);
        const bool punct = w.size() == 1 && std::ispunct(static_cast<unsigned char>(w[0])) && w != "(" && w != "\"";
        if (!out.empty() && !(m_options.mode == TokenizerMode::Punctuation && punct))
            out.push_back(' ');
        out += w;
    }
    return out;
}

const std::string& Tokenizer::word(int64_t id) const
{
    static const std::string unknown = "<unk>";
    if (id < 0 || id >= size())
        return unknown;
    return m_words[static_cast<size_t>(id)];
}

int64_t Tokenizer::id(const std::string& w) const
{
    auto it = m_ids.find(w);
    return it == m_ids.end() ? kUnk : it->second;
}

void Tokenizer::save(const std::string& path) const
{
    nlohmann::json j;
    j["format"] = "chatbench-vocab";
    j["version"] = 1;
    j["mode"] = tokenizerModeName(m_options.mode);
    j["min_frequency"] = m_options.minFrequency;
    j["max_size"] = m_options.maxSize;
    j["drop_unknown"] = m_options.dropUnknown;
    // The punctuation mode lowercases ASCII letters only (vocabularies of that mode once said "unicode").
    j["lowercase"] = m_options.mode == TokenizerMode::Keras && m_options.unicodeLowercase ? "unicode" : "ascii";
    if (!m_options.startWord.empty()) {
        j["start_word"] = m_options.startWord;
        j["end_word"] = m_options.endWord;
    }
    j["tokens"] = m_words;
    std::string text = j.dump(1);
    // What load reads back: a file over its limit would be written and then refused, leaving a run
    // that trained but can neither chat nor resume.
    if (static_cast<int64_t>(text.size()) > text::kMaxJsonFileBytes) {
        size_t longest = 0;
        for (const std::string& w : m_words)
            longest = std::max(longest, w.size());
        throw Error(path, 0,
            "the vocabulary would take " + std::to_string((text.size() >> 20) + 1) + " MiB, more than the "
                + std::to_string(text::kMaxJsonFileBytes >> 20) + " MiB a vocabulary file may hold (its longest word: "
                + std::to_string(longest) + " bytes); lower --max-vocab, or check the corpus for text without spaces");
    }
    writeFileAtomic(path, text);
}

Tokenizer Tokenizer::load(const std::string& path)
{
    const std::string bytes = text::readFile(path, text::kMaxJsonFileBytes);
    const nlohmann::json j = parseDocument(bytes, path, "chatbench-vocab", "not a chatbench vocabulary file");
    Tokenizer tok;
    try {
        const JsonObject root { j, "" };
        const std::string name = field<std::string>(root, "mode");
        const auto mode = parseTokenizerMode(name);
        if (!mode)
            throw FieldError(
                "unknown tokenizer mode '" + printable(name) + "' (" + joinNames(tokenizerModeNames()) + ")", "mode");
        tok.m_options.mode = *mode;
        tok.m_options.minFrequency = field<int>(root, "min_frequency");
        tok.m_options.maxSize = field<int>(root, "max_size");
        tok.m_options.dropUnknown = field<bool>(root, "drop_unknown", false);
        // absent: saved before Unicode lowercasing
        const std::string lowercase = field<std::string>(root, "lowercase", std::string("ascii"));
        if (lowercase != "ascii" && lowercase != "unicode")
            throw FieldError("lowercase must be 'ascii' or 'unicode', not '" + printable(lowercase) + "'", "lowercase");
        tok.m_options.unicodeLowercase = lowercase == "unicode" && tok.m_options.mode == TokenizerMode::Keras;
        // absent: a vocabulary of chatbench's own, or imported before they were recorded
        for (auto [key, word] : { std::pair { "start_word", &tok.m_options.startWord },
                 std::pair { "end_word", &tok.m_options.endWord } }) {
            *word = field<std::string>(root, key, std::string());
            if (word->find_first_of(" \t\n\r\f\v") != std::string::npos || word->find('\0') != std::string::npos)
                throw FieldError(std::string(key) + " ('" + printable(*word) + "') holds white space or NUL", key);
        }
        if (tok.m_options.startWord.empty() != tok.m_options.endWord.empty()
            || (!tok.m_options.startWord.empty() && tok.m_options.startWord == tok.m_options.endWord))
            throw FieldError("start_word and end_word must both be given, and differ", "start_word");
        if (!j.contains("tokens") || !j["tokens"].is_array())
            throw FieldError("'tokens' must be a list of words", j.contains("tokens") ? "tokens" : "");
        for (size_t i = 0; i < j["tokens"].size(); ++i) {
            const auto& w = j["tokens"][i];
            if (!w.is_string())
                throw FieldError(
                    "'tokens[" + std::to_string(i) + "]' must be a string", "tokens[" + std::to_string(i) + "]");
            tok.m_words.push_back(w.get<std::string>());
            const std::string& word = tok.m_words.back();
            // A word the tokenizer can never produce would be a silent hole in the vocabulary.
            if (word.empty() || word.find_first_of(" \t\n\r\f\v") != std::string::npos
                || word.find('\0') != std::string::npos)
                throw fieldError(path, bytes, "",
                    FieldError("word " + std::to_string(i) + " ('" + printable(word)
                            + "') is empty or holds white space or NUL",
                        "tokens[" + std::to_string(i) + "]"));
        }
    } catch (const FieldError& e) {
        throw fieldError(path, bytes, "bad vocabulary: ", e);
    } catch (const nlohmann::json::exception& e) {
        throw Error(path, 0, "bad vocabulary: " + jsonMessage(e));
    }
    if (tok.m_words.size() < kSpecials.size() || !std::equal(kSpecials.begin(), kSpecials.end(), tok.m_words.begin()))
        throw Error(path, 0, "vocabulary must start with <pad>, <unk>, <start>, <end>");
    for (size_t i = 0; i < tok.m_words.size(); ++i)
        if (!tok.m_ids.emplace(tok.m_words[i], static_cast<int64_t>(i)).second)
            throw Error(path, 0, "word '" + tok.m_words[i] + "' appears twice");
    return tok;
}

double oovRate(const Tokenizer& tok, const std::vector<Pair>& pairs)
{
    int64_t total = 0, unknown = 0;
    for (const Pair& p : pairs) {
        for (const std::string* s : { &p.prompt, &p.response }) {
            const Encoded e = tok.encode(*s);
            total += static_cast<int64_t>(e.ids.size());
            unknown += static_cast<int64_t>(e.unknown.size());
        }
    }
    return total == 0 ? 0.0 : static_cast<double>(unknown) / static_cast<double>(total);
}

} // namespace chatbench
