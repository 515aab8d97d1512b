// chatbench-cli: the headless workbench. Each command lives in its own file and adds itself to
// the parser; this file only assembles them and turns errors into one message and an exit code.

#include "../startcheck.h"
#include "chatbench/devices.h"
#include "chatbench/error.h"
#include "common.h"

#include <CLI/CLI.hpp>

#include <cerrno>
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

// Standard output's stream buffer, passed through, keeping the reason of the first write that
// failed: by the end of the command errno holds another call's (a failed line flushed with
// std::endl read "No such file or directory").
class FailureKeepingBuffer : public std::streambuf {
public:
    explicit FailureKeepingBuffer(std::streambuf* inner)
        : m_inner(inner)
    {
    }
    int firstFailure() const { return m_failure; }

protected:
    int_type overflow(int_type c) override
    {
        if (traits_type::eq_int_type(c, traits_type::eof()))
            return traits_type::not_eof(c);
        errno = 0;
        const int_type r = m_inner->sputc(traits_type::to_char_type(c));
        if (traits_type::eq_int_type(r, traits_type::eof()))
            keep();
        return r;
    }
    std::streamsize xsputn(const char* s, std::streamsize n) override
    {
        errno = 0;
        const std::streamsize r = m_inner->sputn(s, n);
        if (r < n)
            keep();
        return r;
    }
    int sync() override
    {
        errno = 0;
        const int r = m_inner->pubsync();
        if (r != 0)
            keep();
        return r;
    }

private:
    void keep()
    {
        if (m_failure == 0)
            m_failure = errno != 0 ? errno : EIO;
    }
    std::streambuf* m_inner;
    int m_failure = 0;
};

} // namespace

namespace {

int runCommand(int argc, char** argv)
{
    cli::standardOutputWasClosed() = chatbench::startcheck::stdoutWasClosed();
    chatbench::prepareProcess(); // before anything starts CUDA
    std::streambuf* const stdoutBuffer = std::cout.rdbuf();
    FailureKeepingBuffer out(stdoutBuffer);
    std::cout.rdbuf(&out);
    struct Restore { // before `out` goes: std::cout is flushed again at exit
        std::streambuf* buffer;
        ~Restore() { std::cout.rdbuf(buffer); }
    } restore { stdoutBuffer };
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
        // --help and --version print and succeed, unless what they print does not arrive.
        const int code = app.exit(e);
        std::cout.flush();
        errno = 0;
        if (code == 0 && (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout))) {
            std::cerr << "error: the output could not be written to standard output ("
                      << std::strerror(out.firstFailure() != 0 ? out.firstFailure()
                                 : errno != 0                  ? errno
                                                               : EIO)
                      << ")\n";
            return 1;
        }
        return code;
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
    int reason = out.firstFailure();
    errno = 0;
    if (std::fflush(stdout) != 0 && reason == 0)
        reason = errno;
    if (!std::cout || std::ferror(stdout) || chatbench::startcheck::stdoutWasClosed()) {
        std::cerr << "error: the output could not be written to standard output ("
                  << (chatbench::startcheck::stdoutWasClosed() ? std::string("it was closed")
                             : reason != 0                     ? std::string(std::strerror(reason))
                                                               : std::string("a write failed; is the disk full?"))
                  << ")\n";
        return exitCode != 0 ? exitCode : 1;
    }
    return exitCode;
}

} // namespace

int main(int argc, char** argv)
{
    return chatbench::startcheck::onRoomyStack(runCommand, argc, argv);
}
