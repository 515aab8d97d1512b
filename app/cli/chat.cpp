// chatbench-cli chat — replies from a trained run, interactive or --once, with the handoff checks.

#include "chatbench/chatbot.h"
#include "common.h"

#include <unistd.h>

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
};

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
    std::cout << r.text << std::endl;
    if (!r.trace.unknownWords.empty()) {
        std::cout << "  (unknown words: ";
        for (size_t i = 0; i < r.trace.unknownWords.size(); ++i)
            std::cout << (i ? ", " : "") << r.trace.unknownWords[i];
        std::cout << ")" << std::endl;
    }
    if (a.checks)
        std::cout << "  checks: " << describe(r.trace.checks) << std::endl;
}

int run(const ChatArgs& a)
{
    const Chatbot bot
        = Chatbot::load(a.run, a.device, a.weights == "best" ? Chatbot::Weights::Best : Chatbot::Weights::Latest);
    if (!bot.note().empty())
        std::cerr << "note: " << bot.note() << "\n";
    const DecodeOptions opt = decodeOptions(a);
    if (a.once) {
        printReply(bot.reply(*a.once, opt), a);
        return 0;
    }
    const bool tty = ::isatty(STDIN_FILENO);
    if (tty)
        std::cout << "chatting with " << a.run << " (step " << bot.step() << ", " << bot.device()
                  << "); empty line or Ctrl-D to quit" << std::endl;
    std::string line;
    while (true) {
        if (tty)
            std::cout << "you> " << std::flush;
        if (!std::getline(std::cin, line) || (tty && line.empty()))
            break;
        if (line.empty())
            continue;
        if (tty)
            std::cout << "bot> ";
        printReply(bot.reply(line, opt), a);
    }
    return 0;
}

} // namespace

void addChatCommand(CLI::App& app, int& exitCode)
{
    auto a = std::make_shared<ChatArgs>();
    auto* cmd = app.add_subcommand("chat", "Chat with a trained run (interactive, or --once)");
    cmd->add_option("--run", a->run, "Run folder")->capture_default_str();
    cmd->add_option("--once", a->once, "Reply to this text and exit");
    cmd->add_flag("--json", a->json, "Print the reply with its whole state trace as JSON");
    cmd->add_flag("--checks", a->checks, "Print the handoff checks after each reply");
    cmd->add_option("--method", a->method, joinNames(decodeMethodNames()))->check(oneOf(decodeMethodNames()));
    cmd->add_option("--beam", a->beam, "Beam width")->check(CLI::Range(1, 64));
    cmd->add_option("--temperature", a->temperature, "Sampling temperature")->check(finiteIn(0.01, 100.0));
    cmd->add_option("--top-k", a->topK, "Sample among the k most likely tokens (0 = all)")
        ->check(CLI::Range(0, 1000000));
    cmd->add_option("--seed", a->seed, "Sampling seed")->check(CLI::NonNegativeNumber);
    cmd->add_option("--max-length", a->maxLength, "Reply words at most (0 = model limit)")->check(CLI::Range(0, 4096));
    cmd->add_option("--handoff", a->handoff, "correct, zero-init (the bug), reset-each-step")
        ->check(oneOf(handoffModeNames()));
    cmd->add_option("--device", a->device, "cpu, cuda, cuda:N");
    cmd->add_option("--weights", a->weights, "latest (the newest checkpoint) or best (the lowest validation loss)")
        ->check(CLI::IsMember({ "latest", "best" }))
        ->capture_default_str();
    cmd->callback([a, &exitCode] { exitCode = run(*a); });
}

} // namespace cli
