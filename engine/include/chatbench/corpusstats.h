#pragma once
// Corpus statistics as the Corpus tab and `chatbench-cli corpus stats` show them.
//
//   chatbench::Corpus c = chatbench::loadCorpus("datasets/chatbench");
//   chatbench::TokenizerOptions tok;  tok.minFrequency = 2;
//   chatbench::CorpusStats s = chatbench::corpusStats(c, tok);
//   std::cout << s.vocabulary << " words, OOV " << s.validationOovRate << "\n";
//   std::cout << chatbench::describe(s, "datasets/chatbench");   // the CLI's table
//
// The vocabulary is built on a 90% training split (seed 42) and the OOV rate measured on the
// other 10%, the way a run would see unseen questions.

#include "chatbench/corpus.h"
#include "chatbench/tokenizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace chatbench {

struct CorpusStats {
    CorpusFormat format = CorpusFormat::Auto; // the format that was used
    int64_t files = 0;
    int64_t pairs = 0;
    TokenizerOptions tokenizer; // the options the figures below were computed with
    int64_t vocabulary = 0; // words kept (specials included)
    double validationOovRate = 0; // share of validation-split words that become <unk>; NaN: no validation words
    std::vector<int64_t> promptLengths; // histogram: index = words in the prompt, value = pairs
    std::vector<int64_t> responseLengths; // the same for responses
    double meanPromptWords = 0;
    double meanResponseWords = 0;
    int64_t maxPromptWords = 0;
    int64_t maxResponseWords = 0;
    Pairing pairing = Pairing::Consecutive; // how the turns were paired
    int64_t skippedRecords = 0; // malformed records skipped while loading
    int64_t skippedFiles = 0; // unreadable files skipped while loading
    std::vector<CorpusWarning> warnings; // the corpus' load warnings
};

// The split the statistics use (so the vocabulary shown is the one training on 90% would build).
inline constexpr double kStatsValidationFraction = 0.1;
inline constexpr uint64_t kStatsSeed = 42;

CorpusStats corpusStats(const Corpus& corpus, const TokenizerOptions& tokenizer);

// As JSON (the CLI's --json, every warning) and as the aligned text table with the first
// `maxWarnings` warnings; `path` is what the user opened.
std::string toJson(const CorpusStats& stats, const std::string& path);
std::string describe(const CorpusStats& stats, const std::string& path, size_t maxWarnings = 5);

} // namespace chatbench
