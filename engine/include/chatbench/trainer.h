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
// The run folder's layout is owned by runs.h; every file in it is written atomically.

#include "chatbench/chatbot.h"
#include "chatbench/config.h"
#include "chatbench/corpus.h"
#include "chatbench/metrics.h"
#include "chatbench/names.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace chatbench {

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

struct TrainResult {
    TrainStatus status = TrainStatus::Finished;
    int epochsDone = 0;
    int64_t steps = 0;
    double finalTrainLoss = std::numeric_limits<double>::quiet_NaN(); // NaN before the first epoch
    double bestValidationLoss = std::numeric_limits<double>::quiet_NaN(); // NaN without validation
    double seconds = 0; // wall time of this call
    std::string device; // what was used after fallbacks
    Precision precision = Precision::FP32;
    std::vector<EpochMetrics> history; // every epoch of the run, resumed ones included
    std::string runDir; // set when the run folder was moved while training: where it is now
};

// Trains a new run in `runDir` (created; must not already hold a run). Throws Error.
TrainResult train(
    const TrainConfig& cfg, const Corpus& corpus, const std::string& runDir, const TrainCallbacks& cb = {});

// What a resume may change: the settings outside the recipe (recipeJson). Each one given replaces
// config.json's, which is rewritten with it; unset ones stay as they are.
struct ResumeChanges {
    int epochs = 0; // > 0: the new target epoch count (at least the epochs done)
    std::optional<int> patience, checkpointEverySteps, keepCheckpoints, threads;
    std::optional<std::string> device;
    std::optional<bool> tf32;
};

// Continues a run from its last checkpoint, bit-for-bit as if it had not stopped (on the same
// device and threads; other threads round sums in another order). The corpus must be the one the
// run started with (checked by fingerprint). Throws Error.
TrainResult resume(
    const std::string& runDir, const Corpus& corpus, const TrainCallbacks& cb, const ResumeChanges& changes);
// The same on the corpus the run names in its config.json (path, format, encoding), reloaded.
TrainResult resume(const std::string& runDir, const TrainCallbacks& cb, const ResumeChanges& changes);
// Resumes changing at most the epoch count (`epochs` > 0).
TrainResult resume(const std::string& runDir, const Corpus& corpus, const TrainCallbacks& cb = {}, int epochs = 0);
TrainResult resume(const std::string& runDir, const TrainCallbacks& cb = {}, int epochs = 0);

// "finished after 3 epoch(s), 120 steps in 12.3 s on cpu fp32; final train loss 2.1234, best
// validation loss 3.4567" — how both front ends report a training call.
std::string describe(const TrainResult& result);

// A 64-bit fingerprint of the pairs' text (order-sensitive).
uint64_t corpusFingerprint(const std::vector<Pair>& pairs);

// Whether a fingerprint a run recorded is `actual`. Runs before it was written as hex text held it
// as a JSON number, which a tool that reads numbers as doubles (jq, a script) rounds past 2^53 when
// it rewrites the file: such a number matches the fingerprint it was rounded from.
bool sameCorpusFingerprint(uint64_t recorded, uint64_t actual);

// A run's corpus file read as versions before this one read it, with the CR and U+FEFF escapes in
// its texts kept (they are line breaks now, or dropped), when that gives the pairs of the
// fingerprint the run recorded: what such a run trained on. No pairs otherwise.
Corpus corpusReadAsEarlier(const std::string& path, const TrainConfig& cfg, uint64_t recorded);

} // namespace chatbench
