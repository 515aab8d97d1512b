#pragma once
// What training reports while it runs: per step, per epoch, and progress. Plain values that
// cross threads and files (a run's metrics.csv holds the EpochMetrics of every epoch).
//
//   cb.onEpoch = [](const chatbench::EpochMetrics& m) { plot(m.epoch, m.trainLoss); };

#include <cstdint>

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
    double etaSeconds = 0; // remaining, from this training call's mean step time
};

} // namespace chatbench
