#pragma once
// Every enum a user can name (on the command line, in a combo box, in a run's JSON files), with
// the one spelling of each value and its parser, plus the few words both front ends show.
//
//   auto f = chatbench::parseFormat("yaml");          // std::optional<CorpusFormat>
//   if (!f) throw chatbench::Error("unknown format; use " + chatbench::joinNames(chatbench::formatNames()));
//   std::string s = chatbench::precisionName(chatbench::Precision::BF16);    // "bf16"
//   std::cout << chatbench::formatDuration(125.0);   // "2m05s"
//
// The lists come back in the order a user should see them (the default first).

#include <optional>
#include <string>
#include <vector>

namespace chatbench {

enum class CorpusFormat { Auto, ChatterbotYaml, Tsv, Jsonl, Cornell, DialogText };
// How a conversation's turns become pairs: Consecutive makes every turn the response to the one
// before it; FirstRest (the Keras recipe) answers the first turn with the others joined.
enum class Pairing { Consecutive, FirstRest };

enum class TokenizerMode {
    Keras, // lowercase, Keras' default filter characters become spaces, split on spaces
    Punctuation // lowercase, every punctuation mark is a token of its own
};
enum class OptimizerKind { Adam, RMSprop, SGD };
enum class Precision { FP32, BF16, FP16 };
enum class DecodeMethod { Greedy, Beam, Sample };
enum class HandoffMode {
    Correct, // decoder starts from the encoder's final (h, c) and carries its state
    ZeroInit, // decoder starts from zeros (the bug)
    ResetEachStep // decoder starts right but loses its state after every step
};
enum class TrainStatus { Finished, EarlyStopped, Cancelled };
// What a benchmark row ran: a training precision, or fp32 with TF32 tensor-core maths (CUDA).
enum class BenchPrecision { FP32, BF16, FP16, TF32 };
// What a benchmark row timed.
enum class BenchUnit {
    TrainStep, // one optimizer step at the row's batch size
    Epoch, // one pass over the corpus at the preset's batch size
    ReplyLatency, // a whole greedy reply at batch 1
    ReplyThroughput, // whole greedy replies at batch N
    TracedReply // a whole greedy reply at batch 1 with the chat pane's state trace and checks
};

std::string formatName(CorpusFormat f); // "auto" / "yaml" / "tsv" / "jsonl" / "cornell" / "dialog"
std::optional<CorpusFormat> parseFormat(const std::string& name);
std::vector<std::string> formatNames();

std::string pairingName(Pairing p); // "consecutive" / "first-rest"
std::optional<Pairing> parsePairing(const std::string& name);
std::vector<std::string> pairingNames();

std::string tokenizerModeName(TokenizerMode m); // "keras" / "punct"
std::optional<TokenizerMode> parseTokenizerMode(const std::string& name);
std::vector<std::string> tokenizerModeNames();

std::string optimizerName(OptimizerKind k); // "adam" / "rmsprop" / "sgd"
std::optional<OptimizerKind> parseOptimizer(const std::string& name);
std::vector<std::string> optimizerNames();

std::string precisionName(Precision p); // "fp32" / "bf16" / "fp16"
std::optional<Precision> parsePrecision(const std::string& name);
std::vector<std::string> precisionNames();

std::string decodeMethodName(DecodeMethod m); // "greedy" / "beam" / "sample"
std::optional<DecodeMethod> parseDecodeMethod(const std::string& name);
std::vector<std::string> decodeMethodNames();

std::string handoffModeName(HandoffMode m); // "correct" / "zero-init" / "reset-each-step"
std::optional<HandoffMode> parseHandoffMode(const std::string& name);
std::vector<std::string> handoffModeNames();

std::string benchPrecisionName(BenchPrecision p); // "fp32" / "bf16" / "fp16" / "tf32"
std::optional<BenchPrecision> parseBenchPrecision(const std::string& name);
std::vector<std::string> benchPrecisionNames();
// The training precision a benchmark precision runs at (tf32 is fp32 with TF32 maths).
Precision trainingPrecision(BenchPrecision p);

// "train_step" / "epoch" / "reply_latency" / "reply_throughput" / "traced_reply"
std::string benchUnitName(BenchUnit u);
std::optional<BenchUnit> parseBenchUnit(const std::string& name);
std::vector<std::string> benchUnitNames();

// How a training call ended, as both front ends say it: "finished", "stopped early", "stopped".
std::string trainStatusWord(TrainStatus s);

// "a, b or c" — for messages that list the accepted names.
std::string joinNames(const std::vector<std::string>& names);

// A duration for people: "42s", "4m35s", "2h07m"; "?" when negative or not finite.
std::string formatDuration(double seconds);

} // namespace chatbench
