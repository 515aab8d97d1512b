// chatbench-cli bench — time training and replies per device × precision × batch × threads;
// print a table and write the JSON report the Compare view reads.

#include "chatbench/bench.h"
#include "chatbench/error.h"
#include "chatbench/outputfile.h"
#include "chatbench/runs.h"
#include "common.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <vector>

namespace cli {

namespace {

using namespace chatbench;

struct BenchArgs {
    std::string corpus;
    CorpusFlags corpusFlags;
    std::string run; // take the model's sizes from this run (e.g. an imported Keras model)
    BenchConfig cfg;
    std::vector<std::string> precisions = { benchPrecisionName(BenchPrecision::FP32) };
    std::string out = "bench-report.json";
    bool json = false;
    bool noEpoch = false;
};

void printTable(const BenchReport& r, const BenchConfig& cfg)
{
    std::cout << r.label << " · torch " << r.machine.torch << " · preset " << r.preset << " (E=" << r.model.embedDim
              << ", H=" << r.model.hidden << ", layers " << r.model.layers << ", V=" << r.model.vocabSize << ") · "
              << r.corpusPairs << " pairs\n\n";
    std::cout << std::left << std::setw(8) << "device" << std::setw(6) << "prec" << std::setw(10) << "LSTM ran"
              << std::right << std::setw(4) << "thr" << std::setw(7) << "batch"
              << "  " << std::left << std::setw(17) << "unit" << std::right << std::setw(11) << "median ms"
              << std::setw(20) << "p10–p90 ms" << std::setw(12) << "tokens/s" << std::setw(10) << "GFLOP/s"
              << std::setw(8) << "%GEMM" << std::setw(10) << "peak MiB" << std::setw(10) << "energy J"
              << "\n";
    for (const auto& x : r.rows) {
        const std::string ran = lstmRanShort(x);
        std::cout << std::left << std::setw(8) << x.device << std::setw(6) << benchPrecisionName(x.precision)
                  << std::setw(10) << ran << std::right << std::setw(4) << x.threads << std::setw(7) << x.batch << "  "
                  << std::left << std::setw(17) << benchUnitName(x.unit) << std::right << std::setw(11)
                  << fixed(1e3 * x.time.median, 2) << std::setw(20)
                  << (fixed(1e3 * x.time.p10, 2) + "–" + fixed(1e3 * x.time.p90, 2)) << std::setw(12)
                  << fixed(x.tokensPerSecond, 0) << std::setw(10) << fixed(x.gflops, 2) << std::setw(8)
                  << fixed(100 * x.gemmFraction, 1) << std::setw(10)
                  << fixed(static_cast<double>(x.peakMemoryBytes) / (1 << 20), 0) << std::setw(10)
                  << (x.energyJoules >= 0 ? fixed(x.energyJoules, 2) : std::string("n/a")) << "\n";
    }
    std::cout << "\nGEMM ceiling (same run):";
    for (const auto& g : r.gemm)
        std::cout << "\n  " << g.device << " " << benchPrecisionName(g.precision)
                  << (g.threads > 0 ? " " + std::to_string(g.threads) + " thr" : std::string()) << "  " << g.n
                  << "³ matmul: " << fixed(g.gflops, 1) << " GFLOP/s";
    std::cout << "\nGFLOP/s = model FLOPs / median time: per LSTM layer and step 2·4H·(I+H)·B, projection 2·H·V·B per "
                 "decoder step,\n"
                 "training 3× forward; %GEMM = that / the matmul ceiling of the same device, precision and threads.\n";
    for (const auto& c : r.races)
        if (!c.points.empty())
            std::cout << "race " << c.device << " " << benchPrecisionName(c.precision)
                      << (c.device == "cpu" ? " " + std::to_string(c.threads) + " thr" : std::string()) << ": "
                      << c.points.size() << " epochs in " << fixed(c.points.back().seconds, 2) << " s, final loss "
                      << fixed(c.points.back().loss, 4) << "\n";
    for (const auto& n : r.notes)
        std::cout << "note: " << n << "\n";
    std::string sources; // each device's energy counter, in the rows' order
    std::vector<std::string> seen;
    for (const auto& x : r.rows)
        if (std::find(seen.begin(), seen.end(), x.device) == seen.end()) {
            seen.push_back(x.device);
            sources += (sources.empty() ? "" : ", ") + x.device + " " + x.energySource;
        }
    std::cout << "energy: " << (sources.empty() ? "n/a" : sources)
              << " (joules per run, between two updates of the counter over at least 1 s of back-to-back runs after "
                 "the timed ones);\ntimes are medians of "
              << cfg.repeats << " runs after warm-up until two runs agree "
              << "within 5% (at least " << cfg.warmup << " run(s))\n"
              << "LSTM ran: the dtype the LSTMs produced (probed; encoder/decoder when they differ); tf32 = fp32 with "
                 "TF32 tensor-core maths allowed\n";
}

int run(BenchArgs a)
{
    const bool defaulted = a.corpus.empty();
    if (defaulted)
        a.corpus = defaultCorpusPath();
    a.cfg.epoch = !a.noEpoch;
    a.cfg.precisions.clear();
    for (const auto& p : a.precisions)
        a.cfg.precisions.push_back(*parseBenchPrecision(p));
    std::string fromRun; // said in the report: what of the run was and was not taken
    if (!a.run.empty()) {
        // The timings depend on the sizes, not the weights: the run's sizes on this corpus.
        const ModelConfig m = loadRunConfig(a.run).model;
        a.cfg.embedDim = m.embedDim;
        a.cfg.hidden = m.hidden;
        a.cfg.layers = m.layers;
        fromRun = "sizes from the run " + chatbench::printable(a.run) + " (E=" + std::to_string(m.embedDim)
            + ", H=" + std::to_string(m.hidden) + ", layers " + std::to_string(m.layers) + ")";
        if (m.attention || m.sharedEmbedding)
            fromRun += "; its " + std::string(m.attention ? "attention" : "")
                + (m.attention && m.sharedEmbedding ? " and " : "") + (m.sharedEmbedding ? "shared embedding" : "")
                + " not timed: the preset's model is timed at those sizes";
    }
    if (!a.out.empty())
        checkOutputFile(a.out, { a.corpus }, "--json prints the report there"); // before minutes of timing
    const Corpus corpus = loadCorpusArg(a.corpus, a.corpusFlags, defaulted);
    BenchCallbacks cb;
    cb.cancel = &cancelFlag();
    const bool tty = progressTerminal(STDERR_FILENO);
    cb.onProgress = [&](const std::string& what, int done, int total) {
        if (tty)
            std::cerr << "\r\033[K[" << done << "/" << total << "] " << what << std::flush;
    };
    BenchReport r = [&] {
        const CancelWatch watch;
        return runBench(a.cfg, corpus, cb);
    }();
    if (!fromRun.empty())
        r.notes.insert(r.notes.begin(), fromRun);
    if (tty)
        std::cerr << "\r\033[K";
    if (r.rows.empty() && r.races.empty()) {
        // Nothing measured (every combination unavailable, or stopped at once): an error, and a
        // report already at --out is left as it was.
        std::string why;
        for (const auto& n : r.notes)
            why += "\n  " + n;
        const std::string kept = a.out.empty() ? "" : "\n" + chatbench::printable(a.out) + " was not written";
        if (cancelFlag().load()) {
            std::cerr << "stopped before anything was measured" << kept << "\n";
            return 130;
        }
        throw Error("nothing was measured" + why + kept);
    }
    // Stopped by Ctrl-C or SIGTERM: what was measured is written, and the exit status says it was
    // cut short, as train's does (130). The table first: a report that cannot be written (a full
    // disk, a file-size limit) is an error, but what was measured is still shown.
    const int status = r.cancelled ? 130 : 0; // a Ctrl-C after the last unit cut nothing short
    if (a.json)
        std::cout << toJson(r);
    else
        printTable(r, a.cfg);
    std::cout.flush();
    if (!a.out.empty()) {
        writeOutputFile(a.out, toJson(r));
        if (!a.json)
            std::cout << "report: " << chatbench::printable(a.out) << "\n";
    }
    return status;
}

} // namespace

void addBenchCommand(CLI::App& app, int& exitCode)
{
    auto a = std::make_shared<BenchArgs>();
    auto* cmd = app.add_subcommand(
        "bench", "Time training steps, epochs and replies per device/precision/batch; print a table, write JSON");
    cmd->add_option("--corpus", a->corpus, std::string("Corpus (") + kDefaultCorpusHelp + ")");
    addCorpusFlags(cmd, a->corpusFlags);
    cmd->add_option("--preset", a->cfg.preset, "Model preset: seed, quick, large")
        ->check(oneOf(presetNames()))
        ->capture_default_str();
    cmd->add_option("--run", a->run,
        "Time a run's model sizes (embedding, LSTM units, layers; over --embed/--hidden/--layers), e.g. an imported "
        "Keras model's");
    cmd->add_option("--embed", a->cfg.embedDim, "Embedding width (default: the preset's)")->check(CLI::Range(1, 8192));
    cmd->add_option("--hidden", a->cfg.hidden, "LSTM units (default: the preset's)")->check(CLI::Range(1, 8192));
    cmd->add_option("--layers", a->cfg.layers, "LSTM layers (default: the preset's)")->check(CLI::Range(1, 8));
    cmd->add_option("--device", a->cfg.devices, "Devices, e.g. cpu,cuda:0")->delimiter(',')->capture_default_str();
    cmd->add_option("--precision", a->precisions, joinNames(benchPrecisionNames()))
        ->delimiter(',')
        ->check(oneOf(benchPrecisionNames()))
        ->capture_default_str();
    cmd->add_option("--batch", a->cfg.batchSizes, "Batch sizes, e.g. 1,16,64")
        ->delimiter(',')
        ->check(CLI::Range(1, 65536))
        ->capture_default_str();
    cmd->add_option("--threads", a->cfg.threads, "CPU thread counts to sweep, e.g. 1,2 (0 = default)")
        ->delimiter(',')
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    cmd->add_option("--repeats", a->cfg.repeats, "Timed repetitions per unit")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    cmd->add_option("--warmup", a->cfg.warmup, "Untimed warm-up runs per unit")
        ->check(CLI::Range(0, 100))
        ->capture_default_str();
    cmd->add_option("--reply-length", a->cfg.replyLength, "Decoder steps per reply")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    cmd->add_option("--race-epochs", a->cfg.raceEpochs,
           "Also train N epochs per device, precision and CPU thread count, recording loss vs time")
        ->check(CLI::Range(0, 100000));
    cmd->add_flag("--no-epoch", a->noEpoch, "Skip the whole-epoch timing");
    cmd->add_option("--out", a->out, "Report file (JSON); empty: none")->capture_default_str();
    cmd->add_flag("--json", a->json, "Print the report instead of the table");
    cmd->callback([a, &exitCode] { exitCode = run(*a); });
}

} // namespace cli
