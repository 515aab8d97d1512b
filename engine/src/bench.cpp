#include "chatbench/bench.h"

#include "batches.h"
#include "chatbench/devices.h"
#include "chatbench/error.h"
#include "chatbench/trainer.h"
#include "jsondoc.h"
#include "model.h"
#include "text.h"
#include "torchutil.h"

#include <nlohmann/json.hpp>

#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;

namespace chatbench {

// ---- FLOPs ------------------------------------------------------------------------------------

double lstmFlops(int layers, int64_t input, int64_t hidden, int64_t batch, int64_t steps)
{
    double total = 0;
    for (int l = 0; l < layers; ++l) {
        const double in = l == 0 ? static_cast<double>(input) : static_cast<double>(hidden);
        total += 2.0 * 4.0 * static_cast<double>(hidden) * (in + static_cast<double>(hidden))
            * static_cast<double>(batch) * static_cast<double>(steps);
    }
    return total;
}

double seq2seqForwardFlops(const ModelConfig& m, int64_t B, int64_t S, int64_t T)
{
    const double H = m.hidden, V = static_cast<double>(m.vocabSize), b = static_cast<double>(B);
    double f = lstmFlops(m.layers, m.embedDim, m.hidden, B, S) + lstmFlops(m.layers, m.embedDim, m.hidden, B, T);
    f += 2.0 * H * V * b * static_cast<double>(T);
    if (m.attention) {
        f += 2.0 * H * H * b * static_cast<double>(S); // keys
        f += 2.0 * 2.0 * static_cast<double>(S) * H * b * static_cast<double>(T); // scores + context
        f += 2.0 * 2.0 * H * H * b * static_cast<double>(T); // combine
    }
    return f;
}

double seq2seqTrainFlops(const ModelConfig& m, int64_t B, int64_t S, int64_t T)
{
    return 3.0 * seq2seqForwardFlops(m, B, S, T);
}

// ---- timing -----------------------------------------------------------------------------------

Timing summarise(std::vector<double> samples)
{
    Timing t;
    t.samples = samples;
    if (samples.empty())
        return t;
    std::sort(samples.begin(), samples.end());
    auto at = [&](double q) {
        const double pos = q * static_cast<double>(samples.size() - 1);
        const size_t lo = static_cast<size_t>(std::floor(pos)), hi = static_cast<size_t>(std::ceil(pos));
        return samples[lo] + (samples[hi] - samples[lo]) * (pos - static_cast<double>(lo));
    };
    t.median = at(0.5);
    t.p10 = at(0.1);
    t.p90 = at(0.9);
    t.min = samples.front();
    t.max = samples.back();
    return t;
}

Timing timeRepeated(const std::function<void()>& work, int warmup, int repeats, const BenchClock& clock)
{
    for (int i = 0; i < warmup; ++i)
        work();
    std::vector<double> samples;
    for (int i = 0; i < repeats; ++i) {
        clock.sync(); // nothing queued from before may land in this sample
        const double t0 = clock.now();
        work();
        clock.sync(); // and all of this sample's work must have finished
        samples.push_back(clock.now() - t0);
    }
    return summarise(std::move(samples));
}

namespace {

double steadySeconds()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// FLOPs of one padded batch: the packed encoder over the real source tokens, everything else
// over the padded shape; `steps` decoder steps; ×3 when training.
double batchFlops(const ModelConfig& m, const Batch& b, int64_t steps, bool training)
{
    const int64_t B = b.source.size(0), S = b.source.size(1);
    const int64_t sourceTokens = b.lengths.sum().item<int64_t>();
    // Decoder + projection (+ attention) over the padded batch, minus its encoder term ...
    double f = seq2seqForwardFlops(m, B, S, steps) - lstmFlops(m.layers, m.embedDim, m.hidden, B, S);
    // ... plus the encoder over the real tokens only.
    f += lstmFlops(m.layers, m.embedDim, m.hidden, 1, sourceTokens);
    return training ? 3.0 * f : f;
}

BenchClock clockFor(const torch::Device& dev)
{
    if (dev.is_cuda())
        return { steadySeconds, [] { torch::cuda::synchronize(); } };
    return { steadySeconds, [] {} };
}

// ---- memory and energy ------------------------------------------------------------------------

struct MemoryProbe {
    torch::Device device;
    void reset()
    {
        if (device.is_cuda()) {
            c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
        } else {
            std::ofstream("/proc/self/clear_refs") << "5"; // resets VmHWM to the current RSS
        }
    }
    int64_t peak() const
    {
        if (device.is_cuda())
            return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index())
                .allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
                .peak;
        std::ifstream in("/proc/self/status");
        std::string line;
        while (std::getline(in, line))
            if (line.rfind("VmHWM:", 0) == 0)
                return std::stoll(line.substr(6)) * 1024;
        return 0;
    }
};

// Cumulative energy counters: RAPL (package 0) on the CPU, NVML on a GPU. read() < 0: none.
class EnergyMeter {
public:
    explicit EnergyMeter(const torch::Device& dev)
    {
        if (dev.is_cuda()) {
            m_nvml = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
            if (m_nvml) {
                using InitFn = int (*)();
                using HandleFn = int (*)(unsigned, void**);
                auto init = reinterpret_cast<InitFn>(::dlsym(m_nvml, "nvmlInit_v2"));
                auto handle = reinterpret_cast<HandleFn>(::dlsym(m_nvml, "nvmlDeviceGetHandleByIndex_v2"));
                m_energy = reinterpret_cast<EnergyFn>(::dlsym(m_nvml, "nvmlDeviceGetTotalEnergyConsumption"));
                if (init && handle && m_energy && init() == 0
                    && handle(static_cast<unsigned>(dev.index()), &m_device) == 0) {
                    unsigned long long mj = 0;
                    if (m_energy(m_device, &mj) == 0)
                        m_source = "nvml";
                }
            }
        } else if (std::ifstream("/sys/class/powercap/intel-rapl:0/energy_uj")) {
            m_source = "rapl";
            std::ifstream("/sys/class/powercap/intel-rapl:0/max_energy_range_uj") >> m_range;
        }
    }
    ~EnergyMeter()
    {
        if (m_nvml)
            ::dlclose(m_nvml);
    }
    const std::string& source() const { return m_source; }
    double joules() const
    {
        if (m_source == "nvml") {
            unsigned long long mj = 0;
            return m_energy(m_device, &mj) == 0 ? static_cast<double>(mj) / 1e3 : -1;
        }
        if (m_source == "rapl") {
            double uj = -1;
            std::ifstream("/sys/class/powercap/intel-rapl:0/energy_uj") >> uj;
            return uj < 0 ? -1 : uj / 1e6;
        }
        return -1;
    }
    double between(double before, double after) const
    {
        if (before < 0 || after < 0)
            return -1;
        double d = after - before;
        if (d < 0 && m_range > 0)
            d += m_range / 1e6; // the RAPL counter wrapped
        return d;
    }

private:
    using EnergyFn = int (*)(void*, unsigned long long*);
    void* m_nvml = nullptr;
    void* m_device = nullptr;
    EnergyFn m_energy = nullptr;
    std::string m_source = "not available";
    double m_range = 0;
};

std::string isoNow()
{
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

// ---- the units ----------------------------------------------------------------------------------

struct Bench {
    const BenchConfig& cfg;
    const BenchCallbacks& cb;
    TrainConfig train;
    std::vector<Example> examples;
    BenchReport& report;
    int done = 0;
    int total = 0;

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

    double gemm(const torch::Device& dev, const std::string& precision)
    {
        const int n = dev.is_cuda() ? 4096 : 1024;
        const auto dtype = precision == "bf16" ? torch::kBFloat16
            : precision == "fp16"              ? torch::kHalf
                                               : torch::kFloat32;
        auto a = torch::randn({ n, n }, torch::TensorOptions().device(dev)).to(dtype);
        auto b = torch::randn({ n, n }, torch::TensorOptions().device(dev)).to(dtype);
        torch::NoGradGuard g;
        const Timing t = timeRepeated([&] { (void)torch::mm(a, b); }, 2, 5, clockFor(dev));
        const double gflops = 2.0 * n * static_cast<double>(n) * n / t.median / 1e9;
        report.gemm.push_back({ dev.str(), precision, dev.is_cpu() ? torch::get_num_threads() : 0, n, gflops });
        return gflops;
    }

    BenchRow row(
        const torch::Device& dev, const std::string& precision, int threads, int batch, const std::string& unit)
    {
        BenchRow r;
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

    // Measures `work` with memory and energy around the timed repetitions.
    template <typename Work> Timing measure(const torch::Device& dev, Work&& work, int warmup, int repeats, BenchRow& r)
    {
        MemoryProbe mem { dev };
        EnergyMeter energy(dev);
        mem.reset();
        const double e0 = energy.joules();
        Timing t = timeRepeated(work, warmup, repeats, clockFor(dev));
        const double e1 = energy.joules();
        r.peakMemoryBytes = mem.peak();
        r.energySource = energy.source();
        const double joules = energy.between(e0, e1);
        r.energyJoules = joules >= 0 ? joules / std::max(1, repeats) : -1; // per repetition
        return t;
    }

    void runCombo(const torch::Device& dev, const std::string& precision)
    {
        const Precision p = precision == "tf32" ? Precision::FP32 : *parsePrecision(precision);
        if (dev.is_cuda())
            at::globalContext().setAllowTF32CuBLAS(precision == "tf32");
        const int usedThreads = torch::get_num_threads();
        const double ceiling = gemm(dev, precision);

        torch::manual_seed(cfg.seed);
        Seq2Seq model(train.model);
        model->to(dev);
        torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(train.learningRate));
        auto trainStep = [&](const Batch& b) {
            model->train();
            AutocastScope autocast(dev, p);
            EncoderOutput enc = model->encode(b.source, b.lengths);
            auto logits = model->decode(b.input, enc.h, enc.c, enc).logits;
            auto loss = torch::nn::functional::cross_entropy(
                logits.reshape({ -1, logits.size(-1) }).to(torch::kFloat32), b.target.reshape({ -1 }),
                torch::nn::functional::CrossEntropyFuncOptions().ignore_index(Tokenizer::kPad));
            opt.zero_grad();
            loss.backward();
            opt.step();
        };
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
            progress("train step " + dev.str() + " " + precision + " batch " + std::to_string(B));
            Batch b = collate(examples, pick(B), dev);
            BenchRow r = row(dev, precision, usedThreads, B, "train_step");
            r.time = measure(
                dev, [&] { trainStep(b); }, cfg.warmup, cfg.repeats, r);
            r.tokensPerSecond = static_cast<double>(b.tokens) / r.time.median;
            r.gflops = batchFlops(train.model, b, b.input.size(1), true) / r.time.median / 1e9;
            emit(r, ceiling);
        }
        std::set<int> replyBatches(batches.begin(), batches.end());
        replyBatches.insert(1);
        for (int B : replyBatches) {
            if (cancelled())
                return;
            progress("reply " + dev.str() + " " + precision + " batch " + std::to_string(B));
            Batch b = collate(examples, pick(B), dev);
            BenchRow r = row(dev, precision, usedThreads, B, B == 1 ? "reply_latency" : "reply_throughput");
            r.time = measure(
                dev, [&] { reply(b); }, cfg.warmup, cfg.repeats, r);
            r.tokensPerSecond = static_cast<double>(B) * cfg.replyLength / r.time.median;
            r.gflops = batchFlops(train.model, b, cfg.replyLength, false) / r.time.median / 1e9;
            emit(r, ceiling);
        }
        if (cfg.epoch && !cancelled()) {
            progress("epoch " + dev.str() + " " + precision);
            const auto plan = planBatches(examples, train.batchSize, true, cfg.seed);
            std::vector<Batch> all;
            int64_t tokens = 0;
            for (const auto& idx : plan) {
                all.push_back(collate(examples, idx, dev));
                tokens += all.back().tokens;
            }
            BenchRow r = row(dev, precision, usedThreads, train.batchSize, "epoch");
            r.time = measure(
                dev,
                [&] {
                    for (const auto& b : all)
                        trainStep(b);
                },
                /*warmup=*/0, std::max(1, std::min(cfg.repeats, 3)), r); // the step units above warmed every kernel up
            r.tokensPerSecond = static_cast<double>(tokens) / r.time.median;
            double flops = 0;
            for (const auto& b : all)
                flops += batchFlops(train.model, b, b.input.size(1), true);
            r.gflops = flops / r.time.median / 1e9;
            emit(r, ceiling);
        }
        if (dev.is_cuda())
            at::globalContext().setAllowTF32CuBLAS(false);
    }

    void race(const Corpus& corpus, const std::string& device, const std::string& precision, int threads)
    {
        progress("race " + device + " " + precision);
        TrainConfig rc = train;
        rc.epochs = cfg.raceEpochs;
        rc.device = device;
        rc.precision = precision == "tf32" ? Precision::FP32 : *parsePrecision(precision);
        rc.threads = threads;
        RaceCurve curve;
        curve.device = device;
        curve.precision = precision;
        curve.threads = threads > 0 ? threads : torch::get_num_threads();
        const fs::path dir
            = fs::temp_directory_path() / ("chatbench-race-" + std::to_string(::getpid()) + "-" + std::to_string(done));
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

std::string cpuModelName()
{
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("model name", 0) == 0)
            return line.substr(line.find(':') + 2);
    return "CPU";
}

} // namespace

MachineInfo machineInfo()
{
    MachineInfo m;
    m.cpuModel = cpuModelName();
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    static const std::set<std::string> wanted = { "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
        "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8" };
    while (std::getline(in, line)) {
        if (line.rfind("flags", 0) == 0) {
            std::istringstream ss(line.substr(line.find(':') + 1));
            std::string f;
            while (ss >> f)
                if (wanted.count(f))
                    m.cpuFlags.push_back(f);
            break;
        }
    }
    m.cores = static_cast<int>(std::thread::hardware_concurrency());
    const auto devices = listDevices();
    m.memoryBytes = devices.front().memoryBytes;
    if (devices.size() > 1)
        m.gpuName = devices[1].name;
    const EnvironmentInfo env = environmentInfo();
    m.torch = env.torchVersion;
    m.cuda = env.cudaVersion;
    m.cudnn = env.cudnnVersion;
    m.onednn = env.onednnVersion;
    if (env.cudaAvailable)
        m.gpuDriver = env.driverVersion;
    return m;
}

BenchReport runBench(const BenchConfig& cfg, const Corpus& corpus, const BenchCallbacks& cb)
{
    if (corpus.pairs.empty())
        throw Error("the corpus has no pairs to benchmark on");
    if (cfg.repeats < 1 || cfg.warmup < 0 || cfg.replyLength < 1)
        throw Error("repeats and reply length must be at least 1, warm-up at least 0");
    for (int b : cfg.batchSizes)
        if (b < 1 || b > 65536)
            throw Error("batch sizes must be 1..65536");
    BenchReport report;
    report.created = isoNow();
    report.machine = machineInfo();
    report.label = report.machine.gpuName.empty()
        ? report.machine.cpuModel + " (" + std::to_string(report.machine.cores) + " cores)"
        : report.machine.gpuName;
    report.preset = cfg.preset;
    report.corpus = corpus.files.empty() ? "" : fs::path(corpus.files.front()).parent_path().filename().string();
    report.corpusPairs = static_cast<int64_t>(corpus.pairs.size());

    Bench bench { cfg, cb, preset(cfg.preset), {}, report };
    const Split split = splitPairs(corpus.pairs, bench.train.validationFraction, cfg.seed);
    const Tokenizer tok = Tokenizer::build(split.train, bench.train.tokenizer);
    bench.train.model.vocabSize = tok.size();
    bench.examples = makeExamples(split.train, tok, bench.train.model);
    if (bench.examples.empty())
        throw Error("no usable pairs in the corpus after tokenizing");
    report.model = bench.train.model;

    // The combinations that can run here; the rest become notes.
    struct Combo {
        torch::Device dev;
        std::string precision;
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
        for (const std::string& prec : cfg.precisions) {
            if (prec == "tf32") {
                if (!dev.is_cuda()) {
                    report.notes.push_back(id + " tf32: TF32 is a CUDA tensor-core mode; skipped on the CPU");
                    continue;
                }
            } else {
                const auto p = parsePrecision(prec);
                if (!p)
                    throw Error("unknown precision '" + prec + "' (fp32, bf16, fp16, tf32)");
                auto s = std::find_if(info->precisions.begin(), info->precisions.end(),
                    [&](const PrecisionSupport& x) { return x.precision == *p; });
                if (s != info->precisions.end() && !s->supported) {
                    report.notes.push_back(id + " " + prec + ": not supported (" + s->reason + ")");
                    continue;
                }
            }
            if (dev.is_cpu()) {
                for (int t : cfg.threads)
                    combos.push_back({ dev, prec, t });
            } else {
                combos.push_back({ dev, prec, 0 });
            }
        }
    }
    const int perCombo = static_cast<int>(cfg.batchSizes.size())
        + static_cast<int>(std::set<int>(cfg.batchSizes.begin(), cfg.batchSizes.end()).size()
            + (std::count(cfg.batchSizes.begin(), cfg.batchSizes.end(), 1) ? 0 : 1))
        + (cfg.epoch ? 1 : 0);
    bench.total = perCombo * static_cast<int>(combos.size());
    std::vector<std::pair<std::string, std::string>> raceRuns;
    if (cfg.raceEpochs > 0) {
        std::set<std::pair<std::string, std::string>> seen;
        for (const auto& c : combos)
            if (seen.insert({ c.dev.str(), c.precision }).second)
                raceRuns.push_back({ c.dev.str(), c.precision });
        bench.total += static_cast<int>(raceRuns.size());
    }

    // Time the work as training runs it: with the preset's determinism setting.
    const bool wasDeterministic = at::globalContext().deterministicAlgorithms();
    const bool wasWarnOnly = at::globalContext().deterministicAlgorithmsWarnOnly();
    at::globalContext().setDeterministicAlgorithms(bench.train.deterministic, /*warn_only=*/true);
    const int defaultThreads = torch::get_num_threads();
    for (const auto& c : combos) {
        if (bench.cancelled())
            break;
        torch::set_num_threads(c.threads > 0 ? c.threads : defaultThreads);
        bench.runCombo(c.dev, c.precision);
    }
    torch::set_num_threads(defaultThreads);
    at::globalContext().setDeterministicAlgorithms(wasDeterministic, wasWarnOnly);
    for (const auto& [dev, prec] : raceRuns) {
        if (bench.cancelled())
            break;
        bench.race(corpus, dev, prec, 0);
    }
    if (bench.cancelled())
        report.notes.push_back("cancelled before the end: the report holds what was measured");
    bench.progress("done");
    return report;
}

// ---- JSON -----------------------------------------------------------------------------------------

namespace {
using nlohmann::ordered_json;

ordered_json timingJson(const Timing& t)
{
    return { { "median_s", t.median }, { "p10_s", t.p10 }, { "p90_s", t.p90 }, { "min_s", t.min }, { "max_s", t.max },
        { "samples_s", t.samples } };
}

Timing timingFrom(const nlohmann::json& j)
{
    Timing t = summarise(j.at("samples_s").get<std::vector<double>>());
    t.median = j.at("median_s").get<double>();
    t.p10 = j.at("p10_s").get<double>();
    t.p90 = j.at("p90_s").get<double>();
    t.min = j.at("min_s").get<double>();
    t.max = j.at("max_s").get<double>();
    return t;
}
} // namespace

std::string toJson(const BenchReport& r)
{
    ordered_json j;
    j["format"] = "chatbench-bench";
    j["schema_version"] = r.schemaVersion;
    j["created"] = r.created;
    j["label"] = r.label;
    j["machine"] = { { "cpu_model", r.machine.cpuModel }, { "cpu_flags", r.machine.cpuFlags },
        { "cores", r.machine.cores }, { "memory_bytes", r.machine.memoryBytes }, { "gpu_name", r.machine.gpuName },
        { "gpu_driver", r.machine.gpuDriver }, { "torch", r.machine.torch }, { "cuda", r.machine.cuda },
        { "cudnn", r.machine.cudnn }, { "onednn", r.machine.onednn } };
    j["preset"] = r.preset;
    j["model"] = { { "vocab_size", r.model.vocabSize }, { "embed_dim", r.model.embedDim }, { "hidden", r.model.hidden },
        { "layers", r.model.layers }, { "attention", r.model.attention },
        { "max_source_length", r.model.maxSourceLength }, { "max_target_length", r.model.maxTargetLength } };
    j["corpus"] = { { "name", r.corpus }, { "pairs", r.corpusPairs } };
    auto& g = j["gemm"] = ordered_json::array();
    for (const auto& x : r.gemm)
        g.push_back({ { "device", x.device }, { "precision", x.precision }, { "threads", x.threads }, { "n", x.n },
            { "gflops", x.gflops } });
    auto& rows = j["rows"] = ordered_json::array();
    for (const auto& x : r.rows)
        rows.push_back(
            { { "device", x.device }, { "precision", x.precision }, { "threads", x.threads }, { "batch", x.batch },
                { "unit", x.unit }, { "time", timingJson(x.time) }, { "tokens_per_second", x.tokensPerSecond },
                { "gflops", x.gflops }, { "gemm_fraction", x.gemmFraction }, { "peak_memory_bytes", x.peakMemoryBytes },
                { "energy_joules", x.energyJoules >= 0 ? ordered_json(x.energyJoules) : ordered_json(nullptr) },
                { "energy_source", x.energySource } });
    auto& races = j["races"] = ordered_json::array();
    for (const auto& c : r.races) {
        ordered_json pts = ordered_json::array();
        for (const auto& p : c.points)
            pts.push_back({ { "seconds", p.seconds }, { "loss", p.loss },
                { "validation_loss",
                    std::isfinite(p.validationLoss) ? ordered_json(p.validationLoss) : ordered_json(nullptr) } });
        races.push_back(
            { { "device", c.device }, { "precision", c.precision }, { "threads", c.threads }, { "points", pts } });
    }
    j["notes"] = r.notes;
    return j.dump(2) + "\n";
}

BenchReport benchReportFromJson(const std::string& text, const std::string& file)
{
    const nlohmann::json j = parseDocument(text, file, "chatbench-bench", "not a chatbench benchmark report");
    BenchReport r;
    try {
        r.schemaVersion = j.at("schema_version").get<int>();
        if (r.schemaVersion > BenchReport::kSchemaVersion || r.schemaVersion < 1)
            throw Error(file, 0,
                "report schema version " + std::to_string(r.schemaVersion) + " is not supported (this build reads 1.."
                    + std::to_string(BenchReport::kSchemaVersion) + ")");
        r.created = j.value("created", "");
        r.label = j.value("label", "");
        const auto& m = j.at("machine");
        r.machine.cpuModel = m.value("cpu_model", "");
        r.machine.cpuFlags = m.value("cpu_flags", std::vector<std::string> {});
        r.machine.cores = m.value("cores", 0);
        r.machine.memoryBytes = m.value("memory_bytes", int64_t(0));
        r.machine.gpuName = m.value("gpu_name", "");
        r.machine.gpuDriver = m.value("gpu_driver", "");
        r.machine.torch = m.value("torch", "");
        r.machine.cuda = m.value("cuda", "");
        r.machine.cudnn = m.value("cudnn", "");
        r.machine.onednn = m.value("onednn", "");
        r.preset = j.value("preset", "");
        const auto& md = j.at("model");
        r.model.vocabSize = md.at("vocab_size").get<int64_t>();
        r.model.embedDim = md.at("embed_dim").get<int>();
        r.model.hidden = md.at("hidden").get<int>();
        r.model.layers = md.at("layers").get<int>();
        r.model.attention = md.value("attention", false);
        r.model.maxSourceLength = md.value("max_source_length", 22);
        r.model.maxTargetLength = md.value("max_target_length", 74);
        r.corpus = j.at("corpus").value("name", "");
        r.corpusPairs = j.at("corpus").value("pairs", int64_t(0));
        for (const auto& g : j.at("gemm"))
            r.gemm.push_back({ g.at("device").get<std::string>(), g.at("precision").get<std::string>(),
                g.value("threads", 0), g.at("n").get<int>(), g.at("gflops").get<double>() });
        for (const auto& x : j.at("rows")) {
            BenchRow row;
            row.device = x.at("device").get<std::string>();
            row.precision = x.at("precision").get<std::string>();
            row.threads = x.at("threads").get<int>();
            row.batch = x.at("batch").get<int>();
            row.unit = x.at("unit").get<std::string>();
            row.time = timingFrom(x.at("time"));
            row.tokensPerSecond = x.at("tokens_per_second").get<double>();
            row.gflops = x.at("gflops").get<double>();
            row.gemmFraction = x.at("gemm_fraction").get<double>();
            row.peakMemoryBytes = x.at("peak_memory_bytes").get<int64_t>();
            row.energyJoules = x.at("energy_joules").is_null() ? -1 : x.at("energy_joules").get<double>();
            row.energySource = x.value("energy_source", "not available");
            r.rows.push_back(row);
        }
        for (const auto& c : j.value("races", nlohmann::json::array())) {
            RaceCurve curve;
            curve.device = c.at("device").get<std::string>();
            curve.precision = c.at("precision").get<std::string>();
            curve.threads = c.value("threads", 0);
            for (const auto& p : c.at("points"))
                curve.points.push_back({ p.at("seconds").get<double>(), p.at("loss").get<double>(),
                    p.at("validation_loss").is_null() ? NAN : p.at("validation_loss").get<double>() });
            r.races.push_back(curve);
        }
        r.notes = j.value("notes", std::vector<std::string> {});
    } catch (const nlohmann::json::exception& e) {
        throw Error(file, 0, std::string("bad benchmark report: ") + e.what());
    }
    return r;
}

} // namespace chatbench
