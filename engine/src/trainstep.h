#pragma once
// One optimizer step exactly as training runs it (private: Torch types). The trainer's loop and
// the benchmark's timed "train_step" and "epoch" units both call trainStep, so what the bench
// times is what training does: the configured optimizer, clipping, precision and loss scaling.

#include "batches.h"
#include "chatbench/config.h"
#include "cpugemm.h"
#include "laneteam.h"
#include "model.h"

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace chatbench {

// The optimizer a config asks for (RMSprop with Keras' defaults for the seed recipe).
std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const TrainConfig& cfg, std::vector<torch::Tensor> params);

// A model, its optimizer and the settings a step needs.
struct Stepper {
    Seq2Seq model { nullptr };
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    torch::Device device { torch::kCPU };
    Precision precision = Precision::FP32;
    double teacherForcing = 1.0; // probability of feeding the true previous token
    double clipNorm = 0; // gradient-norm clip; 0 = off
    // Dynamic loss scaling (on for fp16): the loss is multiplied by lossScale before backward, the
    // gradients divided after; a step with non-finite gradients is skipped and halves the scale,
    // 2000 good steps in a row double it. Both numbers are kept in state.json between calls.
    bool lossScaling = false;
    double lossScale = 65536.0;
    int64_t goodSteps = 0; // steps since the scale last changed
    // Out of device memory: a batch is run as several passes of fewer pairs, their gradients
    // summed — the update of one pass, up to rounding (with dropout or scheduled sampling, each
    // pass draws its own random numbers). The pairs per pass back off B, ⌈B/2⌉, ⌈B/4⌉, … 1 and
    // stay there for the rest of the run; out of memory at one pair is an Error. (The optimizer
    // step itself is not split.) 0: every batch in one pass.
    int64_t passRows = 0;
    // Called before each pass with its number of pairs (tests simulate out-of-memory here).
    std::function<void(int64_t rows)> beforePass;
    // CPU training steps split the batch's rows across the cores (trainStep); the threads that
    // run the parts beyond the caller's own, made on first use.
    std::shared_ptr<LaneTeam> partThreads;
    // RMSprop's running squares of the rows a sparse embedding gradient left out: each such step
    // multiplies them by alpha, and the engine's update counts those steps per row instead, then
    // applies them one by one (the same floats) when the row is next touched or the state is
    // settled (settleOptimizer). Each entry is one table's.
    struct OwedDecays {
        torch::Tensor squares; // the optimizer's square_avg they are owed to
        float alpha = 0;
        std::vector<uint32_t> steps; // per row: the multiplications by alpha not yet applied
    };
    std::vector<OwedDecays> owedDecays;
};

// Applies every decay s's update still owes (Stepper::owedDecays), so that the optimizer state is
// what torch::optim's update would have left: before anything reads or saves that state.
void settleOptimizer(Stepper& s);

// The memory this process may still take (MemAvailable, or what its cgroup leaves if less), in
// bytes; 0 when neither can be read.
int64_t availableMemory();
// "1.2 GB", for messages.
std::string gigabytes(double bytes);

// Refuses, before LibTorch's allocator would (or the kernel's OOM killer, first), a model whose
// `bytesPerParameter` × parameters exceed the memory this process may still take: "<doing> this
// model needs about 137 GB of memory (… parameters: …), and 20.1 GB is available: <fix>".
// `file` (may be empty) is named in the error.
void requireMemoryFor(const ModelConfig& model, double bytesPerParameter, const std::string& doing,
    const std::string& fix, const std::string& file = {});

// model + optimizer built from `cfg` (seeded with cfg.seed) on `device` at `precision`.
Stepper makeStepper(const TrainConfig& cfg, const torch::Device& device, Precision precision);

// How many row slices a CPU training step of `batch` runs side by side (1: one
// pass with ATen and MKL spreading each operation over the cores).
int64_t stepParts(const Stepper& s, const Batch& batch);

// Runs task(0) … task(tasks − 1) on `cores` threads (the caller's and s.partThreads), the
// caller's ATen and MKL threads shared out among them (one each on two cores) and its own
// settings back afterwards; thread j takes tasks j, j + cores, … Rethrows the first task's error,
// in task order, once all have ended.
void onCores(Stepper& s, int64_t tasks, int64_t cores, const std::function<void(int64_t)>& task);

// The bf16 forms of the weights (StepBf16Weights) into `forms`, made on `cores` of the caller's,
// for a bf16 training step or an evaluation: nothing where the products are fp32 or ATen's.
void makeStepBf16Weights(Stepper& s, int64_t cores, std::optional<StepBf16Weights>& forms);

// How many cores a CPU evaluation spreads `batches` batches over, one batch at a time each (1:
// one batch after another, each operation spread over the cores).
int64_t evaluationCores(const Stepper& s, int64_t batches);

// Masked cross-entropy summed over the batch's real target tokens; `correct` (when given) gets
// the argmax hits. Training with teacherForcing < 1 feeds the model's own guesses at random.
torch::Tensor lossSum(Stepper& s, const Batch& batch, bool training, double teacherForcing, int64_t* correct);

struct StepOutcome {
    double loss = 0; // mean over the batch's real target tokens
    double lossSum = 0; // summed over them
    bool applied = false; // false: fp16 overflow (scale halved) or a non-finite loss; weights unchanged
};
// Adds a step to the epoch's loss: only steps whose update was applied count (a step skipped
// for an fp16 overflow may have an infinite loss, which would poison the epoch's mean).
void countStep(double& epochLossSum, int64_t& epochTokens, const StepOutcome& step, int64_t tokens);

// Random numbers for one training step: on the CPU repeatable from (seed, step) alone.
// The CPU generator (dropout on the CPU, scheduled sampling's coins there) is reseeded from
// (seed, step) every step. A CUDA generator is never reseeded: reseeding makes cuDNN rebuild its
// LSTM dropout state on the next call (costly, and it restarts the dropout stream); it is seeded
// once when the stepper is made and its state travels in the checkpoint (saveRngState/loadRngState).
void seedStep(uint64_t seed, int64_t step);
// The state of `device`'s default generator (CUDA: seed and offset; CPU: the whole generator).
torch::Tensor rngState(const torch::Device& device);
void setRngState(const torch::Device& device, const torch::Tensor& state);
// forward, backward, (fp16: unscale and overflow check), clip, optimizer step.
StepOutcome trainStep(Stepper& s, const Batch& batch);

// Runs `pass` over `batch` in row slices of at most s.passRows pairs (the whole batch when 0).
// Out of device memory (c10::OutOfMemoryError) in a pass: the device's cached memory is freed,
// s.passRows halved, `restart` called and every pass run again; at one pair it is an Error
// naming the device. Other errors pass through untouched.
void inPasses(Stepper& s, const Batch& batch, const std::function<void()>& restart,
    const std::function<void(const Batch&)>& pass);

} // namespace chatbench
