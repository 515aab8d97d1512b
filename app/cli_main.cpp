// chatbench-cli: the headless workbench — corpus checks, training, chat and the environment doctor.

#include "chatbench/bench.h"
#include "chatbench/chatbot.h"
#include "chatbench/config.h"
#include "chatbench/corpus.h"
#include "chatbench/devices.h"
#include "chatbench/error.h"
#include "chatbench/tokenizer.h"
#include "chatbench/trainer.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace chatbench;

namespace {

std::atomic<bool> g_cancel { false };

void onSignal(int)
{
    if (g_cancel.exchange(true))
        std::_Exit(130); // a second Ctrl-C leaves at once
}

std::string defaultCorpus()
{
    if (const char* env = std::getenv("CHATBENCH_CORPUS"))
        return env;
    if (fs::exists("datasets/chatbench"))
        return "datasets/chatbench";
    return CHATBENCH_DATASETS_DIR "/chatbench";
}

std::string duration(double seconds)
{
    if (!std::isfinite(seconds) || seconds < 0)
        return "?";
    const long s = std::lround(seconds);
    std::ostringstream o;
    if (s >= 3600)
        o << s / 3600 << "h" << std::setw(2) << std::setfill('0') << (s % 3600) / 60 << "m";
    else if (s >= 60)
        o << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
    else
        o << s << "s";
    return o.str();
}

std::string fixed(double v, int digits)
{
    std::ostringstream o;
    o << std::fixed << std::setprecision(digits) << v;
    return o.str();
}

Corpus loadWith(const std::string& path, const std::string& format, bool latin1)
{
    LoadOptions opt;
    const auto f = parseFormat(format);
    if (!f)
        throw Error("unknown corpus format '" + format + "' (auto, yaml, tsv, jsonl, cornell, dialog)");
    opt.format = *f;
    opt.latin1 = latin1;
    return loadCorpus(path, opt);
}

std::string checkLine(const TraceChecks& c)
{
    auto mark = [](bool ok) { return ok ? "ok" : "FAIL"; };
    std::ostringstream o;
    o << "handoff " << mark(c.handoffEqual) << " (max diff " << c.handoffMaxDiff << "), state carried "
      << mark(c.stateCarried) << " (max diff " << c.carriedMaxDiff << "), step-wise == teacher-forced "
      << mark(c.teacherForcedEqual) << " (max diff " << c.teacherForcedMaxDiff << ")";
    return o.str();
}

// ---- corpus -------------------------------------------------------------------------------

struct CorpusArgs {
    std::string path;
    std::string format = "auto";
    bool latin1 = false;
    int minFrequency = 1;
    std::string mode = "keras";
    bool json = false;
};

int corpusStats(const CorpusArgs& a)
{
    const Corpus c = loadWith(a.path, a.format, a.latin1);
    TokenizerOptions topt;
    topt.minFrequency = a.minFrequency;
    topt.mode = a.mode == "punct" ? TokenizerMode::Punctuation : TokenizerMode::Keras;
    const Split split = splitPairs(c.pairs, 0.1, 42);
    const Tokenizer tok = Tokenizer::build(split.train, topt);
    std::map<size_t, int> promptLengths, responseLengths;
    size_t maxPrompt = 0, maxResponse = 0;
    double sumPrompt = 0, sumResponse = 0;
    for (const auto& p : c.pairs) {
        const size_t lp = tok.split(p.prompt).size(), lr = tok.split(p.response).size();
        ++promptLengths[lp];
        ++responseLengths[lr];
        maxPrompt = std::max(maxPrompt, lp);
        maxResponse = std::max(maxResponse, lr);
        sumPrompt += static_cast<double>(lp);
        sumResponse += static_cast<double>(lr);
    }
    const double n = static_cast<double>(c.pairs.size());
    const double oov = oovRate(tok, split.validation);
    if (a.json) {
        nlohmann::ordered_json j;
        j["path"] = a.path;
        j["format"] = formatName(c.format);
        j["files"] = c.files.size();
        j["pairs"] = c.pairs.size();
        j["vocabulary"] = tok.size();
        j["min_frequency"] = a.minFrequency;
        j["validation_oov_rate"] = oov;
        j["prompt_words"] = { { "mean", sumPrompt / n }, { "max", maxPrompt } };
        j["response_words"] = { { "mean", sumResponse / n }, { "max", maxResponse } };
        j["warnings"] = c.warnings;
        std::cout << j.dump(2) << "\n";
        return 0;
    }
    std::cout << "corpus       " << a.path << "\n"
              << "format       " << formatName(c.format) << " (" << c.files.size() << " file(s))\n"
              << "pairs        " << c.pairs.size() << "\n"
              << "vocabulary   " << tok.size() << " words at min frequency " << a.minFrequency << " ("
              << tokenizerModeName(topt.mode) << " tokenizer, 90% training split)\n"
              << "OOV rate     " << fixed(100 * oov, 1) << "% of validation words\n"
              << "prompt       " << fixed(sumPrompt / n, 1) << " words on average, " << maxPrompt << " at most\n"
              << "response     " << fixed(sumResponse / n, 1) << " words on average, " << maxResponse << " at most\n";
    for (const auto& w : c.warnings)
        std::cout << "warning      " << w << "\n";
    return 0;
}

int corpusValidate(const CorpusArgs& a)
{
    const Corpus c = loadWith(a.path, a.format, a.latin1);
    std::cout << "ok: " << c.pairs.size() << " pairs in " << c.files.size() << " file(s), format "
              << formatName(c.format) << "\n";
    for (const auto& w : c.warnings)
        std::cout << "warning: " << w << "\n";
    return 0;
}

// ---- train --------------------------------------------------------------------------------

struct TrainArgs {
    std::string corpus;
    std::string format = "auto";
    bool latin1 = false;
    std::string preset = "seed";
    std::string run = "runs/latest";
    bool resume = false;
    bool quiet = false;
    std::optional<int> epochs, batchSize, hidden, embed, layers, maxSource, maxTarget, patience, threads, minFreq,
        maxVocab, checkpointEvery;
    std::optional<double> lr, dropout, teacherForcing, clip, valFraction;
    std::optional<uint64_t> seed;
    std::optional<std::string> optimizer, device, precision, tokenizer;
    bool attention = false, noAttention = false, sharedEmbedding = false, nondeterministic = false, noBucketing = false;
};

TrainConfig configFrom(const TrainArgs& a)
{
    TrainConfig c = preset(a.preset);
    if (a.epochs)
        c.epochs = *a.epochs;
    if (a.batchSize)
        c.batchSize = *a.batchSize;
    if (a.hidden)
        c.model.hidden = *a.hidden;
    if (a.embed)
        c.model.embedDim = *a.embed;
    if (a.layers)
        c.model.layers = *a.layers;
    if (a.maxSource)
        c.model.maxSourceLength = *a.maxSource;
    if (a.maxTarget)
        c.model.maxTargetLength = *a.maxTarget;
    if (a.patience)
        c.patience = *a.patience;
    if (a.threads)
        c.threads = *a.threads;
    if (a.minFreq)
        c.tokenizer.minFrequency = *a.minFreq;
    if (a.maxVocab)
        c.tokenizer.maxSize = *a.maxVocab;
    if (a.checkpointEvery)
        c.checkpointEverySteps = *a.checkpointEvery;
    if (a.lr)
        c.learningRate = *a.lr;
    if (a.dropout)
        c.model.dropout = *a.dropout;
    if (a.teacherForcing)
        c.teacherForcing = *a.teacherForcing;
    if (a.clip)
        c.clipNorm = *a.clip;
    if (a.valFraction)
        c.validationFraction = *a.valFraction;
    if (a.seed)
        c.seed = *a.seed;
    if (a.optimizer)
        c.optimizer = *parseOptimizer(*a.optimizer);
    if (a.device)
        c.device = *a.device;
    if (a.precision)
        c.precision = *parsePrecision(*a.precision);
    if (a.tokenizer)
        c.tokenizer.mode = *a.tokenizer == "punct" ? TokenizerMode::Punctuation : TokenizerMode::Keras;
    if (a.attention)
        c.model.attention = true;
    if (a.noAttention)
        c.model.attention = false;
    if (a.sharedEmbedding)
        c.model.sharedEmbedding = true;
    if (a.nondeterministic)
        c.deterministic = false;
    if (a.noBucketing)
        c.bucketing = false;
    c.corpus = a.corpus;
    c.corpusFormat = *parseFormat(a.format);
    c.latin1 = a.latin1;
    return c;
}

int trainCommand(const TrainArgs& a)
{
    const bool tty = ::isatty(STDOUT_FILENO);
    TrainCallbacks cb;
    cb.cancel = &g_cancel;
    cb.onLog = [](const std::string& m) { std::cout << "note: " << m << std::endl; };
    double lastLoss = NAN;
    cb.onStep = [&](const StepMetrics& m) { lastLoss = m.loss; };
    cb.onProgress = [&](const TrainProgress& p) {
        if (!tty || a.quiet)
            return;
        std::cout << "\r\033[Kepoch " << p.epoch + 1 << "/" << p.epochs << "  step " << p.step << "/" << p.totalSteps
                  << "  loss " << fixed(lastLoss, 3) << "  elapsed " << duration(p.elapsedSeconds) << "  ETA "
                  << duration(p.etaSeconds) << std::flush;
    };
    cb.onEpoch = [&](const EpochMetrics& m) {
        if (tty && !a.quiet)
            std::cout << "\r\033[K";
        if (a.quiet)
            return;
        std::cout << "epoch " << std::setw(3) << m.epoch + 1 << "  train loss " << fixed(m.trainLoss, 4)
                  << "  val loss " << (std::isfinite(m.validationLoss) ? fixed(m.validationLoss, 4) : "-")
                  << "  val acc "
                  << (std::isfinite(m.validationAccuracy) ? fixed(100 * m.validationAccuracy, 1) + "%" : "-") << "  "
                  << fixed(m.seconds, 2) << " s  " << fixed(m.tokensPerSecond, 0) << " tok/s" << std::endl;
    };

    TrainResult r;
    if (a.resume) {
        TrainConfig saved = loadRunConfig(a.run);
        const std::string corpusPath = a.corpus.empty() ? saved.corpus : a.corpus;
        const Corpus corpus = loadWith(corpusPath, a.corpus.empty() ? formatName(saved.corpusFormat) : a.format,
            a.corpus.empty() ? saved.latin1 : a.latin1);
        setThreads(saved.threads);
        r = resume(a.run, corpus, cb, a.epochs.value_or(0));
    } else {
        TrainArgs args = a;
        if (args.corpus.empty())
            args.corpus = defaultCorpus();
        const TrainConfig cfg = configFrom(args);
        validate(cfg);
        const Corpus corpus = loadWith(args.corpus, args.format, args.latin1);
        std::cout << "training preset '" << cfg.preset << "' on " << args.corpus << " (" << corpus.pairs.size()
                  << " pairs) into " << a.run << std::endl;
        r = train(cfg, corpus, a.run, cb);
    }
    if (tty && !a.quiet)
        std::cout << "\r\033[K";
    const char* status = r.status == TrainStatus::Cancelled ? "stopped"
        : r.status == TrainStatus::EarlyStopped             ? "stopped early"
                                                            : "finished";
    std::cout << status << " after " << r.epochsDone << " epoch(s), " << r.steps << " steps in " << fixed(r.seconds, 1)
              << " s on " << r.device << " " << precisionName(r.precision);
    if (std::isfinite(r.finalTrainLoss))
        std::cout << "; final train loss " << fixed(r.finalTrainLoss, 4);
    if (std::isfinite(r.bestValidationLoss))
        std::cout << ", best validation loss " << fixed(r.bestValidationLoss, 4);
    std::cout << "\nrun folder: " << a.run << "\n";
    if (r.status == TrainStatus::Cancelled)
        std::cout << "continue with: chatbench-cli train --resume --run " << a.run << "\n";
    return r.status == TrainStatus::Cancelled ? 130 : 0;
}

// ---- chat ---------------------------------------------------------------------------------

struct ChatArgs {
    std::string run = "runs/latest";
    std::string device = "cpu";
    std::optional<std::string> once;
    bool json = false;
    bool checks = false;
    std::string method = "greedy";
    int beam = 4;
    double temperature = 1.0;
    int topK = 0;
    uint64_t seed = 0;
    int maxLength = 0;
    std::string handoff = "correct";
};

DecodeOptions decodeOptions(const ChatArgs& a)
{
    DecodeOptions o;
    o.method = a.method == "beam" ? DecodeMethod::Beam
        : a.method == "sample"    ? DecodeMethod::Sample
                                  : DecodeMethod::Greedy;
    o.beamWidth = a.beam;
    o.temperature = a.temperature;
    o.topK = a.topK;
    o.seed = a.seed;
    o.maxLength = a.maxLength;
    o.handoff = a.handoff == "zero-init" ? HandoffMode::ZeroInit
        : a.handoff == "reset-each-step" ? HandoffMode::ResetEachStep
                                         : HandoffMode::Correct;
    return o;
}

void printReply(const Reply& r, const ChatArgs& a)
{
    if (a.json) {
        std::cout << toJson(r) << std::endl;
        return;
    }
    std::cout << r.text << std::endl;
    if (!r.trace.unknownWords.empty()) {
        std::cout << "  (unknown words: ";
        for (size_t i = 0; i < r.trace.unknownWords.size(); ++i)
            std::cout << (i ? ", " : "") << r.trace.unknownWords[i];
        std::cout << ")" << std::endl;
    }
    if (a.checks)
        std::cout << "  checks: " << checkLine(r.trace.checks) << std::endl;
}

int chatCommand(const ChatArgs& a)
{
    const Chatbot bot = Chatbot::load(a.run, a.device);
    if (!bot.note().empty())
        std::cerr << "note: " << bot.note() << "\n";
    const DecodeOptions opt = decodeOptions(a);
    if (a.once) {
        printReply(bot.reply(*a.once, opt), a);
        return 0;
    }
    const bool tty = ::isatty(STDIN_FILENO);
    if (tty)
        std::cout << "chatting with " << a.run << " (step " << bot.step() << ", " << bot.device()
                  << "); empty line or Ctrl-D to quit" << std::endl;
    std::string line;
    while (true) {
        if (tty)
            std::cout << "you> " << std::flush;
        if (!std::getline(std::cin, line) || (tty && line.empty()))
            break;
        if (line.empty())
            continue;
        if (tty)
            std::cout << "bot> ";
        printReply(bot.reply(line, opt), a);
    }
    return 0;
}

// ---- doctor -------------------------------------------------------------------------------

int doctorCommand(bool json)
{
    const EnvironmentInfo env = environmentInfo();
    const auto devices = listDevices();

    // The handoff checks on a tiny model trained for a few steps in a temporary run.
    char tmpl[] = "/tmp/chatbench-doctor-XXXXXX";
    const char* dir = ::mkdtemp(tmpl);
    if (!dir)
        throw Error("cannot create a temporary folder for the doctor's tiny model");
    Corpus tiny;
    const std::vector<std::pair<std::string, std::string>> lines = { { "hello", "hi there" },
        { "how are you", "i am fine" }, { "what is your name", "i am chatbench" }, { "bye", "see you later" } };
    for (const auto& [p, r] : lines)
        tiny.pairs.push_back({ p, r, "doctor", 0 });
    TrainConfig cfg = preset("quick");
    cfg.model.embedDim = 16;
    cfg.model.hidden = 24;
    cfg.epochs = 60;
    cfg.learningRate = 1e-2;
    cfg.batchSize = 4;
    cfg.validationFraction = 0;
    const std::string run = std::string(dir) + "/run";
    const TrainResult tr = train(cfg, tiny, run, {});
    const Chatbot bot = Chatbot::load(run);
    DecodeOptions good;
    DecodeOptions broken;
    broken.handoff = HandoffMode::ZeroInit;
    const Reply rGood = bot.reply("how are you", good);
    const Reply rBroken = bot.reply("how are you", broken);
    // CPU↔CUDA parity: the same weights on both devices, the same question.
    struct Parity {
        bool ran = false;
        std::string why;
        double maxLogitDiff = 0;
        bool repliesAgree = false;
        std::string cudaReply;
    } parity;
    if (env.cudaAvailable) {
        const Chatbot gpu = Chatbot::load(run, "cuda:0");
        DecodeOptions withLogits;
        withLogits.recordLogits = true;
        const Reply a = bot.reply("how are you", withLogits);
        const Reply b = gpu.reply("how are you", withLogits);
        parity.ran = true;
        parity.repliesAgree = a.text == b.text;
        parity.cudaReply = b.text;
        for (size_t t = 0; t < std::min(a.trace.steps.size(), b.trace.steps.size()); ++t) {
            const auto& la = a.trace.steps[t].logits;
            const auto& lb = b.trace.steps[t].logits;
            for (size_t k = 0; k < std::min(la.size(), lb.size()); ++k)
                parity.maxLogitDiff = std::max(parity.maxLogitDiff, static_cast<double>(std::abs(la[k] - lb[k])));
            if (a.trace.steps[t].chosenId != b.trace.steps[t].chosenId)
                break; // past a divergence the inputs differ
        }
    } else {
        parity.why = "no CUDA device available";
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    const auto& g = rGood.trace.checks;
    const auto& b = rBroken.trace.checks;
    const bool healthy
        = g.handoffEqual && g.stateCarried && g.teacherForcedEqual && !b.handoffEqual && !b.teacherForcedEqual;

    if (json) {
        nlohmann::ordered_json j;
        j["torch"] = env.torchVersion;
        j["cuda_built"] = env.cudaBuilt;
        j["cuda_available"] = env.cudaAvailable;
        j["cuda_devices"] = env.cudaDeviceCount;
        j["cuda_version"] = env.cudaVersion;
        j["cudnn_version"] = env.cudnnVersion;
        j["onednn_version"] = env.onednnVersion;
        j["threads"] = env.threads;
        j["interop_threads"] = env.interopThreads;
        auto& dj = j["devices"] = nlohmann::ordered_json::array();
        for (const auto& d : devices) {
            nlohmann::ordered_json pj;
            for (const auto& p : d.precisions)
                pj[precisionName(p.precision)]
                    = p.supported ? nlohmann::ordered_json("ok") : nlohmann::ordered_json(p.reason);
            dj.push_back(
                { { "id", d.id }, { "name", d.name }, { "memory_bytes", d.memoryBytes }, { "precisions", pj } });
        }
        j["handoff"] = { { "train_loss", tr.finalTrainLoss }, { "reply", rGood.text },
            { "checks", nlohmann::ordered_json::parse(toJson(rGood))["trace"]["checks"] },
            { "zero_init_checks", nlohmann::ordered_json::parse(toJson(rBroken))["trace"]["checks"] },
            { "healthy", healthy } };
        j["cpu_cuda_parity"] = parity.ran ? nlohmann::ordered_json { { "max_logit_diff", parity.maxLogitDiff },
            { "replies_agree", parity.repliesAgree }, { "cpu_reply", rGood.text }, { "cuda_reply", parity.cudaReply } }
                                          : nlohmann::ordered_json { { "skipped", parity.why } };
        std::cout << j.dump(2) << "\n";
        return healthy ? 0 : 1;
    }
    std::cout << "torch        " << env.torchVersion << "\n"
              << "CUDA         " << (env.cudaBuilt ? "built in (libtorch_cuda linked)" : "not built in") << ", "
              << (env.cudaAvailable ? std::to_string(env.cudaDeviceCount) + " device(s) available"
                                    : "no device available")
              << "\n"
              << "CUDA runtime " << (env.cudaVersion.empty() ? "unknown" : env.cudaVersion) << "\n"
              << "cuDNN        " << (env.cudnnVersion.empty() ? "unknown" : env.cudnnVersion) << "\n"
              << "oneDNN       " << (env.onednnVersion.empty() ? "unknown" : env.onednnVersion) << "\n"
              << "threads      " << env.threads << " intra-op, " << env.interopThreads << " inter-op\n";
    for (const auto& d : devices) {
        std::cout << "device       " << d.id << "  " << d.name << "  "
                  << fixed(static_cast<double>(d.memoryBytes) / (1 << 30), 1) << " GiB\n";
        for (const auto& p : d.precisions)
            std::cout << "             " << precisionName(p.precision) << ": "
                      << (p.supported ? "ok" : "no — " + p.reason) << "\n";
    }
    std::cout << "handoff      tiny model (" << tr.steps << " steps, loss " << fixed(tr.finalTrainLoss, 3)
              << ") replies '" << rGood.text << "'\n"
              << "  correct    " << checkLine(g) << "\n"
              << "  zero-init  " << checkLine(b) << "\n"
              << "parity       "
              << (parity.ran ? "cpu vs cuda:0 max |Δlogit| " + std::to_string(parity.maxLogitDiff) + ", greedy replies "
                             + (parity.repliesAgree ? "agree"
                                                    : "differ ('" + rGood.text + "' vs '" + parity.cudaReply + "')")
                             : "skipped: " + parity.why)
              << "\n"
              << (healthy ? "healthy: the checks pass with the handoff and catch the zero-state bug\n"
                          : "PROBLEM: the handoff checks did not behave as expected\n");
    return healthy ? 0 : 1;
}

// ---- bench --------------------------------------------------------------------------------

struct BenchArgs {
    std::string corpus;
    std::string format = "auto";
    BenchConfig cfg;
    std::string out = "bench-report.json";
    bool json = false;
    bool noEpoch = false;
};

int benchCommand(BenchArgs a)
{
    if (a.corpus.empty())
        a.corpus = defaultCorpus();
    a.cfg.epoch = !a.noEpoch;
    const Corpus corpus = loadWith(a.corpus, a.format, false);
    BenchCallbacks cb;
    cb.cancel = &g_cancel;
    const bool tty = ::isatty(STDERR_FILENO);
    cb.onProgress = [&](const std::string& what, int done, int total) {
        if (tty)
            std::cerr << "\r\033[K[" << done << "/" << total << "] " << what << std::flush;
    };
    const BenchReport r = runBench(a.cfg, corpus, cb);
    if (tty)
        std::cerr << "\r\033[K";
    if (!a.out.empty()) {
        std::ofstream f(a.out);
        f << toJson(r);
        if (!f)
            throw Error(a.out, 0, "cannot write the report");
    }
    if (a.json) {
        std::cout << toJson(r);
        return 0;
    }
    std::cout << r.label << " · torch " << r.machine.torch << " · preset " << r.preset << " (E=" << r.model.embedDim
              << ", H=" << r.model.hidden << ", layers " << r.model.layers << ", V=" << r.model.vocabSize << ") · "
              << r.corpusPairs << " pairs\n\n";
    std::cout << std::left << std::setw(8) << "device" << std::setw(6) << "prec" << std::right << std::setw(4) << "thr"
              << std::setw(7) << "batch"
              << "  " << std::left << std::setw(17) << "unit" << std::right << std::setw(11) << "median ms"
              << std::setw(20) << "p10–p90 ms" << std::setw(12) << "tokens/s" << std::setw(10) << "GFLOP/s"
              << std::setw(8) << "%GEMM" << std::setw(10) << "peak MiB" << std::setw(10) << "energy J"
              << "\n";
    for (const auto& x : r.rows) {
        std::cout << std::left << std::setw(8) << x.device << std::setw(6) << x.precision << std::right << std::setw(4)
                  << x.threads << std::setw(7) << x.batch << "  " << std::left << std::setw(17) << x.unit << std::right
                  << std::setw(11) << fixed(1e3 * x.time.median, 2) << std::setw(20)
                  << (fixed(1e3 * x.time.p10, 2) + "–" + fixed(1e3 * x.time.p90, 2)) << std::setw(12)
                  << fixed(x.tokensPerSecond, 0) << std::setw(10) << fixed(x.gflops, 2) << std::setw(8)
                  << fixed(100 * x.gemmFraction, 1) << std::setw(10)
                  << fixed(static_cast<double>(x.peakMemoryBytes) / (1 << 20), 0) << std::setw(10)
                  << (x.energyJoules >= 0 ? fixed(x.energyJoules, 2) : std::string("n/a")) << "\n";
    }
    std::cout << "\nGEMM ceiling (same run):";
    for (const auto& g : r.gemm)
        std::cout << "\n  " << g.device << " " << g.precision
                  << (g.threads > 0 ? " " + std::to_string(g.threads) + " thr" : std::string()) << "  " << g.n
                  << "³ matmul: " << fixed(g.gflops, 1) << " GFLOP/s";
    std::cout << "\nGFLOP/s = model FLOPs / median time: per LSTM layer and step 2·4H·(I+H)·B, projection 2·H·V·B per "
                 "decoder step,\n"
                 "training 3× forward; %GEMM = that / the matmul ceiling of the same device, precision and threads.\n";
    for (const auto& c : r.races)
        if (!c.points.empty())
            std::cout << "race " << c.device << " " << c.precision << ": " << c.points.size() << " epochs in "
                      << fixed(c.points.back().seconds, 2) << " s, final loss " << fixed(c.points.back().loss, 4)
                      << "\n";
    for (const auto& n : r.notes)
        std::cout << "note: " << n << "\n";
    std::cout << "energy: " << (r.rows.empty() ? "n/a" : r.rows.front().energySource) << "; times are medians of "
              << a.cfg.repeats << " runs after " << a.cfg.warmup << " warm-up run(s)\n";
    if (!a.out.empty())
        std::cout << "report: " << a.out << "\n";
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    CLI::App app { "chatbench-cli — train LSTM seq2seq chatbots and see the encoder→decoder state handoff" };
    app.require_subcommand(1);
    app.set_version_flag("--version", "chatbench 0.1.0");

    CorpusArgs ca;
    auto* corpus = app.add_subcommand("corpus", "Inspect a corpus");
    corpus->require_subcommand(1);
    for (auto* sub : { corpus->add_subcommand("stats", "Pairs, vocabulary, OOV rate and lengths"),
             corpus->add_subcommand("validate", "Load every record; report the first problem as file:line") }) {
        sub->add_option("path", ca.path, "Corpus file or folder")->required();
        sub->add_option("--format", ca.format, "auto, yaml, tsv, jsonl, cornell, dialog")
            ->check(CLI::IsMember({ "auto", "yaml", "tsv", "jsonl", "cornell", "dialog" }));
        sub->add_flag("--latin1", ca.latin1, "Decode as Latin-1 instead of UTF-8");
        if (sub->get_name() == "stats") {
            sub->add_option("--min-freq", ca.minFrequency, "Minimum word frequency")->check(CLI::Range(1, 1000000));
            sub->add_option("--tokenizer", ca.mode, "keras or punct")->check(CLI::IsMember({ "keras", "punct" }));
            sub->add_flag("--json", ca.json, "Print JSON");
        }
    }

    TrainArgs ta;
    auto* trainCmd = app.add_subcommand("train", "Train a chatbot into a run folder (Ctrl-C stops and checkpoints)");
    trainCmd->add_option("--corpus", ta.corpus, "Corpus file or folder (default: the bundled corpus)");
    trainCmd->add_option("--format", ta.format, "Corpus format")
        ->check(CLI::IsMember({ "auto", "yaml", "tsv", "jsonl", "cornell", "dialog" }));
    trainCmd->add_flag("--latin1", ta.latin1, "Decode the corpus as Latin-1");
    trainCmd->add_option("--preset", ta.preset, "seed (the Keras recipe), quick, large")
        ->check(CLI::IsMember(presetNames()));
    trainCmd->add_option("--run", ta.run, "Run folder")->capture_default_str();
    trainCmd->add_flag("--resume", ta.resume, "Continue the run in --run from its last checkpoint");
    trainCmd->add_flag("--quiet", ta.quiet, "Only the summary");
    trainCmd->add_option("--epochs", ta.epochs, "Epochs (with --resume: the new total)")->check(CLI::Range(1, 100000));
    trainCmd->add_option("--batch-size", ta.batchSize, "Pairs per batch")->check(CLI::Range(1, 65536));
    trainCmd->add_option("--lr", ta.lr, "Learning rate");
    trainCmd->add_option("--optimizer", ta.optimizer, "adam, rmsprop, sgd")
        ->check(CLI::IsMember({ "adam", "rmsprop", "sgd" }));
    trainCmd->add_option("--embed", ta.embed, "Embedding width");
    trainCmd->add_option("--hidden", ta.hidden, "LSTM units");
    trainCmd->add_option("--layers", ta.layers, "LSTM layers");
    trainCmd->add_option("--dropout", ta.dropout, "Dropout");
    trainCmd->add_flag("--attention", ta.attention, "Luong attention");
    trainCmd->add_flag("--no-attention", ta.noAttention, "No attention");
    trainCmd->add_flag("--shared-embedding", ta.sharedEmbedding, "One embedding for encoder and decoder");
    trainCmd->add_option("--max-source", ta.maxSource, "Prompt words kept");
    trainCmd->add_option("--max-target", ta.maxTarget, "Response tokens kept (with <start>/<end>)");
    trainCmd->add_option("--teacher-forcing", ta.teacherForcing, "Teacher-forcing ratio 0..1");
    trainCmd->add_option("--clip", ta.clip, "Gradient-norm clip (0 = off)");
    trainCmd->add_option("--val-fraction", ta.valFraction, "Validation fraction");
    trainCmd->add_option("--patience", ta.patience, "Early-stopping patience in epochs (0 = off)");
    trainCmd->add_option("--seed", ta.seed, "Random seed");
    trainCmd->add_flag("--nondeterministic", ta.nondeterministic, "Allow nondeterministic kernels");
    trainCmd->add_flag("--no-bucketing", ta.noBucketing, "Plain shuffled batches");
    trainCmd->add_option("--checkpoint-every", ta.checkpointEvery, "Also checkpoint every N steps");
    trainCmd->add_option("--device", ta.device, "cpu, cuda, cuda:N");
    trainCmd->add_option("--precision", ta.precision, "fp32, bf16, fp16")
        ->check(CLI::IsMember({ "fp32", "bf16", "fp16" }));
    trainCmd->add_option("--threads", ta.threads, "CPU threads (0 = default)");
    trainCmd->add_option("--min-freq", ta.minFreq, "Minimum word frequency");
    trainCmd->add_option("--max-vocab", ta.maxVocab, "Vocabulary size limit (0 = none)");
    trainCmd->add_option("--tokenizer", ta.tokenizer, "keras or punct")->check(CLI::IsMember({ "keras", "punct" }));

    ChatArgs ch;
    auto* chat = app.add_subcommand("chat", "Chat with a trained run (interactive, or --once)");
    chat->add_option("--run", ch.run, "Run folder")->capture_default_str();
    chat->add_option("--once", ch.once, "Reply to this text and exit");
    chat->add_flag("--json", ch.json, "Print the reply with its whole state trace as JSON");
    chat->add_flag("--checks", ch.checks, "Print the handoff checks after each reply");
    chat->add_option("--method", ch.method, "greedy, beam, sample")
        ->check(CLI::IsMember({ "greedy", "beam", "sample" }));
    chat->add_option("--beam", ch.beam, "Beam width")->check(CLI::Range(1, 64));
    chat->add_option("--temperature", ch.temperature, "Sampling temperature")->check(CLI::Range(0.01, 100.0));
    chat->add_option("--top-k", ch.topK, "Sample among the k most likely tokens (0 = all)")
        ->check(CLI::Range(0, 1000000));
    chat->add_option("--seed", ch.seed, "Sampling seed");
    chat->add_option("--max-length", ch.maxLength, "Reply words at most (0 = model limit)")->check(CLI::Range(0, 4096));
    chat->add_option("--handoff", ch.handoff, "correct, zero-init (the bug), reset-each-step")
        ->check(CLI::IsMember({ "correct", "zero-init", "reset-each-step" }));
    chat->add_option("--device", ch.device, "cpu, cuda, cuda:N");

    BenchArgs ba;
    auto* bench = app.add_subcommand(
        "bench", "Time training steps, epochs and replies per device/precision/batch; print a table, write JSON");
    bench->add_option("--corpus", ba.corpus, "Corpus (default: the bundled corpus)");
    bench->add_option("--format", ba.format, "Corpus format")
        ->check(CLI::IsMember({ "auto", "yaml", "tsv", "jsonl", "cornell", "dialog" }));
    bench->add_option("--preset", ba.cfg.preset, "Model preset: seed, quick, large")
        ->check(CLI::IsMember(presetNames()))
        ->capture_default_str();
    bench->add_option("--device", ba.cfg.devices, "Devices, e.g. cpu,cuda:0")->delimiter(',')->capture_default_str();
    bench->add_option("--precision", ba.cfg.precisions, "fp32,bf16,fp16,tf32")
        ->delimiter(',')
        ->check(CLI::IsMember({ "fp32", "bf16", "fp16", "tf32" }))
        ->capture_default_str();
    bench->add_option("--batch", ba.cfg.batchSizes, "Batch sizes, e.g. 1,16,64")
        ->delimiter(',')
        ->check(CLI::Range(1, 65536))
        ->capture_default_str();
    bench->add_option("--threads", ba.cfg.threads, "CPU thread counts to sweep, e.g. 1,2 (0 = default)")
        ->delimiter(',')
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    bench->add_option("--repeats", ba.cfg.repeats, "Timed repetitions per unit")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    bench->add_option("--warmup", ba.cfg.warmup, "Untimed warm-up runs per unit")
        ->check(CLI::Range(0, 100))
        ->capture_default_str();
    bench->add_option("--reply-length", ba.cfg.replyLength, "Decoder steps per reply")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    bench->add_option("--race-epochs", ba.cfg.raceEpochs, "Also train N epochs per device, recording loss vs time")
        ->check(CLI::Range(0, 100000));
    bench->add_flag("--no-epoch", ba.noEpoch, "Skip the whole-epoch timing");
    bench->add_option("--out", ba.out, "Report file (JSON); empty: none")->capture_default_str();
    bench->add_flag("--json", ba.json, "Print the report instead of the table");

    bool doctorJson = false;
    auto* doctor = app.add_subcommand("doctor", "Versions, devices, and the handoff checks on a tiny model");
    doctor->add_flag("--json", doctorJson, "Print JSON");

    CLI11_PARSE(app, argc, argv);
    std::signal(SIGINT, onSignal);
    std::signal(SIGTERM, onSignal);
    try {
        if (corpus->parsed())
            return corpus->get_subcommands().front()->get_name() == "stats" ? corpusStats(ca) : corpusValidate(ca);
        if (trainCmd->parsed())
            return trainCommand(ta);
        if (chat->parsed())
            return chatCommand(ch);
        if (doctor->parsed())
            return doctorCommand(doctorJson);
        if (bench->parsed())
            return benchCommand(ba);
    } catch (const Error& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    }
    return 0;
}
