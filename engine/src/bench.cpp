#include "chatbench/bench.h"

#include "atomicfile.h"
#include "batches.h"
#include "bench_probes.h"
#include "chatbench/devices.h"
#include "chatbench/error.h"
#include "chatbench/trainer.h"
#include "fastdecode.h"
#include "model.h"
#include "torchutil.h"
#include "tracedreply.h"
#include "trainstep.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>
#include <unistd.h>

namespace fs = std::filesystem;

namespace chatbench {

namespace {

constexpr const char* kRaceFolder = "the race trains in a folder there (--race-epochs 0 leaves it out)";

// "cpu fp32 2 thread(s)", "cuda:0 bf16" (threads 0): how progress and notes name a combination.
std::string comboName(const std::string& device, BenchPrecision precision, int threads)
{
    return device + " " + benchPrecisionName(precision)
        + (threads > 0 ? " " + std::to_string(threads) + " thread(s)" : "");
}

double steadySeconds()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Useful FLOPs of one batch: the encoder over the real source tokens, the decoder and projection
// (and attention) over the real target tokens when training, over B × `steps` when replying
// (every step of a reply is real work). Padding is never counted, so skipping it is no "speed".
// ×3 when training.
double batchFlops(const ModelConfig& m, const Batch& b, int64_t steps, bool training)
{
    const int64_t B = b.source.size(0), S = b.source.size(1);
    const int64_t sourceTokens = b.lengths.sum().item<int64_t>();
    const int64_t targetTokens = training ? b.tokens : B * steps;
    // The per-target-token terms for one sequence of targetTokens steps ...
    double f = seq2seqForwardFlops(m, 1, S, targetTokens) - lstmFlops(m.layers, m.embedDim, m.hidden, 1, S);
    // ... with attention's keys over every real source token of the batch, not one row's S ...
    if (m.attention)
        f += 2.0 * m.hidden * m.hidden * static_cast<double>(sourceTokens - S);
    // ... plus the encoder over the real source tokens.
    f += lstmFlops(m.layers, m.embedDim, m.hidden, 1, sourceTokens);
    return training ? 3.0 * f : f;
}

BenchClock clockFor(const torch::Device& dev)
{
    if (dev.is_cuda()) // the device being timed, whichever is current
        return { steadySeconds, [index = dev.index()] { torch::cuda::synchronize(index); } };
    return { steadySeconds, [] {} };
}

bool tf32Allowed(const torch::Device& dev)
{
    const auto& ctx = at::globalContext();
    return dev.is_cuda() && ctx.allowTF32CuBLAS() && ctx.allowTF32CuDNN(at::Float32Op::RNN);
}

std::string dtypeName(c10::ScalarType type)
{
    switch (type) {
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kHalf: return "float16";
    default: return c10::toString(type);
    }
}

// The dtype the model's LSTMs produce on this batch under the row's autocast: what ran, as
// autocast and the libraries decide, not what was asked for. One name when the encoder (packed
// sequences) and the decoder agree, "encoder X, decoder Y" when they do not.
std::string lstmDtype(Seq2Seq& model, const Batch& b, const torch::Device& dev, Precision p)
{
    // The engine's layer (training, validation, the race): fp32 state, and its products on
    // operands of this type (rounded to bf16 even where MKL's bf16 GEMM is missing and ATen sums
    // them in fp32). Replies step through nn::LSTM under the row's autocast instead.
    if (model->maskedLstm())
        return dtypeName(model->gemmType());
    torch::NoGradGuard g;
    const bool wasTraining = model->is_training();
    model->eval();
    AutocastScope autocast(dev, p);
    const EncoderOutput enc = model->encode(b.source, b.lengths);
    const DecoderOutput dec = model->decodeHidden(b.input, enc.h, enc.c, enc);
    model->train(wasTraining);
    const std::string e = dtypeName(enc.outputs.scalar_type());
    // With attention the decoder's top is the combine layer's output; its LSTM state is what ran.
    const std::string d = dtypeName(dec.h.scalar_type());
    return e == d ? e : "encoder " + e + ", decoder " + d;
}

// The process-wide settings a benchmark changes (threads, determinism, TF32), put back however
// it ends: finished, cancelled or thrown.
class SettingsGuard {
public:
    SettingsGuard()
        : m_threads(torch::get_num_threads())
        , m_deterministic(at::globalContext().deterministicAlgorithms())
        , m_warnOnly(at::globalContext().deterministicAlgorithmsWarnOnly())
        , m_fill(at::globalContext().deterministicFillUninitializedMemory())
    {
    }
    ~SettingsGuard()
    {
        torch::set_num_threads(m_threads);
        at::globalContext().setDeterministicAlgorithms(m_deterministic, m_warnOnly);
        at::globalContext().setDeterministicFillUninitializedMemory(m_fill);
    }
    SettingsGuard(const SettingsGuard&) = delete;
    SettingsGuard& operator=(const SettingsGuard&) = delete;
    int threads() const { return m_threads; }

private:
    int m_threads;
    bool m_deterministic;
    bool m_warnOnly;
    bool m_fill;
    Tf32Scope m_tf32;
};

// ---- the units ----------------------------------------------------------------------------------

struct Bench {
    const BenchConfig& cfg;
    const BenchCallbacks& cb;
    TrainConfig train;
    std::vector<Example> examples;
    BenchReport& report;
    const Tokenizer* tok = nullptr; // the examples' vocabulary (words for the traced reply)
    int done = 0;
    int total = 0;
    static constexpr double kSettle = 0.05; // warm-up ends when two runs agree within 5%
    static constexpr double kEnergySeconds = 1.0; // energy over at least this much back-to-back work
    int maxWarmup() const { return cfg.warmup > 0 ? cfg.warmup + 10 : 0; }

    // The chat pane's traced reply is timed where chat runs it on the fast path.
    static bool tracesFast(const torch::Device& dev, BenchPrecision p, const ModelConfig& m)
    {
        return dev.is_cpu() && p == BenchPrecision::FP32 && !m.attention;
    }

    bool cancelled() const { return cb.cancel && cb.cancel->load(); }
    void progress(const std::string& what)
    {
        if (cb.onProgress)
            cb.onProgress(what, done, total);
    }

    // B examples in a fixed order (cycling when the corpus is smaller).
    std::vector<size_t> pick(int B) const
    {
        std::vector<size_t> idx;
        for (int i = 0; i < B; ++i)
            idx.push_back(static_cast<size_t>(i) % examples.size());
        return idx;
    }

    // A batch of B pairs as the trainer forms them: of the full batches of its plan (bucketed when
    // the preset buckets), the one with the median number of real tokens. B pairs in file order
    // would span every length of the corpus in one batch, which the trainer never runs. Without a
    // full batch (a corpus smaller than B), `pick(B)`.
    std::vector<size_t> trainerBatch(int B) const
    {
        auto plan = planBatches(examples, B, train.bucketing, cfg.seed);
        const auto tokens = [&](const std::vector<size_t>& idx) {
            size_t n = 0;
            for (size_t i : idx)
                n += examples[i].source.size() + examples[i].target.size();
            return n;
        };
        std::erase_if(plan, [&](const std::vector<size_t>& idx) { return idx.size() != static_cast<size_t>(B); });
        if (plan.empty())
            return pick(B);
        std::stable_sort(plan.begin(), plan.end(), [&](const auto& a, const auto& b) { return tokens(a) < tokens(b); });
        return plan[plan.size() / 2];
    }

    // Refuses, before minutes of work end in the allocator's refusal or the kernel's OOM killer
    // (`bench --batch 65536` on the seed preset grew past 24 GB and was killed), a batch whose
    // training step cannot fit in the memory this process may take. The estimate is twice what
    // the CPU step certainly holds at once: per real token and LSTM layer the gates, h, c and
    // tanh(c) (kept for the backward pass), and one layer's gate gradients (4H); per padded
    // position of the (B, T) tensors the embedded input and its gradient (E each) and each
    // layer's output (H). Measured peaks were
    // 2.4–2.8 times that floor (seed sizes: B = 2048 2.5 GB, B = 8192 8.3 GB, floors 0.9 and
    // 3.5 GB; E = H = 512, B = 2048: 5.7 GB in fp32 and 6.0 in bf16, floor 2.1 GB), so what fits is
    // not refused. A reply's floor is one step's logits and state per row. (CUDA's memory is its
    // own, and its out-of-memory back-off handles it.)
    void requireMemoryForBatches() const
    {
        const int64_t avail = availableMemory();
        if (avail <= 0)
            return;
        const ModelConfig& m = train.model;
        const double H = static_cast<double>(m.hidden), E = static_cast<double>(m.embedDim),
                     V = static_cast<double>(m.vocabSize), L = static_cast<double>(m.layers);
        for (int B : cfg.batchSizes) {
            double tokens = 0;
            size_t longestSource = 0, longestTarget = 0;
            for (size_t i : trainerBatch(B)) {
                tokens += static_cast<double>(examples[i].source.size() + examples[i].target.size());
                longestSource = std::max(longestSource, examples[i].source.size());
                longestTarget = std::max(longestTarget, examples[i].target.size());
            }
            const double padded = static_cast<double>(B) * static_cast<double>(longestSource + longestTarget);
            const double step = 2.0 * 4.0 * (tokens * (7.0 * H * L + 4.0 * H) + padded * (2.0 * E + L * H));
            const double reply = 4.0 * static_cast<double>(B) * (V + 4.0 * L * H);
            const double need = std::max(step, reply);
            if (need > static_cast<double>(avail))
                throw Error("batch " + std::to_string(B) + ": "
                    + (step >= reply ? "a training step of " + std::to_string(static_cast<int64_t>(tokens))
                                + " tokens needs at least "
                                     : "a reply needs at least ")
                    + gigabytes(need) + " of memory, and " + gigabytes(static_cast<double>(avail))
                    + " is available: lower --batch");
        }
    }

    static int gemmSize(const torch::Device& dev) { return dev.is_cuda() ? 4096 : 1024; }

    // The n × n matmul's rate on dev at precision (and the threads set), median of 9 runs after a
    // warm-up until two runs agree within 2%.
    static double gemm(const torch::Device& dev, BenchPrecision precision)
    {
        const int n = gemmSize(dev);
        const auto dtype = scalarType(trainingPrecision(precision));
        auto a = torch::randn({ n, n }, torch::TensorOptions().device(dev)).to(dtype);
        auto b = torch::randn({ n, n }, torch::TensorOptions().device(dev)).to(dtype);
        torch::NoGradGuard g;
        const auto work = [&] { (void)torch::mm(a, b); };
        warmUp(work, 3, 100, 0.02, clockFor(dev));
        const Timing t = timeRepeated(work, 0, 9, clockFor(dev));
        return 2.0 * n * static_cast<double>(n) * n / t.median / 1e9;
    }

    // Each combination's ceiling, the better of two passes over them all: whichever was timed
    // first in the process measured 10–20% under what it gave a second later (1 thread 155–177
    // against 187–194 GFLOP/s, 2 threads 305–323 against 364–381, on a 2-core Xeon), however long
    // its own warm-up.
    std::map<std::tuple<std::string, BenchPrecision, int>, double> ceilings {};

    template <typename Combos, typename Threads> void measureCeilings(const Combos& combos, Threads&& threadsOf)
    {
        for (int pass = 0; pass < 2 && !cancelled(); ++pass)
            for (const auto& c : combos) {
                if (cancelled())
                    break;
                const int threads = threadsOf(c);
                torch::set_num_threads(threads);
                setTf32(c.precision == BenchPrecision::TF32);
                double& best = ceilings[{ c.dev.str(), c.precision, c.dev.is_cpu() ? threads : 0 }];
                try {
                    best = std::max(best, gemm(c.dev, c.precision));
                } catch (const std::exception&) {
                    // The combination's own run meets the same error and says so.
                }
            }
        for (const auto& [key, gflops] : ceilings)
            if (gflops > 0) {
                const auto& [dev, precision, threads] = key;
                report.gemm.push_back({ dev, precision, threads, gemmSize(parseDevice(dev)), gflops });
            }
    }

    double ceiling(const torch::Device& dev, BenchPrecision precision)
    {
        const auto found = ceilings.find({ dev.str(), precision, dev.is_cpu() ? torch::get_num_threads() : 0 });
        return found == ceilings.end() ? 0.0 : found->second;
    }

    std::string ranDtype {}; // the combination's probed LSTM dtype
    bool ranTf32 = false;

    BenchRow row(const torch::Device& dev, BenchPrecision precision, int threads, int batch, BenchUnit unit)
    {
        BenchRow r;
        r.lstmDtype = ranDtype;
        r.tf32 = ranTf32;
        r.device = dev.str();
        r.precision = precision;
        r.threads = dev.is_cpu() ? threads : 0;
        r.batch = batch;
        r.unit = unit;
        return r;
    }

    void emit(BenchRow r, double ceiling)
    {
        r.gemmFraction = ceiling > 0 ? r.gflops / ceiling : 0;
        report.rows.push_back(r);
        if (cb.onRow)
            cb.onRow(r);
        ++done;
    }

    // Warms `work` up until its timings settle, then measures it with memory around the timed
    // repetitions only; then, where there is an energy counter, its energy per run over at least
    // kEnergySeconds of back-to-back runs (energyPerRun: the counter can move in coarse steps).
    template <typename Work>
    Timing measure(const torch::Device& dev, Work&& work, int warmup, int maxWarmup, int repeats, BenchRow& r)
    {
        MemoryProbe mem(dev);
        EnergyMeter energy(dev);
        const BenchClock clock = clockFor(dev);
        r.warmupRuns = warmUp(work, warmup, maxWarmup, kSettle, clock);
        mem.reset();
        Timing t = timeRepeated(work, 0, repeats, clock);
        r.peakMemoryBytes = mem.peak();
        r.energySource = energy.source();
        r.energyJoules = -1;
        if (energy.source() != "not available" && !cancelled()) {
            double total = 0, last = -1; // the counter's readings summed across a RAPL wrap-around
            auto joules = [&] {
                const double x = energy.joules();
                if (x < 0)
                    return -1.0;
                if (last >= 0)
                    total += energy.between(last, x);
                last = x;
                return total;
            };
            // Long runs (an epoch) get at least three of them.
            const double window = std::max(kEnergySeconds, 3 * t.median);
            r.energyJoules = energyPerRun(
                work, joules, window, window + 2.0 + 4 * t.median, clock, [this] { return cancelled(); });
        }
        return t;
    }

    void runCombo(const torch::Device& dev, BenchPrecision precision)
    {
        const Precision p = trainingPrecision(precision);
        const std::string label = dev.str() + " " + benchPrecisionName(precision);
        // Every math-mode switch the row depends on, set explicitly (put back by SettingsGuard):
        // torch 2.11 runs cuBLAS matmuls in IEEE fp32 but cuDNN's LSTM in TF32 by default, so an
        // "fp32" row would time a TF32 LSTM. TF32 is on for tf32 rows only.
        setTf32(precision == BenchPrecision::TF32);
        const bool tf32 = tf32Allowed(dev);
        const int usedThreads = torch::get_num_threads();
        const double ceiling = this->ceiling(dev, precision);

        // The trainer's own model, optimizer and step (clipping, loss scaling included).
        TrainConfig stepCfg = train;
        stepCfg.seed = cfg.seed;
        Stepper stepper = makeStepper(stepCfg, dev, p);
        Seq2Seq& model = stepper.model;
        auto trainOnce = [&](const Batch& b) { (void)trainStep(stepper, b); };
        ranDtype = lstmDtype(model, collate(examples, pick(2), dev), dev, p);
        ranTf32 = tf32;
        // Greedy replies for B prompts, exactly replyLength decoder steps (no early stop).
        auto reply = [&](const Batch& b) {
            torch::NoGradGuard g;
            model->eval();
            AutocastScope autocast(dev, p);
            EncoderOutput enc = model->encode(b.source, b.lengths);
            auto h = enc.h, c = enc.c;
            auto input = torch::full(
                { b.source.size(0), 1 }, Tokenizer::kStart, torch::TensorOptions().device(dev).dtype(torch::kInt64));
            for (int t = 0; t < cfg.replyLength; ++t) {
                DecoderOutput d = model->decode(input, h, c, enc);
                input = d.logits.argmax(-1);
                h = d.h;
                c = d.c;
            }
        };

        std::vector<int> batches = cfg.batchSizes;
        for (int B : batches) {
            if (cancelled())
                return;
            progress("train step " + label + " batch " + std::to_string(B));
            Batch b = collate(examples, trainerBatch(B), dev);
            BenchRow r = row(dev, precision, usedThreads, B, BenchUnit::TrainStep);
            r.time = measure(
                dev, [&] { trainOnce(b); }, cfg.warmup, maxWarmup(), cfg.repeats, r);
            r.tokensPerSecond = static_cast<double>(b.tokens) / r.time.median;
            r.gflops = batchFlops(train.model, b, b.input.size(1), true) / r.time.median / 1e9;
            emit(r, ceiling);
        }
        std::set<int> replyBatches(batches.begin(), batches.end());
        replyBatches.insert(1);
        for (int B : replyBatches) {
            if (cancelled())
                return;
            progress("reply " + label + " batch " + std::to_string(B));
            Batch b = collate(examples, pick(B), dev);
            BenchRow r
                = row(dev, precision, usedThreads, B, B == 1 ? BenchUnit::ReplyLatency : BenchUnit::ReplyThroughput);
            // A lone question on the CPU in fp32 takes the engine's untraced batch-1 path, as
            // Chatbot::reply does with DecodeOptions::trace off.
            if (B == 1 && tracesFast(dev, precision, train.model)) {
                model->eval();
                const FastDecoder fast(*model);
                const std::vector<int64_t>& source = examples[pick(1).front()].source;
                r.time = measure(
                    dev, [&] { (void)fast.reply(source, cfg.replyLength, /*stopAtEnd=*/false); }, cfg.warmup,
                    maxWarmup(), cfg.repeats, r);
            } else {
                r.time = measure(
                    dev, [&] { reply(b); }, cfg.warmup, maxWarmup(), cfg.repeats, r);
            }
            r.tokensPerSecond = static_cast<double>(B) * cfg.replyLength / r.time.median;
            r.gflops = batchFlops(train.model, b, cfg.replyLength, false) / r.time.median / 1e9;
            emit(r, ceiling);
        }
        if (tracesFast(dev, precision, train.model) && !cancelled()) {
            // The reply the chat pane asks for: every step's states, gates and top-k, and the
            // three checks (FLOPs counted for the reply alone, the checks' passes not).
            progress("traced reply " + label);
            model->eval();
            const FastDecoder fast(*model);
            const std::vector<int64_t>& source = examples[pick(1).front()].source;
            BenchRow r = row(dev, precision, usedThreads, 1, BenchUnit::TracedReply);
            DecodeOptions opt;
            r.time = measure(
                dev,
                [&] {
                    Reply rep;
                    tracedReply(fast, *model, *tok, source, opt, cfg.replyLength, /*stopAtEnd=*/false, rep);
                },
                cfg.warmup, maxWarmup(), cfg.repeats, r);
            r.tokensPerSecond = static_cast<double>(cfg.replyLength) / r.time.median;
            r.gflops = batchFlops(train.model, collate(examples, pick(1), dev), cfg.replyLength, false) / r.time.median
                / 1e9;
            emit(r, ceiling);
        }
        if (cfg.epoch && !cancelled()) {
            progress("epoch " + label);
            const auto plan = planBatches(examples, train.batchSize, true, cfg.seed);
            std::vector<Batch> all;
            int64_t tokens = 0;
            for (const auto& idx : plan) {
                all.push_back(collate(examples, idx, dev));
                tokens += all.back().tokens;
            }
            BenchRow r = row(dev, precision, usedThreads, train.batchSize, BenchUnit::Epoch);
            r.time = measure(
                dev,
                [&] {
                    for (const auto& b : all)
                        trainOnce(b);
                },
                // One epoch of warm-up at least (two at most, it is the longest unit): the step units
                // warmed the kernels up, but not for every batch shape of the corpus.
                std::min(cfg.warmup, 1), std::min(cfg.warmup, 2), std::max(1, std::min(cfg.repeats, 3)), r);
            r.tokensPerSecond = static_cast<double>(tokens) / r.time.median;
            double flops = 0;
            for (const auto& b : all)
                flops += batchFlops(train.model, b, b.input.size(1), true);
            r.gflops = flops / r.time.median / 1e9;
            emit(r, ceiling);
        }
    }

    void race(const Corpus& corpus, const std::string& device, BenchPrecision precision, int threads)
    {
        progress("race " + comboName(device, precision, threads));
        TrainConfig rc = train;
        rc.tf32 = precision == BenchPrecision::TF32;
        rc.epochs = cfg.raceEpochs;
        rc.device = device;
        rc.precision = trainingPrecision(precision);
        rc.threads = threads;
        RaceCurve curve;
        curve.device = device;
        curve.precision = precision;
        curve.threads = threads > 0 ? threads : torch::get_num_threads();
        const fs::path dir = fs::path(temporaryFolder(kRaceFolder))
            / processScratchName("chatbench-race-", static_cast<uint64_t>(done));
        TrainCallbacks tcb;
        tcb.cancel = cb.cancel;
        tcb.onEpoch = [&](const EpochMetrics& m) {
            curve.points.push_back({ m.elapsedSeconds, m.trainLoss, m.validationLoss });
        };
        try {
            chatbench::train(rc, corpus, dir.string(), tcb);
        } catch (...) {
            std::error_code ec;
            fs::remove_all(dir, ec);
            throw;
        }
        std::error_code ec;
        fs::remove_all(dir, ec);
        report.races.push_back(curve);
        if (cb.onRace)
            cb.onRace(curve);
        ++done;
    }
};

// Each list with its repeats left out, in the order given: "--batch 4,4" measures batch 4 once.
BenchConfig withoutRepeats(BenchConfig cfg)
{
    auto once = [](auto& list) {
        auto out = list;
        out.clear();
        for (const auto& v : list)
            if (std::find(out.begin(), out.end(), v) == out.end())
                out.push_back(v);
        list = std::move(out);
    };
    once(cfg.batchSizes);
    once(cfg.threads);
    once(cfg.devices);
    once(cfg.precisions);
    return cfg;
}

} // namespace

BenchReport runBench(const BenchConfig& given, const Corpus& corpus, const BenchCallbacks& cb)
{
    const BenchConfig cfg = withoutRepeats(given);
    if (corpus.pairs.empty())
        throw Error("the corpus has no pairs to benchmark on");
    if (cfg.repeats < 1 || cfg.warmup < 0 || cfg.replyLength < 1)
        throw Error("repeats and reply length must be at least 1, warm-up at least 0");
    for (int b : cfg.batchSizes)
        if (b < 1 || b > 65536)
            throw Error("batch sizes must be 1..65536");
    // As training's (config.json's threads): 5000 made as many threads on two cores, and a
    // refused thread creation blocked inside LibTorch's pool for good.
    // The default as well: the work before the first thread setting runs with it.
    int most = torch::get_num_threads();
    for (int t : cfg.threads) {
        if (t < 0 || t > 1024)
            throw Error("CPU threads must be 0..1024 (0: the default), not " + std::to_string(t));
        most = std::max(most, t);
    }
    requireThreadsStart(most); // before the first parallel region, which would end the process
    BenchReport report;
    report.created = isoNow();
    report.machine = machineInfo();
    report.label = report.machine.gpuName.empty()
        ? report.machine.cpuModel + " (" + std::to_string(report.machine.cores) + " cores)"
        : report.machine.gpuName;
    report.preset = cfg.preset;
    // The name the user knows the corpus by: the file or folder they opened.
    report.corpus = !corpus.path.empty() ? fs::path(corpus.path).lexically_normal().filename().string()
        : corpus.files.empty()           ? ""
                                         : fs::path(corpus.files.front()).parent_path().filename().string();
    if (report.corpus.empty() && !corpus.path.empty())
        report.corpus = fs::path(corpus.path).lexically_normal().parent_path().filename().string();
    report.corpusPairs = static_cast<int64_t>(corpus.pairs.size());
    report.corpusFingerprint = corpusFingerprint(corpus.pairs);

    Bench bench { cfg, cb, preset(cfg.preset), {}, report };
    if (cfg.embedDim > 0)
        bench.train.model.embedDim = cfg.embedDim;
    if (cfg.hidden > 0)
        bench.train.model.hidden = cfg.hidden;
    if (cfg.layers > 0)
        bench.train.model.layers = cfg.layers;
    validate(bench.train);
    const Split split = splitPairs(corpus.pairs, bench.train.validationFraction, cfg.seed);
    const Tokenizer tok = Tokenizer::build(split.train, bench.train.tokenizer);
    bench.train.model.vocabSize = tok.size();
    bench.examples = makeExamples(split.train, tok, bench.train.model);
    bench.tok = &tok;
    if (bench.examples.empty())
        throw Error("no usable pairs in the corpus after tokenizing");
    report.model = bench.train.model;

    if (std::find_if(cfg.devices.begin(), cfg.devices.end(), [](const std::string& d) { return parseDevice(d).is_cpu(); })
        != cfg.devices.end())
        bench.requireMemoryForBatches();

    // The combinations that can run here; the rest become notes.
    struct Combo {
        torch::Device dev;
        BenchPrecision precision;
        int threads;
    };
    std::vector<Combo> combos;
    const auto devices = listDevices();
    for (const std::string& name : cfg.devices) {
        const torch::Device dev = parseDevice(name);
        const std::string id = dev.is_cpu() ? "cpu" : "cuda:" + std::to_string(dev.index());
        auto info = std::find_if(devices.begin(), devices.end(), [&](const DeviceInfo& d) { return d.id == id; });
        if (info == devices.end()) {
            report.notes.push_back(
                name + ": not available on this machine (" + (dev.is_cuda() ? "no CUDA device" : "?") + ")");
            continue;
        }
        for (const BenchPrecision prec : cfg.precisions) {
            if (prec == BenchPrecision::TF32) {
                if (!dev.is_cuda()) {
                    report.notes.push_back(id + " tf32: TF32 is a CUDA tensor-core mode; skipped on the CPU");
                    continue;
                }
            } else {
                const Precision p = trainingPrecision(prec);
                auto s = std::find_if(info->precisions.begin(), info->precisions.end(),
                    [&](const PrecisionSupport& x) { return x.precision == p; });
                if (s != info->precisions.end() && !s->supported) {
                    report.notes.push_back(id + " " + benchPrecisionName(prec) + ": not supported (" + s->reason + ")");
                    continue;
                }
            }
            if (dev.is_cpu()) {
                // 0 is the default count: `--threads 0,2` where that is 2 measures it once.
                std::set<int> counts;
                for (int t : cfg.threads)
                    if (const int n = t > 0 ? t : torch::get_num_threads(); counts.insert(n).second)
                        combos.push_back({ dev, prec, n });
            } else {
                combos.push_back({ dev, prec, 0 });
            }
        }
    }
    const int perCombo = static_cast<int>(cfg.batchSizes.size())
        + static_cast<int>(std::set<int>(cfg.batchSizes.begin(), cfg.batchSizes.end()).size()
            + (std::count(cfg.batchSizes.begin(), cfg.batchSizes.end(), 1) ? 0 : 1))
        + (cfg.epoch ? 1 : 0);
    bench.total = perCombo * static_cast<int>(combos.size())
        + static_cast<int>(std::count_if(combos.begin(), combos.end(),
            [&](const Combo& c) { return Bench::tracesFast(c.dev, c.precision, bench.train.model); }));
    // One race for each device, precision and (on the CPU) thread count of the table: a race at
    // other settings than the rows beside it would compare other things (found by an outside pass:
    // `--threads 1` raced at the default count).
    std::vector<Combo> raceRuns;
    if (cfg.raceEpochs > 0) {
        // Said before minutes of timing, not as a note at the end that the race was skipped; the
        // runs of races whose bench was killed are removed.
        removeDeadProcessesFiles(temporaryFolder(kRaceFolder), "chatbench-race-", "", DeadProcesses::ScratchFolders);
        raceRuns = combos; // each once (withoutRepeats, and the thread counts above)
        bench.total += static_cast<int>(raceRuns.size());
    }

    {
        // Time the work as training runs it: with the preset's determinism setting.
        const SettingsGuard settings;
        setDeterminism(bench.train.deterministic);
        bench.measureCeilings(combos, [&](const Combo& c) { return c.threads > 0 ? c.threads : settings.threads(); });
        for (const auto& c : combos) {
            if (bench.cancelled())
                break;
            const int threads = c.threads > 0 ? c.threads : settings.threads();
            torch::set_num_threads(threads);
            const int doneBefore = bench.done;
            try {
                bench.runCombo(c.dev, c.precision);
            } catch (const std::exception& e) {
                // One combination failing (out of memory, a kernel missing for this dtype) costs
                // that combination only: its rows so far stay, the rest of the report is measured.
                report.notes.push_back(comboName(c.dev.str(), c.precision, c.dev.is_cpu() ? threads : 0)
                    + ": skipped after an error: " + inWords(e.what()));
                bench.done = doneBefore + perCombo + (Bench::tracesFast(c.dev, c.precision, bench.train.model) ? 1 : 0);
                releaseCachedMemory(c.dev);
            }
        }
    }
    for (const Combo& c : raceRuns) {
        if (bench.cancelled())
            break;
        const std::string dev = c.dev.str();
        const SettingsGuard settings; // training sets threads and determinism for the process
        try {
            bench.race(corpus, dev, c.precision, c.threads); // training sets its own maths mode (TrainConfig::tf32)
        } catch (const std::exception& e) {
            report.notes.push_back(
                "race " + comboName(dev, c.precision, c.threads) + ": skipped after an error: " + inWords(e.what()));
            ++bench.done;
            releaseCachedMemory(c.dev);
        }
    }
    if (bench.cancelled()) {
        report.cancelled = true;
        report.notes.push_back("cancelled before the end: the report holds what was measured");
    }
    bench.progress("done");
    return report;
}

} // namespace chatbench
