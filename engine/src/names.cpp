#include "chatbench/names.h"

#include <array>
#include <cmath>
#include <utility>

namespace chatbench {

namespace {

// One table per enum: the value and its one spelling, in the order users see them.
template <typename E, size_t N> using Table = std::array<std::pair<E, const char*>, N>;

template <typename E, size_t N> std::string nameIn(const Table<E, N>& table, E value)
{
    for (const auto& [v, name] : table)
        if (v == value)
            return name;
    return table.front().second;
}

template <typename E, size_t N> std::optional<E> parseIn(const Table<E, N>& table, const std::string& name)
{
    for (const auto& [v, n] : table)
        if (name == n)
            return v;
    return std::nullopt;
}

template <typename E, size_t N> std::vector<std::string> namesIn(const Table<E, N>& table)
{
    std::vector<std::string> out;
    for (const auto& entry : table)
        out.push_back(entry.second);
    return out;
}

constexpr Table<CorpusFormat, 6> kFormats { { { CorpusFormat::Auto, "auto" }, { CorpusFormat::ChatterbotYaml, "yaml" },
    { CorpusFormat::Tsv, "tsv" }, { CorpusFormat::Jsonl, "jsonl" }, { CorpusFormat::Cornell, "cornell" },
    { CorpusFormat::DialogText, "dialog" } } };
constexpr Table<Pairing, 2> kPairings { { { Pairing::Consecutive, "consecutive" },
    { Pairing::FirstRest, "first-rest" } } };
constexpr Table<TokenizerMode, 2> kTokenizerModes { { { TokenizerMode::Keras, "keras" },
    { TokenizerMode::Punctuation, "punct" } } };
constexpr Table<OptimizerKind, 3> kOptimizers { { { OptimizerKind::Adam, "adam" },
    { OptimizerKind::RMSprop, "rmsprop" }, { OptimizerKind::SGD, "sgd" } } };
constexpr Table<Precision, 3> kPrecisions { { { Precision::FP32, "fp32" }, { Precision::BF16, "bf16" },
    { Precision::FP16, "fp16" } } };
constexpr Table<DecodeMethod, 3> kDecodeMethods { { { DecodeMethod::Greedy, "greedy" }, { DecodeMethod::Beam, "beam" },
    { DecodeMethod::Sample, "sample" } } };
constexpr Table<HandoffMode, 3> kHandoffModes { { { HandoffMode::Correct, "correct" },
    { HandoffMode::ZeroInit, "zero-init" }, { HandoffMode::ResetEachStep, "reset-each-step" } } };
constexpr Table<BenchPrecision, 4> kBenchPrecisions { { { BenchPrecision::FP32, "fp32" },
    { BenchPrecision::BF16, "bf16" }, { BenchPrecision::FP16, "fp16" }, { BenchPrecision::TF32, "tf32" } } };
constexpr Table<BenchUnit, 5> kBenchUnits { { { BenchUnit::TrainStep, "train_step" }, { BenchUnit::Epoch, "epoch" },
    { BenchUnit::ReplyLatency, "reply_latency" }, { BenchUnit::ReplyThroughput, "reply_throughput" },
    { BenchUnit::TracedReply, "traced_reply" } } };
constexpr Table<TrainStatus, 3> kTrainStatus { { { TrainStatus::Finished, "finished" },
    { TrainStatus::EarlyStopped, "stopped early" }, { TrainStatus::Cancelled, "stopped" } } };

} // namespace

std::string formatName(CorpusFormat f)
{
    return nameIn(kFormats, f);
}
std::optional<CorpusFormat> parseFormat(const std::string& name)
{
    return parseIn(kFormats, name);
}
std::vector<std::string> formatNames()
{
    return namesIn(kFormats);
}

std::string pairingName(Pairing p)
{
    return nameIn(kPairings, p);
}

std::optional<Pairing> parsePairing(const std::string& name)
{
    return parseIn(kPairings, name);
}

std::vector<std::string> pairingNames()
{
    return namesIn(kPairings);
}

std::string tokenizerModeName(TokenizerMode m)
{
    return nameIn(kTokenizerModes, m);
}
std::optional<TokenizerMode> parseTokenizerMode(const std::string& name)
{
    return parseIn(kTokenizerModes, name);
}
std::vector<std::string> tokenizerModeNames()
{
    return namesIn(kTokenizerModes);
}

std::string optimizerName(OptimizerKind k)
{
    return nameIn(kOptimizers, k);
}
std::optional<OptimizerKind> parseOptimizer(const std::string& name)
{
    return parseIn(kOptimizers, name);
}
std::vector<std::string> optimizerNames()
{
    return namesIn(kOptimizers);
}

std::string precisionName(Precision p)
{
    return nameIn(kPrecisions, p);
}
std::optional<Precision> parsePrecision(const std::string& name)
{
    return parseIn(kPrecisions, name);
}
std::vector<std::string> precisionNames()
{
    return namesIn(kPrecisions);
}

std::string decodeMethodName(DecodeMethod m)
{
    return nameIn(kDecodeMethods, m);
}
std::optional<DecodeMethod> parseDecodeMethod(const std::string& name)
{
    return parseIn(kDecodeMethods, name);
}
std::vector<std::string> decodeMethodNames()
{
    return namesIn(kDecodeMethods);
}

std::string handoffModeName(HandoffMode m)
{
    return nameIn(kHandoffModes, m);
}
std::optional<HandoffMode> parseHandoffMode(const std::string& name)
{
    return parseIn(kHandoffModes, name);
}
std::vector<std::string> handoffModeNames()
{
    return namesIn(kHandoffModes);
}

std::string benchPrecisionName(BenchPrecision p)
{
    return nameIn(kBenchPrecisions, p);
}
std::optional<BenchPrecision> parseBenchPrecision(const std::string& name)
{
    return parseIn(kBenchPrecisions, name);
}
std::vector<std::string> benchPrecisionNames()
{
    return namesIn(kBenchPrecisions);
}

Precision trainingPrecision(BenchPrecision p)
{
    switch (p) {
    case BenchPrecision::BF16: return Precision::BF16;
    case BenchPrecision::FP16: return Precision::FP16;
    case BenchPrecision::FP32:
    case BenchPrecision::TF32: return Precision::FP32;
    }
    return Precision::FP32;
}

std::string benchUnitName(BenchUnit u)
{
    return nameIn(kBenchUnits, u);
}
std::optional<BenchUnit> parseBenchUnit(const std::string& name)
{
    return parseIn(kBenchUnits, name);
}
std::vector<std::string> benchUnitNames()
{
    return namesIn(kBenchUnits);
}

std::string trainStatusWord(TrainStatus s)
{
    return nameIn(kTrainStatus, s);
}

std::string joinNames(const std::vector<std::string>& names)
{
    std::string out;
    for (size_t i = 0; i < names.size(); ++i) {
        if (i > 0)
            out += i + 1 == names.size() ? " or " : ", ";
        out += names[i];
    }
    return out;
}

std::string formatDuration(double seconds)
{
    if (!std::isfinite(seconds) || seconds < 0)
        return "?";
    const long s = std::lround(seconds);
    auto two = [](long v) { return (v < 10 ? "0" : "") + std::to_string(v); };
    if (s >= 3600)
        return std::to_string(s / 3600) + "h" + two((s % 3600) / 60) + "m";
    if (s >= 60)
        return std::to_string(s / 60) + "m" + two(s % 60) + "s";
    return std::to_string(s) + "s";
}

} // namespace chatbench
