// chatbench-cli: the headless workbench. Each command lives in its own file and adds itself to
// the parser; this file only assembles them and turns errors into one message and an exit code.

#include "../startcheck.h"
#include "chatbench/devices.h"
#include "chatbench/error.h"
#include "common.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

namespace {

// An error's text for the terminal: each line escaped (a word from a file or an option may hold
// control characters), the line breaks kept.
std::string printableLines(std::string_view text)
{
    std::string out;
    for (size_t from = 0;;) {
        const size_t nl = text.find('\n', from);
        out += chatbench::printable(text.substr(from, nl == std::string_view::npos ? nl : nl - from));
        if (nl == std::string_view::npos)
            return out;
        out += '\n';
        from = nl + 1;
    }
}

} // namespace

int main(int argc, char** argv)
{
    chatbench::prepareProcess(); // before anything starts CUDA
    CLI::App app { "chatbench-cli — train LSTM seq2seq chatbots and see the encoder→decoder state handoff" };
    app.require_subcommand(1);
    app.set_version_flag("--version", "chatbench 0.1.0");

    int exitCode = 0;
    cli::addCorpusCommand(app, exitCode);
    cli::addTrainCommand(app, exitCode);
    cli::addChatCommand(app, exitCode);
    cli::addDoctorCommand(app, exitCode);
    cli::addBenchCommand(app, exitCode);
#ifdef CHATBENCH_HAVE_KERAS
    cli::addImportKerasCommand(app, exitCode);
#endif

    // CLI11 reads whole numbers with strtoll's base 0: "010" would be 8 and "0x10" 16. Every
    // whole-number option (of every command) takes decimal digits only, leading zeros dropped.
    cli::decimalWholeNumbers(app);

    // A misspelt command: CLI11 would only say that one is required.
    if (argc > 1 && argv[1][0] != '-') {
        std::string names;
        bool known = false;
        for (const CLI::App* sub : app.get_subcommands({})) {
            known = known || sub->check_name(argv[1]);
            names += (names.empty() ? "" : ", ") + sub->get_name();
        }
        if (!known) {
            std::cerr << "error: unknown command '" << chatbench::printable(argv[1]) << "'; the commands are " << names
                      << " (--help for more)\n";
            return static_cast<int>(CLI::ExitCodes::ExtrasError);
        }
    }
    cli::installSignalHandlers();
    try {
        app.parse(argc, argv); // runs the chosen command's callback
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const chatbench::Error& e) {
        std::cerr << "error: " << printableLines(e.what()) << "\n";
        return 1;
    } catch (const std::exception& e) {
        // Not an error the engine put in words (a library's): its first line, without LibTorch's
        // stack trace.
        const std::string what = chatbench::inWords(e.what());
        // Sizes come from the options where a model is made (train, bench), from the run's
        // config.json where one is opened.
        const bool sized = app.got_subcommand("train") || app.got_subcommand("bench");
        std::cerr << "error: " << printableLines(what)
                  << (what.rfind("out of memory", 0) != 0 ? ""
                             : sized                      ? ": lower --batch-size, --hidden, --embed or --layers"
                                     : ": the model's sizes (the run's config.json) need more memory than is free")
                  << "\n";
        return 2;
    }
    // What was printed must have arrived: a reply written to a full disk (> /dev/full) or a closed
    // standard output is an error, not exit status 0.
    std::cout.flush();
    if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout) || chatbench::startcheck::stdoutWasClosed()) {
        std::cerr << "error: the output could not be written to standard output ("
                  << (chatbench::startcheck::stdoutWasClosed() ? "it was closed" : std::strerror(errno)) << ")\n";
        return exitCode != 0 ? exitCode : 1;
    }
    return exitCode;
}
