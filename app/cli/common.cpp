#include "common.h"

#include "chatbench/error.h"
#include "chatbench/outputfile.h"
#include "chatbench/runs.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>

namespace cli {

namespace {

std::atomic<int>& watchers()
{
    static std::atomic<int> n { 0 };
    return n;
}

void onSignal(int sig)
{
    // With nothing watching the flag (reading a corpus, waiting for a chat line) the signal ends
    // the process at once; a second one always does. Files being written are removed first (an
    // export's temporary file would stay beside its output otherwise). A CPU-time limit past its
    // soft value repeats SIGXCPU every second until the hard one: only the first counts, so that
    // a long step can still end in a checkpoint.
    if (sig == SIGXCPU && cancelFlag().load())
        return;
    if (watchers().load() == 0 || cancelFlag().exchange(true)) {
        chatbench::removeTempFilesInProgress();
        std::_Exit(128 + sig);
    }
}

} // namespace

CancelWatch::CancelWatch()
{
    ++watchers();
}

CancelWatch::~CancelWatch()
{
    --watchers();
}

std::atomic<bool>& cancelFlag()
{
    static std::atomic<bool> flag { false };
    return flag;
}

bool progressTerminal(int fd)
{
    const char* term = std::getenv("TERM");
    return ::isatty(fd) && term && *term && std::string_view(term) != "dumb";
}

void installSignalHandlers()
{
    // A closed terminal (a dropped ssh session) stops training with a checkpoint too, and so do
    // Ctrl-\ (SIGQUIT) and the soft CPU-time limit (SIGXCPU, `ulimit -S -t`: it exists so that a
    // process can save before the hard one). A signal the process was started to ignore stays
    // ignored (nohup for SIGHUP; a shell's background job, or `trap "" INT`, for SIGINT).
    for (const int sig : { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGXCPU })
        if (std::signal(sig, onSignal) == SIG_IGN)
            std::signal(sig, SIG_IGN);
    // A reader that went away (`train | head`, a log viewer closed) makes writes fail instead of
    // ending the process without a word: training stops with a checkpoint, a benchmark still
    // writes its report, and the failed output is reported on standard error at the end.
    std::signal(SIGPIPE, SIG_IGN);
}

CLI::IsMember oneOf(const std::vector<std::string>& names)
{
    return CLI::IsMember(names);
}

CLI::Validator finiteIn(double lo, double hi)
{
    return CLI::Validator(
        [lo, hi](std::string& text) -> std::string {
            // Decimal digits only, as whole numbers are (strtod would also read "0x10" and "0x1p-3").
            if (text.find_first_not_of("0123456789.eE+-") != std::string::npos)
                return "'" + text + "' is not a decimal number";
            double v = 0;
            try {
                size_t used = 0;
                v = std::stod(text, &used);
                if (used != text.size())
                    return "'" + text + "' is not a number";
            } catch (const std::exception&) {
                return "'" + text + "' is not a number";
            }
            if (!std::isfinite(v) || v < lo || v > hi) {
                std::ostringstream o;
                o << "'" << text << "' must be a finite number in [" << lo << ", " << hi << "]";
                return o.str();
            }
            return {};
        },
        [lo, hi] {
            std::ostringstream o;
            o << "NUMBER in [" << lo << ", " << hi << "]";
            return o.str();
        }());
}

CLI::Validator unsignedNumber()
{
    return CLI::Validator(
        [](std::string& text) -> std::string {
            errno = 0;
            char* end = nullptr;
            (void)std::strtoull(text.c_str(), &end, 10);
            if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) || *end != '\0')
                return "'" + text + "' is not a whole number >= 0";
            if (errno == ERANGE)
                return "'" + text + "' is larger than 18446744073709551615";
            return {};
        },
        "UINT64");
}

chatbench::LoadOptions CorpusFlags::options() const
{
    chatbench::LoadOptions opt;
    opt.format = *chatbench::parseFormat(format);
    opt.latin1 = latin1;
    opt.pairing = *chatbench::parsePairing(pairing);
    opt.strict = strict;
    opt.maxTextBytes = static_cast<int64_t>(maxMiB) << 20;
    opt.maxLineBytes = static_cast<int64_t>(maxLineKiB) << 10;
    return opt;
}

void addCorpusFlags(CLI::App* cmd, CorpusFlags& f)
{
    using namespace chatbench;
    cmd->add_option("--format", f.format, "Corpus format: " + joinNames(formatNames()))
        ->check(oneOf(formatNames()))
        ->capture_default_str();
    cmd->add_flag("--latin1", f.latin1,
        "Decode the corpus as Latin-1 instead of UTF-8 (bytes 0x80-0x9F as Windows-1252 has them: curly quotes, "
        "dashes, the euro sign)");
    cmd->add_option("--pairing", f.pairing,
           "How turns become pairs: consecutive (every turn answers the one before) or first-rest (the first turn "
           "answered by the others joined, as the Keras recipe does)")
        ->check(oneOf(pairingNames()))
        ->capture_default_str();
    cmd->add_flag("--strict", f.strict, "Fail on the first malformed record instead of skipping it");
    cmd->add_flag("--verbose", f.verbose, "List every skipped record");
    cmd->add_option("--max-corpus-mb", f.maxMiB,
           "The most a loaded corpus may take, in MiB (its text and a fixed cost per turn and pair)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_option("--max-line-kb", f.maxLineKiB,
           "The longest line a corpus file may have, in KiB (in TSV and JSON Lines a longer one is a malformed "
           "record; in the other formats it fails its file)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
}

void decimalWholeNumbers(CLI::App& app)
{
    const CLI::Validator decimal(
        [](std::string& text) -> std::string {
            const size_t digits = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
            if (digits >= text.size() || text.find_first_not_of("0123456789", digits) != std::string::npos)
                return "'" + chatbench::printable(text) + "' is not a whole number in decimal digits";
            const size_t first = std::min(text.find_first_not_of('0', digits), text.size() - 1);
            text.erase(digits, first - digits); // "007" → "7", "000" → "0": not octal
            return {};
        },
        "");
    for (CLI::Option* opt : app.get_options()) {
        const std::string type = opt->get_type_name();
        if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0)
            opt->transform(decimal);
    }
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
        decimalWholeNumbers(*sub);
}

bool& standardOutputWasClosed()
{
    static bool closed = false;
    return closed;
}

namespace {

// Whether `path` names the file, pipe or terminal that descriptor `fd` is.
bool namesDescriptor(const std::string& path, int fd)
{
    struct stat named { };
    struct stat opened { };
    return ::stat(path.c_str(), &named) == 0 && ::fstat(fd, &opened) == 0 && named.st_dev == opened.st_dev
        && named.st_ino == opened.st_ino;
}

// The checks of an output file against the inputs and run folders; `out` names it in errors.
void checkNotAnInput(const std::string& out, const std::string& path, const std::vector<std::string>& inputs)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path target = fs::weakly_canonical(fs::absolute(path, ec), ec);
    if (ec)
        return; // the write names what is wrong with the path
    const fs::path folder = target.parent_path();
    bool inRun = chatbench::holdsRun(folder.string());
    try {
        inRun = inRun || chatbench::isRun(folder.string());
    } catch (const chatbench::Error&) {
        // a folder that can be written but not listed: its state.json and config.json were looked for
    }
    if (inRun)
        throw chatbench::Error(out, 0,
            "is in the run folder " + chatbench::printable(folder.string())
                + ", whose files the run writes itself: write it elsewhere");
    const bool exists = fs::exists(target, ec);
    std::string ext = target.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    for (const std::string& in : inputs) {
        std::error_code e2;
        const fs::path source = fs::weakly_canonical(fs::absolute(in, e2), e2);
        if (e2)
            continue;
        const bool same = exists && fs::equivalent(target, source, e2);
        const auto [end, _] = std::mismatch(source.begin(), source.end(), target.begin(), target.end());
        const bool inside = fs::is_directory(source, e2) && end == source.end();
        if (same || (inside && exists))
            throw chatbench::Error(out, 0,
                std::string("would overwrite ") + (same ? "the input " : "a file of the input folder ")
                    + chatbench::printable(in) + ": write it elsewhere");
        // A new file the folder would read next time (a folder is read as chatterbot YAML: every
        // .yml and .yaml in it and its subfolders) would make it fail to load.
        if (inside && (ext == ".yml" || ext == ".yaml"))
            throw chatbench::Error(out, 0,
                "is in the input folder " + chatbench::printable(in)
                    + ", which reads every .yml and .yaml file in it: the output would be read as a corpus file "
                      "next time; write it elsewhere");
    }
}

} // namespace

bool namesStandardOutput(const std::string& out)
{
    return out == "-" || namesDescriptor(out, STDOUT_FILENO);
}

void checkOutputFile(const std::string& out, const std::vector<std::string>& inputs, const std::string& standardOutput)
{
    if (namesStandardOutput(out))
        throw chatbench::Error(out, 0, "is this command's standard output: " + standardOutput);
    if (namesDescriptor(out, STDERR_FILENO))
        throw chatbench::Error(out, 0, "is this command's standard error, where its messages go: give a file");
    chatbench::checkOutputPath(out); // a pipe, device or folder: said before any work
    checkNotAnInput(out, out, inputs);
}

void checkStandardOutputFile(const std::vector<std::string>& inputs)
{
    struct stat opened { };
    if (::fstat(STDOUT_FILENO, &opened) != 0 || !S_ISREG(opened.st_mode))
        return; // a pipe or a terminal: nothing is overwritten
    std::error_code ec;
    const std::string file = std::filesystem::read_symlink("/proc/self/fd/1", ec).string();
    if (!ec && !file.empty() && file.front() == '/')
        checkNotAnInput("standard output (" + file + ")", file, inputs);
}

chatbench::Corpus loadCorpusArg(const std::string& path, const CorpusFlags& flags, bool defaulted)
{
    chatbench::Corpus c;
    try {
        c = chatbench::loadCorpus(path, flags.options());
    } catch (const chatbench::Error& e) {
        if (!defaulted)
            throw;
        const char* env = std::getenv("CHATBENCH_CORPUS");
        const std::string why = env && *env ? "$CHATBENCH_CORPUS"
            : path == "datasets/chatbench"  ? "datasets/chatbench in the working folder"
                                            : "the bundled corpus";
        throw chatbench::Error(
            e.file(), e.line(), e.message() + " (the default corpus, " + why + "; --corpus names another)");
    }
    const size_t shown = flags.verbose ? c.warnings.size() : kWarningsShown;
    std::cerr << chatbench::describeWarnings(c.warnings, shown);
    if (c.warnings.size() > shown)
        std::cerr << "(--verbose lists them all)\n";
    return c;
}

std::string shellWord(const std::string& text)
{
    const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == '/' || c == ':' || c == '+' || c == ',';
    });
    if (plain)
        return text;
    // What printable() escapes (control bytes, a newline, an escape, a bidirectional override, bytes
    // that are not UTF-8) would act on the terminal inside '…': bash's $'…' with \xNN keeps the word
    // pasteable and the terminal untouched. Decided per character, as printable() decides.
    if (chatbench::printable(text) != text) {
        static const char* hex = "0123456789abcdef";
        std::string out = "$'";
        for (size_t i = 0; i < text.size();) {
            const auto b = static_cast<unsigned char>(text[i]);
            const size_t len = b < 0x80 ? 1
                : (b & 0xE0) == 0xC0    ? 2
                : (b & 0xF0) == 0xE0    ? 3
                : (b & 0xF8) == 0xF0    ? 4
                                        : 1;
            const std::string_view seq = std::string_view(text).substr(i, len);
            if (const std::string shown = chatbench::printable(seq); shown != seq) {
                // A character escaped whole (a control, an override) is shown as 4 bytes a byte;
                // otherwise only the first byte is not UTF-8, and the rest is looked at again.
                const size_t n = shown.size() == 4 * seq.size()
                        && shown.find_first_not_of("\\x0123456789ABCDEF") == std::string::npos
                    ? seq.size()
                    : 1;
                for (size_t k = 0; k < n; ++k) {
                    const auto c = static_cast<unsigned char>(text[i + k]);
                    out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
                }
                i += n;
            } else {
                if (seq == "'" || seq == "\\")
                    out += '\\';
                out += seq;
                i += seq.size();
            }
        }
        return out + "'";
    }
    std::string out = "'";
    for (char c : text)
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string fixed(double v, int digits)
{
    std::ostringstream o;
    o << std::fixed << std::setprecision(digits) << v;
    return o.str();
}

} // namespace cli
