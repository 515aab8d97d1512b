// chatbench-cli chat — replies from a trained run, interactive or --once, with the handoff checks.

#include "chatbench/chatbot.h"
#include "chatbench/error.h"
#include "chatbench/explain.h"
#include "common.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>

namespace cli {

namespace {

using namespace chatbench;

struct ChatArgs {
    std::string run = "runs/latest";
    std::string device = "cpu";
    std::string weights = "latest";
    std::optional<std::string> once;
    bool json = false;
    bool checks = false;
    std::string method = decodeMethodName(DecodeOptions {}.method);
    int beam = DecodeOptions {}.beamWidth;
    double temperature = DecodeOptions {}.temperature;
    int topK = DecodeOptions {}.topK;
    uint64_t seed = DecodeOptions {}.seed;
    int maxLength = DecodeOptions {}.maxLength;
    std::string handoff = handoffModeName(DecodeOptions {}.handoff);
    bool explain = false;
    std::vector<std::string> force; // STEP:WORD
    int neighbours = ExplainOptions {}.neighbours;
    std::string metric = stateMetricName(ExplainOptions {}.metric);
    std::optional<std::string> compare;
    bool explaining() const { return explain || !force.empty() || compare.has_value(); }
};

// White space and U+FEFF only (a Notepad file's byte-order mark before an empty first line):
// nothing for the model to read, as the corpus loaders call such a text empty.
bool blankMessage(std::string_view text)
{
    for (size_t i = 0; i < text.size();)
        if (std::string_view(" \t\r\n\f\v").find(text[i]) != std::string_view::npos)
            ++i;
        else if (text.substr(i, 3) == "\xEF\xBB\xBF")
            i += 3;
        else
            return false;
    return true;
}

// "--force 2:fine" → (2, "fine"); the step is counted from 0, as in the JSON trace.
std::pair<int, std::string> parseForce(const std::string& spec)
{
    const auto colon = spec.find(':');
    int step = -1;
    if (colon != std::string::npos && colon > 0 && colon + 1 < spec.size()) {
        try {
            size_t used = 0;
            step = std::stoi(spec.substr(0, colon), &used);
            if (used != colon)
                step = -1;
        } catch (const std::exception&) {
            step = -1;
        }
    }
    if (step < 0)
        throw Error("--force " + printable(spec) + ": expected STEP:WORD, a step from 0 and a word of the vocabulary");
    return { step, spec.substr(colon + 1) };
}

ExplainOptions explainOptions(const ChatArgs& a)
{
    ExplainOptions ex;
    ex.neighbours = a.neighbours;
    ex.metric = *parseStateMetric(a.metric);
    for (const std::string& f : a.force)
        ex.force.push_back(parseForce(f));
    ex.compareWith = a.compare;
    return ex;
}

// The kept hypotheses of a beam tree, indented under their parents; pruned ones counted.
void printBeamTree(const std::vector<BeamNode>& tree)
{
    std::vector<std::vector<int>> children(tree.size());
    std::vector<int> pruned(tree.size(), 0);
    for (size_t i = 1; i < tree.size(); ++i) {
        const auto p = static_cast<size_t>(tree[i].parent);
        if (tree[i].kept)
            children[p].push_back(static_cast<int>(i));
        else
            ++pruned[p];
    }
    std::cout << "  beam tree (" << tree.size() << " nodes; * = the reply's path):" << std::endl;
    auto print = [&](auto&& self, int n, int depth) -> void {
        const BeamNode& b = tree[static_cast<size_t>(n)];
        std::cout << "    " << (b.chosen ? "* " : "  ") << std::string(static_cast<size_t>(depth) * 2, ' ')
                  << printable(b.word) << "  (score " << fixed(b.score, 3) << (b.forced ? ", forced" : "") << ")";
        if (pruned[static_cast<size_t>(n)] > 0)
            std::cout << "  [" << pruned[static_cast<size_t>(n)] << " pruned]";
        std::cout << std::endl;
        for (int c : children[static_cast<size_t>(n)])
            self(self, c, depth + 1);
    };
    print(print, 0, 0);
}

void printExplanation(const Explanation& e)
{
    std::cout << "  which words moved the state (drop one, re-encode):" << std::endl;
    for (const Occlusion& o : e.occlusion)
        std::cout << "    " << printable(o.word) << "  |Δ(h, c)| " << fixed(o.stateChange, 4) << " ("
                  << fixed(100 * o.relativeChange, 1) << "%)  grad×input " << fixed(o.gradientTimesInput, 4)
                  << (o.replyChanged ? "  reply becomes \"" + printable(o.reply) + "\"" : "  same reply") << std::endl;
    if (!e.neighboursNote.empty())
        std::cout << "  nearest training prompts: none (" << e.neighboursNote << ")" << std::endl;
    else if (!e.neighbours.empty()) {
        std::cout << "  nearest training prompts (" << stateMetricName(e.metric) << ", of " << e.indexedPrompts
                  << "):" << std::endl;
        for (const Neighbour& n : e.neighbours)
            std::cout << "    cos " << fixed(n.cosine, 4) << "  l2 " << fixed(n.l2, 3) << "  \"" << printable(n.prompt)
                      << "\" → \"" << printable(n.response) << "\"  (" << printable(n.file) << ":" << n.line << ")"
                      << std::endl;
        if (e.memorised)
            std::cout << "    the reply is the nearest prompt's response: memorised" << std::endl;
    }
    if (!e.reply.beamTree.empty())
        printBeamTree(e.reply.beamTree);
    for (const Branch& b : e.branches)
        std::cout << "  what if step " << b.step << " were \"" << printable(b.forcedWord) << "\": \""
                  << printable(b.reply.text) << "\"  (log p " << fixed(b.reply.logProbability, 3) << " vs "
                  << fixed(e.reply.logProbability, 3) << "; checks: " << describe(b.reply.trace.checks) << ")"
                  << std::endl;
    if (e.comparison) {
        const QuestionComparison& q = *e.comparison;
        std::cout << "  compared with \"" << printable(q.questions[1]) << "\": state l2 " << fixed(q.l2, 4) << ", cos "
                  << fixed(q.cosine, 4) << std::endl
                  << "    handed over:     \"" << printable(q.reply[0]) << "\" / \"" << printable(q.reply[1]) << "\""
                  << (q.repliesDiffer ? "  (different)" : "  (the same)") << std::endl
                  << "    started at zero: \"" << printable(q.zeroInitReply[0]) << "\" / \""
                  << printable(q.zeroInitReply[1]) << "\""
                  << (q.zeroInitRepliesDiffer ? "  (different)" : "  (the same)") << std::endl;
    }
}

DecodeOptions decodeOptions(const ChatArgs& a)
{
    DecodeOptions o;
    o.method = *parseDecodeMethod(a.method);
    o.beamWidth = a.beam;
    o.temperature = a.temperature;
    o.topK = a.topK;
    o.seed = a.seed;
    o.maxLength = a.maxLength;
    o.handoff = *parseHandoffMode(a.handoff);
    o.trace = a.json || a.checks; // only then is the trace shown
    return o;
}

void printReply(const Reply& r, const ChatArgs& a)
{
    if (a.json) {
        std::cout << toJson(r) << std::endl;
        return;
    }
    // An empty reply is said in words (the window shows "(empty reply)"), not as an empty line.
    if (!r.text.empty())
        std::cout << chatbench::printable(r.text) << std::endl;
    else
        std::cout << (!r.ids.empty()   ? "(empty reply)"
                : a.method == "beam"   ? "(empty reply: <end> at the first step scored best)"
                : a.method == "sample" ? "(empty reply: <end> was drawn first)"
                                       : "(empty reply: the model's first choice was <end>)")
                  << std::endl;
    if (!r.trace.unknownWords.empty()) {
        std::cout << "  (unknown words: ";
        for (size_t i = 0; i < r.trace.unknownWords.size(); ++i)
            std::cout << (i ? ", " : "") << chatbench::printable(r.trace.unknownWords[i]);
        std::cout << ")" << std::endl;
    }
    // "???" (the seed's tokenizer keeps no punctuation), or words all unknown to the model
    if (r.trace.unknownWords.size() == r.trace.inputWords.size())
        std::cout << "  (the model knows no word of this message: its encoder reads only <unk>)" << std::endl;
    if (r.trace.wordsLeftOut > 0)
        std::cout << "  (the model reads " << r.trace.inputIds.size() << " words at most: the last "
                  << r.trace.wordsLeftOut << " of this message were left out)" << std::endl;
    if (a.checks)
        std::cout << "  checks: " << describe(r.trace.checks) << std::endl;
}

// The longest line read as one message (a chat message is words; a file of no newlines is not).
constexpr size_t kMaxMessageBytes = size_t(4) << 20;

enum class LineRead { Line, End, TooLong, Failed };

// std::getline with a limit: a line past `max` bytes is not read on (stdin from /dev/zero or a
// binary file would otherwise grow one string until memory runs out).
LineRead readLine(std::istream& in, std::string& line, size_t max, int& error)
{
    line.clear();
    errno = 0;
    int c;
    for (; (c = in.get()) != std::char_traits<char>::eof(); errno = 0) {
        if (c == '\n')
            return LineRead::Line;
        if (line.size() == max)
            return LineRead::TooLong;
        line.push_back(static_cast<char>(c));
    }
    // A read that failed (a folder, a write-only descriptor) is not the end of the questions.
    // std::cin reads through C's stdin (synchronised with stdio), which keeps the failure in ferror.
    error = errno; // as the read that ended the loop left it
    if (in.bad() || (&in == &std::cin && std::ferror(stdin)))
        return LineRead::Failed;
    return line.empty() ? LineRead::End : LineRead::Line;
}

// An option the chosen method or mode does not read is an error rather than a silent default
// ("--temperature 5" with greedy decoding would give greedy replies).
void requireTheyApply(const CLI::App& cmd, const ChatArgs& a)
{
    const std::string method = "--method " + a.method;
    for (const char* option : { "--temperature", "--top-k", "--seed" })
        if (cmd.count(option) > 0 && a.method != "sample")
            throw Error(std::string(option) + " applies to --method sample, not " + method);
    if (cmd.count("--beam") > 0 && a.method != "beam")
        throw Error("--beam applies to --method beam, not " + method);
    for (const char* option : { "--neighbours", "--metric" })
        if (cmd.count(option) > 0 && !a.explaining())
            throw Error(std::string(option) + " applies to --explain (or --force, --compare)");
}

int run(const ChatArgs& a)
{
    const Chatbot bot
        = Chatbot::load(a.run, a.device, a.weights == "best" ? Chatbot::Weights::Best : Chatbot::Weights::Latest);
    if (!bot.note().empty())
        std::cerr << "note: " << bot.note() << "\n";
    // Replies stop at the length the model was built for, whatever --max-length asks.
    if (const int limit = bot.config().model.maxTargetLength - 1; a.maxLength > limit)
        std::cerr << "note: --max-length " << a.maxLength << " is more than this model's replies can be: they stop at "
                  << limit << " tokens (model.max_target_length " << limit + 1 << " in config.json)\n";
    const DecodeOptions opt = decodeOptions(a);
    const ExplainOptions ex = explainOptions(a);
    // The neighbour index: built once, before the first question.
    std::optional<PromptIndex> index;
    if (a.explaining() && ex.neighbours > 0) {
        try {
            const auto pairs = trainingPairs(bot);
            const CancelWatch watch;
            index = PromptIndex::build(bot, pairs, &cancelFlag());
            std::cerr << "indexed " << index->size() << " training prompts in " << fixed(index->buildMilliseconds(), 0)
                      << " ms" << std::endl;
        } catch (const Error& e) {
            if (cancelFlag().load())
                return 130; // Ctrl-C while the prompts were being encoded
            std::cerr << "note: no nearest training prompts: " << e.what() << std::endl;
        }
    }
    auto answer = [&](const std::string& text) {
        if (!a.explaining()) {
            printReply(bot.reply(text, opt), a);
            return;
        }
        const Explanation e = explain(bot, text, opt, ex, index ? &*index : nullptr);
        if (a.json) {
            std::cout << toJson(e) << std::endl;
            return;
        }
        printReply(e.reply, a);
        printExplanation(e);
    };
    if (a.once) {
        answer(*a.once);
        return 0;
    }
    const bool tty = ::isatty(STDIN_FILENO);
    // Typed at a terminal with the replies going to a file (`chat --json > out.jsonl`): the banner
    // and prompts go to the terminal, not into the replies (found by an outside pass).
    std::ostream& prompts = ::isatty(STDOUT_FILENO) ? std::cout : std::cerr;
    if (tty)
        prompts << "chatting with " << chatbench::printable(a.run) << " (step " << bot.step() << ", " << bot.device()
                << "); empty line or Ctrl-D to quit" << std::endl;
    std::string line;
    bool failed = false; // a question that got an error instead of a reply: exit status 1
    for (int64_t lineNo = 1;; ++lineNo) {
        if (tty)
            prompts << "you> " << std::flush;
        int readError = 0;
        const LineRead got = readLine(std::cin, line, kMaxMessageBytes, readError);
        if (got == LineRead::End) {
            if (tty)
                prompts << std::endl; // Ctrl-D after "you> ": the shell's prompt on a line of its own
            break;
        }
        if (got == LineRead::Failed) {
            std::cerr << "error: standard input:" << lineNo << ": cannot read it"
                      << (readError ? std::string(" (") + std::strerror(readError) + ")" : std::string()) << std::endl;
            return 1;
        }
        if (got == LineRead::TooLong) {
            std::cerr << "error: standard input:" << lineNo << ": a line of more than " << (kMaxMessageBytes >> 20)
                      << " MiB is not a chat message; stopped reading" << std::endl;
            return 1;
        }
        if (!line.empty() && line.back() == '\r') // a line from a CRLF file or terminal
            line.pop_back();
        if (tty && line.empty())
            break;
        if (blankMessage(line)) // what --once refuses as empty
            continue;
        const bool sameStream = &prompts == &std::cout; // else the reply goes to a file, not after "bot> "
        if (tty && sameStream)
            prompts << "bot> " << std::flush;
        try {
            answer(line);
        } catch (const Error& e) {
            // One question the options cannot explain (a --force step past its reply) ends
            // neither the session nor the questions after it.
            if (tty && sameStream)
                prompts << std::endl; // after the "bot> " prompt
            std::cerr << "error: " << e.what() << std::endl;
            failed = true;
        }
        if (!std::cout)
            break; // the replies can no longer be written (a reader that ended): said at the end
    }
    return failed ? 1 : 0;
}

} // namespace

void addChatCommand(CLI::App& app, int& exitCode)
{
    auto a = std::make_shared<ChatArgs>();
    auto* cmd = app.add_subcommand("chat", "Chat with a trained run (interactive, or --once)");
    cmd->add_option("--run", a->run, "Run folder")->capture_default_str();
    // An empty text is most often an unset shell variable; interactively an empty line quits.
    const CLI::Validator hasText(
        [](std::string& text) -> std::string { return blankMessage(text) ? "the message is empty" : ""; }, "TEXT");
    cmd->add_option("--once", a->once, "Reply to this text and exit")->check(hasText);
    cmd->add_flag("--json", a->json, "Print the reply with its whole state trace as JSON");
    cmd->add_flag("--checks", a->checks, "Print the handoff checks after each reply");
    cmd->add_option("--method", a->method, joinNames(decodeMethodNames()))->check(oneOf(decodeMethodNames()));
    cmd->add_option("--beam", a->beam, "Beam width")->check(CLI::Range(1, 64));
    cmd->add_option("--temperature", a->temperature, "Sampling temperature")->check(finiteIn(0.01, 100.0));
    cmd->add_option("--top-k", a->topK, "Sample among the k most likely tokens (0 = all)")
        ->check(CLI::Range(0, 1000000));
    cmd->add_option("--seed", a->seed,
           "Sampling seed (default 0: a prompt sampled with one seed gets the same reply every time; give other seeds "
           "for other draws)")
        ->check(unsignedNumber());
    cmd->add_option("--max-length", a->maxLength, "Reply words at most (0 = model limit)")->check(CLI::Range(0, 4096));
    cmd->add_option("--handoff", a->handoff, "correct, zero-init (the bug), reset-each-step")
        ->check(oneOf(handoffModeNames()));
    cmd->add_option("--device", a->device, "cpu, cuda, cuda:N");
    cmd->add_flag("--explain", a->explain,
        "Explain each reply: which words moved the state, the nearest training prompts, the beam tree (with --method "
        "beam); with --json, all of it as JSON");
    cmd->add_option("--force", a->force,
        "What if: STEP:WORD forces that word at that decoder step (from 0) and decodes on; repeatable; implies "
        "--explain");
    cmd->add_option("--neighbours", a->neighbours, "Nearest training prompts to list (0 = none)")
        ->check(CLI::Range(0, 1000))
        ->capture_default_str();
    cmd->add_option("--metric", a->metric, "Distance between encoder states: cosine or l2")
        ->check(CLI::IsMember({ "cosine", "l2" }))
        ->capture_default_str();
    cmd->add_option("--compare", a->compare,
           "A second question: both encoder states, their distance and both replies, handed over and from zeros; "
           "implies --explain")
        ->check(hasText);
    cmd->add_option("--weights", a->weights, "latest (the newest checkpoint) or best (the lowest validation loss)")
        ->check(CLI::IsMember({ "latest", "best" }))
        ->capture_default_str();
    cmd->callback([a, cmd, &exitCode] {
        requireTheyApply(*cmd, *a);
        exitCode = run(*a);
    });
}

} // namespace cli
