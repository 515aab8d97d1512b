#pragma once
// Conversation corpora: load prompt → response pairs from the formats chatbots are trained on.
//
//   chatbench::LoadOptions opt;                 // format Auto: detected from name and content
//   chatbench::Corpus c = chatbench::loadCorpus("datasets/chatbench", opt);
//   for (const auto& w : c.warnings) std::cerr << toString(w) << "\n";   // what was skipped, file:line
//   auto [train, val] = chatbench::splitPairs(c.pairs, 0.1, /*seed=*/42);
//
// Real corpora have bad records (the published chatterbot corpus has one among ~2000): by default a
// malformed record is skipped and reported as a warning with its file and line, and in a folder a
// file that cannot be read or parsed at all is skipped likewise. LoadOptions::strict throws
// chatbench::Error at the first problem instead. Nothing usable at all is always an Error.

#include "chatbench/names.h"

#include <cstdint>
#include <string>
#include <vector>

namespace chatbench {

struct Pair {
    std::string prompt; // what the user says
    std::string response; // what the bot should answer
    std::string file; // where the pair came from
    long line = 0; // 1-based line of the prompt in that file (0 when unknown)
};

struct LoadOptions {
    CorpusFormat format = CorpusFormat::Auto; // Auto detects from the path's name and content
    bool latin1 = false; // decode as Latin-1 instead of UTF-8 (Cornell always is)
    Pairing pairing = Pairing::Consecutive; // how a conversation's turns become pairs
    bool strict = false; // throw at the first malformed record or unreadable file
    // The most a corpus may take: its text plus a fixed cost per turn read and pair kept (YAML
    // aliases can expand a small file enormously, into long texts or millions of tiny turns). A
    // file larger than this is refused unread.
    int64_t maxTextBytes = int64_t(512) << 20;
    // The longest line a file may have. In TSV and JSON Lines a longer line is a malformed
    // record (skipped, or an error when strict); in the other formats it fails its file.
    int64_t maxLineBytes = int64_t(64) << 10;
    // With format Auto, a .csv that is not tab-separated is read as dialog text, as it was before
    // CSV files were refused: runs trained on one resume on the same pairs.
    bool csvAsDialog = false;
    // A CR or U+FEFF that a JSON or YAML escape put inside a text is kept there, as versions
    // before they were read as line breaks (and dropped) kept it: a run trained then resumes on
    // the pairs it was trained on.
    bool keepEscapedBreaks = false;
};

// Something skipped while loading: a record, a conversation or a whole file.
struct CorpusWarning {
    enum class Kind {
        Record, // a malformed record, skipped (strict loading throws instead)
        File, // a file that could not be read or parsed, skipped (strict loading throws instead)
        Note // well-formed but unusable: an empty file, a one-turn conversation, a file without pairs
    };
    std::string file;
    long line = 0; // 1-based; 0 = the file as a whole
    std::string message;
    Kind kind = Kind::Note;
};
std::string toString(const CorpusWarning& w); // "file:line: message" (no ":line" when it is 0)
std::string kindName(CorpusWarning::Kind k); // "record" / "file" / "note"
// For people: a summary line ("1 malformed record skipped, 2 notes") and then at most `max`
// warnings, one per line, each prefixed with `prefix`; the rest counted. "" when there are none.
std::string describeWarnings(
    const std::vector<CorpusWarning>& warnings, size_t max, const std::string& prefix = "warning: ");

struct Corpus {
    std::string path; // the file or folder it was loaded from (empty when built in memory)
    std::vector<Pair> pairs; // in file order
    CorpusFormat format = CorpusFormat::Auto; // the format that was used
    Pairing pairing = Pairing::Consecutive; // how the turns were paired
    std::vector<std::string> files; // files read, in order (skipped ones are not)
    std::vector<CorpusWarning> warnings; // in the order met
    int64_t skippedRecords() const; // warnings of kind Record
    int64_t skippedFiles() const; // warnings of kind File
};

// Loads a file or a folder. Throws Error when nothing usable is found, when the only input cannot
// be parsed, or (strict) at the first malformed record.
Corpus loadCorpus(const std::string& path, const LoadOptions& options = {});

// The pairs as a TSV corpus (one "prompt<TAB>response" line each) that loadCorpus reads back as
// the same pairs: tabs and line breaks (LF, CR) inside a text become spaces (the Keras tokenizer
// splits at tabs and LF anyway), and a prompt starting with '#' is written after a space so it
// is not a comment.
std::string pairsTsv(const std::vector<Pair>& pairs);
// The pairs as JSON Lines, {"prompt": …, "response": …} on each line: every text exactly as it is.
std::string pairsJsonl(const std::vector<Pair>& pairs);

// The format an export to `path` is written in, from the name loadCorpus reads it by: JSON Lines
// for .jsonl, .json and .ndjson, TSV for any other name. A .yml or .yaml name (which would be
// read as chatterbot YAML) is an Error naming the file.
CorpusFormat exportFormat(const std::string& path);
// Writes the pairs in exportFormat(path), replacing the file atomically. Throws Error naming the
// file when it cannot be written.
void writePairs(const std::vector<Pair>& pairs, const std::string& path);

// The format loadCorpus would use for `path` (Auto never comes back). Throws Error when the
// path does not exist or nothing fits.
CorpusFormat detectFormat(const std::string& path);

// A deterministic split: the same pairs and seed always give the same two sets. At least one
// pair goes to validation when there are two or more pairs and fraction > 0.
struct Split {
    std::vector<Pair> train;
    std::vector<Pair> validation;
};
Split splitPairs(const std::vector<Pair>& pairs, double validationFraction, uint64_t seed);

// The corpus a front end opens when the user names none: $CHATBENCH_CORPUS, else
// ./datasets/chatbench when it exists, else the bundled corpus where the project was built.
std::string defaultCorpusPath();

} // namespace chatbench
