#pragma once
// Benchmarks: how fast a chatbot trains and answers on each device and precision.
//
//   chatbench::BenchConfig cfg;                        // cpu fp32, batches 1/16/64, seed model
//   cfg.devices = {"cpu", "cuda:0"};
//   auto report = chatbench::runBench(cfg, corpus, {});
//   std::cout << chatbench::toJson(report);            // versioned schema "chatbench-bench"
//
// Timed units (BenchUnit): one training step, one epoch over the corpus, a full reply at batch 1
// (latency) and replies at batch N (throughput). The training units run the trainer's own step
// (the preset's optimizer, clipping, precision and determinism), not a copy of it; the step on a batch of the
// trainer's own plan (bucketed: the full batch with the median token count). Each is warmed up, repeated, and
// summarised by its median and spread; CUDA work is synchronised before every clock read. Derived figures: tokens/s,
// achieved GFLOP/s from the formula below, its ratio to a GEMM measured on the same device in the same run, peak
// memory, and energy where the machine exposes it.
//
// FLOP count (multiply-add = 2 FLOPs): an LSTM layer with input width I and H units does
// 2·4H·(I+H)·B FLOPs per step for B sequences; the output projection 2·H·V·B per decoder step
// With attention add, per decoder step, 2·2·S·H·B (scores and context over S source steps) and
// 2·2H·H·B (the combine layer), and once per source step 2·H·H·B (the key projection).
// A training step counts 3× the forward (forward + backward ≈ 2× forward). Only useful work is
// counted: the encoder over the real source tokens, the decoder, projection and attention over
// the real target tokens (a reply's every step is real), so skipping padding is not "speed".

#include "chatbench/config.h"
#include "chatbench/corpus.h"
#include "chatbench/names.h"

#include <atomic>
#include <functional>
#include <string>
#include <vector>

namespace chatbench {

// FLOPs of an LSTM stack: `layers` layers, first input `input`, `hidden` units, B sequences, T steps.
double lstmFlops(int layers, int64_t input, int64_t hidden, int64_t batch, int64_t steps);
// Forward FLOPs of the seq2seq model for B pairs with S source and T target steps.
double seq2seqForwardFlops(const ModelConfig& m, int64_t batch, int64_t sourceSteps, int64_t targetSteps);
// A training step: 3 × the forward.
double seq2seqTrainFlops(const ModelConfig& m, int64_t batch, int64_t sourceSteps, int64_t targetSteps);

struct Timing {
    std::vector<double> samples; // seconds, one per repetition, warm-up excluded
    double median = 0;
    double p10 = 0;
    double p90 = 0;
    double min = 0;
    double max = 0;
};
// Summary statistics of samples (seconds).
Timing summarise(std::vector<double> samples);

// The clock the harness reads. `sync` waits for queued device work (CUDA) before a read.
struct BenchClock {
    std::function<double()> now; // seconds
    std::function<void()> sync;
};
// Runs `work` warmup times untimed, then `repeats` times, each between two synced clock reads.
Timing timeRepeated(const std::function<void()>& work, int warmup, int repeats, const BenchClock& clock);
// Warm-up until the timings settle: clocks ramp up (a GPU idles at a fraction of its clock),
// caches and allocators fill. Runs `work` at least minRuns times, then until two consecutive runs
// take times within `settle` (relative) of each other, at most maxRuns times (minRuns 0: none). Returns the runs done.
int warmUp(const std::function<void()>& work, int minRuns, int maxRuns, double settle, const BenchClock& clock);
// Energy of one run of `work` (joules) from a cumulative counter that may move in coarse steps:
// NVML's total-energy counter moved about every 100 ms on an H200, so a window of a few short runs
// read either nothing or a whole step. Runs `work` back to back: until the counter moves (an
// update), then for at least minSeconds, then until it moves again; the energy between the two
// updates over the runs in between. -1 when `joules` gives -1 (no counter), when the counter
// does not move twice within maxSeconds, or when `stop` (checked after every run) says so.
double energyPerRun(const std::function<void()>& work, const std::function<double()>& joules, double minSeconds,
    double maxSeconds, const BenchClock& clock, const std::function<bool()>& stop = {});

struct BenchConfig {
    std::vector<std::string> devices = { "cpu" };
    std::vector<BenchPrecision> precisions = { BenchPrecision::FP32 }; // tf32: CUDA only
    std::vector<int> batchSizes = { 1, 16, 64 };
    std::vector<int> threads = { 0 }; // CPU thread counts to sweep; 0 = default
    std::string preset = "seed"; // model and training settings
    int embedDim = 0; // > 0: overrides the preset's embedding width
    int hidden = 0; // > 0: overrides the preset's LSTM units
    int layers = 0; // > 0: overrides the preset's layer count
    int warmup = 2; // warm-up runs at least; more until the timings settle (up to warmup + 10)
    int repeats = 5;
    bool epoch = true; // time a whole epoch over the corpus (at the preset's batch size)
    int replyLength = 20; // decoder steps per reply (no early stop, for comparable work)
    int raceEpochs = 0; // > 0: also train on each device for this many epochs, recording loss vs time
    uint64_t seed = 42;
};

struct BenchRow {
    std::string device; // "cpu", "cuda:0"
    BenchPrecision precision = BenchPrecision::FP32;
    int threads = 0; // CPU intra-op threads used
    int batch = 0;
    BenchUnit unit = BenchUnit::TrainStep;
    Timing time;
    double tokensPerSecond = 0;
    double gflops = 0; // achieved, from the formula above (0 for epoch)
    double gemmFraction = 0; // gflops / GEMM ceiling of the same device and precision
    int64_t peakMemoryBytes
        = 0; // CPU: the process's peak RSS during the unit (libraries included); CUDA: allocator peak
    double energyJoules = -1; // -1 = not available; per repetition, warm-up excluded
    std::string energySource; // "rapl", "nvml" or "not available"
    int warmupRuns = 0; // untimed runs before the timed ones (until the timings settled)
    // What ran, probed, not what was asked for: the dtype of the LSTM's output under the row's
    // autocast ("float32", "bfloat16", "float16"; empty in reports made before it was recorded),
    // and whether TF32 tensor-core maths was allowed for the matmuls and the cuDNN LSTM.
    std::string lstmDtype;
    bool tf32 = false;
};
// What the row's LSTMs ran in, short: "fp32", "tf32" (fp32 with TF32 maths), "bf16", "fp16", or
// "fp32/bf16" (encoder/decoder) when they differ; empty for reports made before it was recorded.
std::string lstmRanShort(const BenchRow& row);
// The row's precision as it ran: "fp32", "tf32", "bf16", or e.g. "bf16 (LSTM fp32/bf16)" when the
// probed LSTM dtype is not the one the precision asks for, "fp32 (TF32 maths)" when TF32 was on.
std::string precisionLabel(const BenchRow& row);

struct GemmCeiling {
    std::string device;
    BenchPrecision precision = BenchPrecision::FP32;
    int threads = 0; // CPU intra-op threads (0 on CUDA)
    int n = 0; // square matrix size
    double gflops = 0;
};

struct RacePoint {
    double seconds = 0;
    double loss = 0; // training loss (epoch mean)
    double validationLoss = 0;
};
struct RaceCurve {
    std::string device;
    BenchPrecision precision = BenchPrecision::FP32;
    int threads = 0;
    std::vector<RacePoint> points;
};

struct MachineInfo {
    std::string cpuModel;
    std::vector<std::string> cpuFlags; // the SIMD and matrix extensions that matter here
    int cores = 0;
    int64_t memoryBytes = 0;
    std::string gpuName; // first CUDA device, empty without one
    std::string gpuDriver;
    std::string torch, cuda, cudnn, onednn;
};

struct BenchReport {
    static constexpr int kSchemaVersion = 1;
    int schemaVersion = kSchemaVersion;
    std::string created; // ISO 8601, UTC
    std::string label; // a short name for charts (machine / GPU)
    MachineInfo machine;
    ModelConfig model;
    std::string preset;
    std::string corpus;
    int64_t corpusPairs = 0;
    uint64_t corpusFingerprint = 0; // of the pairs' text (0 = not recorded: reports made elsewhere)
    std::vector<GemmCeiling> gemm;
    std::vector<BenchRow> rows;
    std::vector<RaceCurve> races;
    std::vector<std::string> notes; // skipped or failed combinations and why
    // Stopped by BenchCallbacks::cancel before every unit was measured (a note says so too). Not
    // written to JSON: a cancel that came after the last unit leaves a whole report.
    bool cancelled = false;
};

struct BenchCallbacks {
    std::function<void(const std::string& what, int done, int total)> onProgress;
    std::function<void(const BenchRow&)> onRow;
    std::function<void(const RaceCurve&)> onRace;
    const std::atomic<bool>* cancel = nullptr;
};

MachineInfo machineInfo();
// Throws Error for an empty corpus or a malformed device name; unsupported device/precision
// pairs are skipped with a note, and a combination that fails while it runs (out of memory, a
// kernel error) becomes a note with the error while the other combinations are still measured.
BenchReport runBench(const BenchConfig& cfg, const Corpus& corpus, const BenchCallbacks& cb = {});

// Whether rows of two reports timed the same work, so that a ratio of their times means something:
// the same corpus (name and pair count, and fingerprint where both recorded one), the same model
// sizes (embedding, units, layers, attention) and the same batch (0 = any, for race curves).
// The vocabulary may differ by a few words between tokenizers of the same recipe.
bool sameWorkload(const BenchReport& a, int batchA, const BenchReport& b, int batchB);
// "chatterbot-english (2046 pairs), E=200 H=200, 1 layer, batch 50" (batch left out when 0).
std::string describeWorkload(const BenchReport& report, int batch);

std::string toJson(const BenchReport& report);
// Throws Error(file, line) for malformed JSON, another schema or a newer version, and for a
// field out of its range (a negative or zero time, times out of order, a batch of 0, more rows
// than any sweep makes), naming the field and its line.
BenchReport benchReportFromJson(const std::string& json, const std::string& file);
// The report in the file at `path` (a regular file of at most 64 MiB: a pipe or a huge file is
// refused unread). Throws Error as benchReportFromJson does.
BenchReport readBenchReport(const std::string& path);

} // namespace chatbench
