#pragma once
// Conversation corpora: load prompt → response pairs from the formats chatbots are trained on.
//
//   chatbench::LoadOptions opt;                 // format Auto: detected from name and content
//   chatbench::Corpus c = chatbench::loadCorpus("datasets/chatbench", opt);
//   auto [train, val] = chatbench::splitPairs(c.pairs, 0.1, /*seed=*/42);
//
// Every loader throws chatbench::Error naming the file and line of the first problem.

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
};

struct Corpus {
    std::string path; // the file or folder it was loaded from (empty when built in memory)
    std::vector<Pair> pairs; // in file order
    CorpusFormat format = CorpusFormat::Auto; // the format that was used
    std::vector<std::string> files; // files read, in order
    std::vector<std::string> warnings; // skipped files or records, "file:line: why"
};

// Loads a file or a folder. Throws Error when nothing usable is found or a record is malformed.
Corpus loadCorpus(const std::string& path, const LoadOptions& options = {});

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
