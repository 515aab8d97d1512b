#pragma once
// Training a chatbot into a run folder, with callbacks, cancel, checkpoints and exact resume.
//
//   chatbench::TrainConfig cfg = chatbench::preset("quick");
//   chatbench::Corpus corpus = chatbench::loadCorpus("datasets/chatbench");
//   std::atomic<bool> cancel{false};
//   chatbench::TrainCallbacks cb;
//   cb.onEpoch = [](const chatbench::EpochMetrics& m) { std::cout << m.validationLoss << "\n"; };
//   cb.cancel = &cancel;                       // checked once per batch
//   auto result = chatbench::train(cfg, corpus, "runs/demo", cb);
//   // later: chatbench::resume("runs/demo", corpus, cb);  continues where it stopped
//
// A run folder holds config.json, vocab.json, metrics.csv, state.json and ckpt-<step>.pt
// (model + optimizer); every file is written atomically (temporary file + rename).

#include "chatbench/chatbot.h"
#include "chatbench/config.h"
#include "chatbench/corpus.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace chatbench {

struct StepMetrics {
    int epoch = 0; // 0-based epoch of this step
    int64_t step = 0; // optimizer steps done so far (1 after the first)
    double loss = 0; // masked cross-entropy of this batch
    double tokensPerSecond = 0; // target tokens / step wall time
    double elapsedSeconds = 0; // training wall time so far (resumes add up)
};

struct EpochMetrics {
    int epoch = 0; // 0-based
    int64_t step = 0; // optimizer steps done at the end of the epoch
    double trainLoss = 0; // token-weighted mean over the epoch
    double validationLoss = 0; // NaN when there is no validation set
    double validationAccuracy = 0; // next-token accuracy on validation (teacher forced)
    double perplexity = 0; // exp(validationLoss), or exp(trainLoss) without validation
    double seconds = 0; // wall time of the epoch
    double tokensPerSecond = 0; // training tokens / second over the epoch
    double elapsedSeconds = 0; // training wall time so far
};

struct TrainProgress {
    int epoch = 0;
    int epochs = 0;
    int64_t step = 0;
    int64_t totalSteps = 0;
    double elapsedSeconds = 0;
    double etaSeconds = 0; // remaining, from this session's mean step time
};

struct TrainCallbacks {
    std::function<void(const StepMetrics&)> onStep;
    std::function<void(const EpochMetrics&)> onEpoch;
    std::function<void(const TrainProgress&)> onProgress; // after every step
    std::function<void(const std::string&)> onLog; // notes: device fallback, skipped pairs, checkpoints
    // After every epoch (and once before the first step): a copy of the current weights to chat
    // with from another thread while training goes on.
    std::function<void(const Chatbot&)> onSnapshot;
    const std::atomic<bool>* cancel = nullptr; // set to stop after the current batch
};

enum class TrainStatus { Finished, EarlyStopped, Cancelled };

struct TrainResult {
    TrainStatus status = TrainStatus::Finished;
    int epochsDone = 0;
    int64_t steps = 0;
    double finalTrainLoss = 0;
    double bestValidationLoss = 0;
    double seconds = 0; // wall time of this call
    std::string device; // what was used after fallbacks
    Precision precision = Precision::FP32;
    std::vector<EpochMetrics> history; // every epoch of the run, resumed ones included
};

// Trains a new run in `runDir` (created; must not already hold a run). Throws Error.
TrainResult train(
    const TrainConfig& cfg, const Corpus& corpus, const std::string& runDir, const TrainCallbacks& cb = {});

// Continues a run from its last checkpoint, bit-for-bit as if it had not stopped (same device and
// threads). `epochs` > 0 changes the target epoch count. The corpus must be the one the run
// started with (checked by fingerprint). Throws Error.
TrainResult resume(const std::string& runDir, const Corpus& corpus, const TrainCallbacks& cb = {}, int epochs = 0);

// The config.json of a run folder. Throws Error.
TrainConfig loadRunConfig(const std::string& runDir);

// A 64-bit fingerprint of the pairs' text (order-sensitive).
uint64_t corpusFingerprint(const std::vector<Pair>& pairs);

} // namespace chatbench
