#include "chatbench/corpusstats.h"

#include "chatbench/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace chatbench {

CorpusStats corpusStats(const Corpus& corpus, const TokenizerOptions& tokenizer)
{
    CorpusStats s;
    s.format = corpus.format;
    s.files = static_cast<int64_t>(corpus.files.size());
    s.pairs = static_cast<int64_t>(corpus.pairs.size());
    s.tokenizer = tokenizer;
    s.pairing = corpus.pairing;
    s.skippedRecords = corpus.skippedRecords();
    s.skippedFiles = corpus.skippedFiles();
    s.warnings = corpus.warnings;
    const Split split = splitPairs(corpus.pairs, kStatsValidationFraction, kStatsSeed);
    const Tokenizer tok = Tokenizer::build(split.train, tokenizer);
    s.vocabulary = tok.size();
    // A corpus too small to hold pairs out has no validation words to measure (it said 0.0%).
    s.validationOovRate = split.validation.empty() ? NAN : oovRate(tok, split.validation);
    auto bump = [](std::vector<int64_t>& h, size_t n) {
        if (h.size() <= n)
            h.resize(n + 1);
        ++h[n];
    };
    double sumPrompt = 0, sumResponse = 0;
    for (const auto& p : corpus.pairs) {
        const size_t lp = tok.split(p.prompt).size(), lr = tok.split(p.response).size();
        bump(s.promptLengths, lp);
        bump(s.responseLengths, lr);
        s.maxPromptWords = std::max(s.maxPromptWords, static_cast<int64_t>(lp));
        s.maxResponseWords = std::max(s.maxResponseWords, static_cast<int64_t>(lr));
        sumPrompt += static_cast<double>(lp);
        sumResponse += static_cast<double>(lr);
    }
    if (s.pairs > 0) {
        s.meanPromptWords = sumPrompt / static_cast<double>(s.pairs);
        s.meanResponseWords = sumResponse / static_cast<double>(s.pairs);
    }
    return s;
}

std::string toJson(const CorpusStats& s, const std::string& path)
{
    nlohmann::ordered_json j;
    j["path"] = path;
    j["format"] = formatName(s.format);
    j["files"] = s.files;
    j["pairs"] = s.pairs;
    j["pairing"] = pairingName(s.pairing);
    j["skipped_records"] = s.skippedRecords;
    j["skipped_files"] = s.skippedFiles;
    j["vocabulary"] = s.vocabulary;
    j["min_frequency"] = s.tokenizer.minFrequency;
    j["tokenizer"] = tokenizerModeName(s.tokenizer.mode);
    j["validation_oov_rate"]
        = std::isnan(s.validationOovRate) ? nlohmann::ordered_json() : nlohmann::ordered_json(s.validationOovRate);
    j["prompt_words"] = { { "mean", s.meanPromptWords }, { "max", s.maxPromptWords } };
    j["response_words"] = { { "mean", s.meanResponseWords }, { "max", s.maxResponseWords } };
    nlohmann::ordered_json warnings = nlohmann::ordered_json::array();
    for (const auto& w : s.warnings)
        warnings.push_back(
            { { "file", w.file }, { "line", w.line }, { "kind", kindName(w.kind) }, { "message", w.message } });
    j["warnings"] = warnings;
    // Paths that are not UTF-8 (file names are bytes) are shown with U+FFFD, not refused.
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string describe(const CorpusStats& s, const std::string& path, size_t maxWarnings)
{
    std::ostringstream oov;
    if (std::isnan(s.validationOovRate))
        oov << "- (no validation words: too few pairs to hold some out)";
    else
        oov << std::fixed << std::setprecision(1) << 100 * s.validationOovRate << "% of validation words";
    std::ostringstream o;
    o << std::fixed;
    o << "corpus       " << printable(path) << "\n"
      << "format       " << formatName(s.format) << " (" << s.files << " file(s))\n"
      << "pairs        " << s.pairs << " (" << pairingName(s.pairing) << " pairing)\n"
      << "vocabulary   " << s.vocabulary << " words at min frequency " << s.tokenizer.minFrequency << " ("
      << tokenizerModeName(s.tokenizer.mode) << " tokenizer, " << std::setprecision(0)
      << 100 * (1 - kStatsValidationFraction) << "% training split)\n"
      << "OOV rate     " << oov.str() << "\n"
      << std::setprecision(1) << "prompt       " << s.meanPromptWords << " words on average, " << s.maxPromptWords
      << " at most\n"
      << "response     " << s.meanResponseWords << " words on average, " << s.maxResponseWords << " at most\n";
    if (!s.warnings.empty())
        o << "warnings     " << describeWarnings(s.warnings, maxWarnings, "warning      ");
    return o.str();
}

} // namespace chatbench
