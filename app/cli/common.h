#pragma once
// What the command files share: the registration signature, the Ctrl-C flag, and the few
// input translations every command makes the same way.

#include "chatbench/corpus.h"

#include <CLI/CLI.hpp>

#include <atomic>
#include <string>
#include <vector>

namespace cli {

// Each command adds its subcommand to `app`; when it runs, it stores its exit status in `exitCode`.
void addCorpusCommand(CLI::App& app, int& exitCode);
void addTrainCommand(CLI::App& app, int& exitCode);
void addChatCommand(CLI::App& app, int& exitCode);
void addBenchCommand(CLI::App& app, int& exitCode);
void addDoctorCommand(CLI::App& app, int& exitCode);
#ifdef CHATBENCH_HAVE_KERAS
void addImportKerasCommand(CLI::App& app, int& exitCode);
#endif

// True when `fd` is a terminal that redraws a line ("\r" and ESC[K): a progress line is drawn
// there only. Not on a file or a pipe, nor where TERM is unset or "dumb" (an editor's shell, a
// CI log), where the escapes would show as characters.
bool progressTerminal(int fd);

// Set by the first Ctrl-C (or SIGTERM, SIGHUP) while a CancelWatch lives: long jobs stop after
// their current batch. Without one, the signal ends the process at once.
std::atomic<bool>& cancelFlag();
void installSignalHandlers();
// Marks a stretch in which something checks cancelFlag() often.
struct CancelWatch {
    CancelWatch();
    ~CancelWatch();
    CancelWatch(const CancelWatch&) = delete;
    CancelWatch& operator=(const CancelWatch&) = delete;
};

// A CLI11 check accepting exactly `names`, the engine's spellings.
CLI::IsMember oneOf(const std::vector<std::string>& names);
// A number in [lo, hi]; NaN and infinities are refused (CLI::Range lets NaN through).
CLI::Validator finiteIn(double lo, double hi);
// A whole number in [0, 2^64 - 1] (CLI11 would clamp larger ones silently).
CLI::Validator unsignedNumber();
// Makes every whole-number option of `app` and its commands (by its type name, INT or UINT) read
// decimal only: "010" is 10, "0x10" an error.
void decimalWholeNumbers(CLI::App& app);

// How a command loads its corpus: --format, --latin1, --pairing, --strict, --verbose.
struct CorpusFlags {
    std::string format = chatbench::formatName(chatbench::CorpusFormat::Auto);
    bool latin1 = false;
    std::string pairing = chatbench::pairingName(chatbench::Pairing::Consecutive);
    bool strict = false;
    bool verbose = false; // list every skipped record, not the first few
    int maxMiB = 512; // the most a loaded corpus may take
    int maxLineKiB = 64; // the longest line a corpus file may have
    chatbench::LoadOptions options() const;
};
void addCorpusFlags(CLI::App* cmd, CorpusFlags& flags);
inline constexpr size_t kWarningsShown = 5; // skipped records listed without --verbose

// Refuses (Error naming it) an output file that would overwrite one of `inputs` (the file itself
// by any path, or a file inside an input folder) or would land in a run folder, and one that is
// this command's standard output or error (`--out /dev/stdout > file`: the file would be
// replaced, not written to, and what else the command prints lost); `standardOutput` says how to
// print to standard output instead.
void checkOutputFile(const std::string& out, const std::vector<std::string>& inputs, const std::string& standardOutput);

// For a command that writes its output to standard output itself: the same checks of the file
// standard output is, where it is one (`>> corpus.tsv` would add to an input).
void checkStandardOutputFile(const std::vector<std::string>& inputs);

// Whether `out` is "-" or names the very file, pipe or terminal standard output is (/dev/stdout,
// /proc/self/fd/1, a link to its file).
bool namesStandardOutput(const std::string& out);

// Standard output was closed when the program started (it is /dev/null now): what is written to
// it is lost, and the command fails at the end.
bool& standardOutputWasClosed();

// Loads a corpus named on the command line and reports what was skipped on stderr: a summary
// and the first few warnings (all with --verbose).
chatbench::Corpus loadCorpusArg(const std::string& path, const CorpusFlags& flags, bool defaulted = false);

// What --corpus defaults to, for the options' help; an error loading the default says which
// rule chose it (`defaulted` above).
inline constexpr const char* kDefaultCorpusHelp
    = "default: $CHATBENCH_CORPUS when set, else datasets/chatbench in the working folder when there is one, else "
      "the bundled corpus";

// `text` as one shell word, quoted when it needs to be (for the commands the CLI suggests).
std::string shellWord(const std::string& text);

// `v` with `digits` decimals.
std::string fixed(double v, int digits);

} // namespace cli
