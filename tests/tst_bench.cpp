// The benchmark harness on the CPU: a small real run, and the process settings it changes put
// back however it ends (finished, cancelled, thrown).

#include "chatbench/bench.h"
#include "chatbench/devices.h"
#include "chatbench/error.h"
#include "testutil.h"

#include <torch/torch.h>

#include <cmath>
#include <sys/wait.h>
#include <unistd.h>

using namespace chatbench;

namespace {

// "question i" → "answer i", n pairs.
Corpus questionsAndAnswers(int n)
{
    Corpus corpus;
    for (int i = 0; i < n; ++i)
        corpus.pairs.push_back({ "question " + std::to_string(i), "answer " + std::to_string(i), "mem", 0 });
    return corpus;
}

} // namespace

class TestBench : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void smallRunOnCpu();
    void trainStepTimesABatchTheTrainerForms();
    void settingsRestoredWhenCancelledOrThrown();
    void oneFailingCombinationKeepsTheRest();
    void eachThreadCountRaces();
    void batchBeyondMemoryIsRefusedBeforeAnyWork();
};

void TestBench::smallRunOnCpu()
{
    Corpus corpus;
    for (int i = 0; i < 40; ++i)
        corpus.pairs.push_back(
            { "question number " + std::to_string(i) + " about lstm", "answer " + std::to_string(i), "mem", 0 });
    BenchConfig cfg;
    cfg.preset = "quick";
    // Values repeated in a list are measured once (--batch 4,8,4 gave batch 4's rows twice).
    cfg.devices = { "cpu", "cuda:0", "cpu" };
    cfg.precisions = { BenchPrecision::FP32, BenchPrecision::TF32, BenchPrecision::FP32 };
    cfg.batchSizes = { 4, 8, 4 };
    cfg.threads = { 0, 0 };
    cfg.repeats = 4; // the epoch unit repeats at most 3 times, the others cfg.repeats times
    cfg.warmup = 1;
    cfg.replyLength = 5;
    cfg.raceEpochs = 2;
    cfg.embedDim = 24; // sizes other than the preset's
    cfg.hidden = 20;
    int rowsSeen = 0;
    BenchCallbacks cb;
    cb.onRow = [&](const BenchRow&) { ++rowsSeen; };
    const BenchReport r = runBench(cfg, corpus, cb);
    const bool cuda = environmentInfo().cudaAvailable;
    // cpu fp32: train_step ×2, reply at 1 (latency), 4 and 8 (throughput), the traced reply, one epoch.
    const size_t cpuRows = 2 + 3 + 1 + 1;
    if (!cuda) {
        QCOMPARE(r.rows.size(), cpuRows);
        QVERIFY(
            std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) { return n.find("cuda:0") == 0; }));
    }
    QVERIFY(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) { return n.find("cpu tf32") == 0; }));
    QCOMPARE(rowsSeen, static_cast<int>(r.rows.size()));
    for (const auto& row : r.rows) {
        QVERIFY(row.time.median > 0);
        QCOMPARE(row.time.samples.size(), size_t(row.unit == BenchUnit::Epoch ? 3 : 4));
        QVERIFY(row.time.min <= row.time.median && row.time.median <= row.time.max);
        QVERIFY(row.tokensPerSecond > 0);
        QVERIFY(row.gflops > 0);
        QVERIFY(row.gemmFraction > 0);
        QVERIFY(row.peakMemoryBytes > 0);
        QVERIFY(!row.energySource.empty());
        // What ran is recorded: the probed LSTM dtype and the maths mode; warm-up ran until settled.
        QCOMPARE(row.lstmDtype, std::string("float32"));
        QVERIFY(!row.tf32);
        QCOMPARE(precisionLabel(row), std::string("fp32"));
        QVERIFY(row.warmupRuns >= 1 && row.warmupRuns <= (row.unit == BenchUnit::Epoch ? 1 : 11));
    }
    QCOMPARE(r.rows[0].unit, BenchUnit::TrainStep);
    QCOMPARE(r.rows[2].unit, BenchUnit::ReplyLatency);
    QCOMPARE(r.rows[2].batch, 1);
    QCOMPARE(r.rows[5].unit, BenchUnit::TracedReply);
    QCOMPARE(r.rows[5].batch, 1);
    QVERIFY(!r.gemm.empty() && r.gemm[0].gflops > 0);
    if (!cuda) {
        // One ceiling per combination (the better of its two passes), and the one every row of
        // the combination is a fraction of.
        QCOMPARE(r.gemm.size(), size_t(1));
        for (const auto& row : r.rows)
            QCOMPARE(row.gemmFraction, row.gflops / r.gemm[0].gflops);
    }
    QVERIFY(!r.races.empty());
    QCOMPARE(r.races[0].points.size(), size_t(2));
    QVERIFY(r.races[0].points[1].seconds > r.races[0].points[0].seconds);
    QCOMPARE(r.model.embedDim, 24);
    QCOMPARE(r.model.hidden, 20);
    QVERIFY(!r.machine.cpuModel.empty());
    QVERIFY(r.machine.cores > 0);
    QVERIFY(!r.machine.torch.empty());
    QCOMPARE(benchReportFromJson(toJson(r), "x").rows.size(), r.rows.size());

    BenchConfig bad = cfg;
    bad.batchSizes = { 0 };
    QVERIFY_THROWS_EXCEPTION(Error, runBench(bad, corpus));
    QVERIFY_THROWS_EXCEPTION(Error, runBench(cfg, Corpus {}));
}

// The step row times a batch as the trainer plans it (bucketed by length), not the first B pairs
// of the file, which here span all three response lengths: 1, 4 and 9 words, interleaved.
void TestBench::trainStepTimesABatchTheTrainerForms()
{
    Corpus corpus;
    const char* responses[] = { "yes", "yes it is so", "yes it is so and so it is so" };
    for (int i = 0; i < 60; ++i)
        corpus.pairs.push_back({ "is it so", responses[i % 3], "mem", 0 });
    BenchConfig cfg;
    cfg.preset = "quick";
    cfg.batchSizes = { 4 };
    cfg.repeats = 1;
    cfg.warmup = 0;
    cfg.replyLength = 2;
    cfg.epoch = false;
    const BenchReport r = runBench(cfg, corpus);
    QVERIFY(!r.rows.empty());
    QCOMPARE(r.rows[0].unit, BenchUnit::TrainStep);
    // Real target tokens (words + <end>): 2, 5 and 10 a pair. The plan's full batches, sorted by
    // size, are short ones, one short/medium mix, medium ones, then long ones: its median batch
    // holds four medium responses (20 tokens). The first four training pairs hold 22.
    const double tokens = r.rows[0].tokensPerSecond * r.rows[0].time.median;
    QCOMPARE(std::lround(tokens), 20L);
}

void TestBench::settingsRestoredWhenCancelledOrThrown()
{
    const Corpus corpus = questionsAndAnswers(12);
    BenchConfig cfg;
    cfg.preset = "quick";
    cfg.batchSizes = { 2, 4 };
    cfg.threads = { 2 }; // differs from the thread count set below
    cfg.repeats = 1;
    cfg.warmup = 0;
    cfg.replyLength = 2;
    cfg.epoch = false;

    setThreads(1);
    at::globalContext().setDeterministicAlgorithms(false, false); // the quick preset asks for true
    auto settingsAreBack
        = [] { return torch::get_num_threads() == 1 && !at::globalContext().deterministicAlgorithms(); };

    // Cancelled after the first row: the report keeps it and says so.
    std::atomic<bool> cancel { false };
    BenchCallbacks cb;
    cb.cancel = &cancel;
    cb.onRow = [&](const BenchRow& row) {
        QCOMPARE(torch::get_num_threads(), 2); // the sweep's setting while it runs
        QVERIFY(at::globalContext().deterministicAlgorithms());
        (void)row;
        cancel = true;
    };
    const BenchReport r = runBench(cfg, corpus, cb);
    QCOMPARE(r.rows.size(), size_t(1));
    QVERIFY(!r.notes.empty() && r.notes.back().find("cancelled") == 0);
    QVERIFY(r.cancelled);
    QVERIFY(settingsAreBack());

    // A failure in the middle (here: the row callback throws) costs that combination only and
    // leaves the settings as they were.
    at::globalContext().setAllowTF32CuDNN(true); // torch's default; the bench turns it off for fp32
    BenchCallbacks throwing;
    throwing.onRow = [](const BenchRow&) {
        QVERIFY(!at::globalContext().allowTF32CuDNN(at::Float32Op::RNN));
        throw Error("stop here");
    };
    const BenchReport failed = runBench(cfg, corpus, throwing);
    QVERIFY(!failed.notes.empty() && !failed.cancelled);
    QVERIFY2(failed.notes.back().find("skipped after an error: stop here") != std::string::npos,
        failed.notes.back().c_str());
    QVERIFY(settingsAreBack());
    QVERIFY(at::globalContext().allowTF32CuDNN(at::Float32Op::RNN));

    // Thread counts past training's limit are refused before a pool is made (the window's
    // Compare took 5000: as many threads on two cores).
    for (int threads : { 1025, 5000, -1 }) {
        BenchConfig many = cfg;
        many.threads = { 1, threads };
        try {
            (void)runBench(many, corpus, {});
            QFAIL("a thread count past 1024 was run");
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find("CPU threads must be 0..1024") != std::string::npos, e.what());
        }
        QVERIFY(settingsAreBack());
    }
}

// On a GPU one precision may run out of memory or miss a kernel; the report keeps every other
// combination. Here the 1-thread CPU combination fails after its training rows.
void TestBench::oneFailingCombinationKeepsTheRest()
{
    const Corpus corpus = questionsAndAnswers(12);
    BenchConfig cfg;
    cfg.preset = "quick";
    cfg.batchSizes = { 2 };
    cfg.threads = { 1, 2 };
    cfg.repeats = 1;
    cfg.warmup = 0;
    cfg.replyLength = 2;
    cfg.epoch = false;
    int lastDone = 0, lastTotal = 0;
    BenchCallbacks cb;
    cb.onProgress = [&](const std::string& what, int done, int total) {
        lastDone = done;
        lastTotal = total;
        if (torch::get_num_threads() == 1 && what.rfind("reply", 0) == 0)
            throw std::runtime_error("injected failure\nwith a second line");
    };
    const BenchReport r = runBench(cfg, corpus, cb);
    // 1 thread: its train_step row only; 2 threads: train_step, reply at 1 and 2, traced reply.
    QCOMPARE(r.rows.size(), size_t(1 + 4));
    QCOMPARE(r.rows[0].threads, 1);
    QCOMPARE(r.rows[0].unit, BenchUnit::TrainStep);
    for (size_t i = 1; i < r.rows.size(); ++i)
        QCOMPARE(r.rows[i].threads, 2);
    QCOMPARE(r.notes.size(), size_t(1));
    QCOMPARE(r.notes[0], std::string("cpu fp32 1 thread(s): skipped after an error: injected failure"));
    QCOMPARE(lastDone, lastTotal); // progress still reaches the end
}

// Found by an outside pass: `--threads 1 --race-epochs N` raced at the default thread count,
// beside rows measured at one thread. Each thread count of the table gets its own race.
void TestBench::eachThreadCountRaces()
{
    const Corpus corpus = questionsAndAnswers(12);
    BenchConfig cfg;
    cfg.preset = "quick";
    cfg.batchSizes = { 2 };
    // 0 is the default count, measured once with the count it stands for (another pass found
    // `--threads 0,2` measuring everything twice where the default is 2).
    const int byDefault = torch::get_num_threads();
    const int other = byDefault == 1 ? 2 : byDefault;
    cfg.threads = { 1, other, 0 };
    cfg.repeats = 1;
    cfg.warmup = 0;
    cfg.replyLength = 2;
    cfg.epoch = false;
    cfg.raceEpochs = 1;
    // The run of a race whose bench was killed (found by an outside pass: 18 MB each, for good)
    // is removed by the next race; a live process' stays.
    const pid_t dead = ::fork();
    if (dead == 0)
        ::_exit(0);
    QVERIFY(dead > 0 && ::waitpid(dead, nullptr, 0) == dead);
    const QString tmp = QDir::tempPath();
    const QString killed = tmp + QString("/chatbench-race-%1-7").arg(dead);
    const QString live = tmp + QString("/chatbench-race-%1-99").arg(::getpid());
    QVERIFY(QDir().mkpath(killed + "/run") && QDir().mkpath(live));
    const BenchReport r = runBench(cfg, corpus, {});
    QVERIFY(!QFileInfo::exists(killed));
    QVERIFY(QFileInfo::exists(live));
    QVERIFY(QDir(live).removeRecursively());
    QCOMPARE(r.races.size(), size_t(2));
    QCOMPARE(r.races[0].threads, 1);
    QCOMPARE(r.races[1].threads, other);
    QCOMPARE(r.rows.size(), size_t(2 * 4)); // train_step, reply at 1 and 2, traced reply: once per count
    for (const auto& race : r.races)
        QCOMPARE(race.points.size(), size_t(1));
}

// `bench --batch 65536` on sizes no machine here can hold ran for minutes until LibTorch's
// allocator refused a tensor, then skipped the unit. The floor of what the batch's training step
// keeps (here ≈ 600 GB: 65 536 pairs of 42 tokens, 4096 units) is refused before any work, with
// the batch, the figures and the fix.
void TestBench::batchBeyondMemoryIsRefusedBeforeAnyWork()
{
    Corpus corpus;
    std::string words;
    for (int w = 0; w < 20; ++w)
        words += " word" + std::to_string(w);
    for (int i = 0; i < 8; ++i)
        corpus.pairs.push_back({ "question " + std::to_string(i) + words, "answer " + std::to_string(i) + words, "mem", 0 });
    BenchConfig cfg;
    cfg.preset = "quick";
    cfg.batchSizes = { 4, 65536 };
    cfg.hidden = 4096;
    cfg.raceEpochs = 0;
    int events = 0;
    BenchCallbacks cb;
    cb.onProgress = [&](const std::string&, int, int) { ++events; };
    cb.onRow = [&](const BenchRow&) { ++events; };
    try {
        (void)runBench(cfg, corpus, cb);
        QFAIL("a batch needing hundreds of GB was run");
    } catch (const Error& e) {
        const std::string what = e.what();
        QVERIFY2(what.find("batch 65536: a training step of ") != std::string::npos, e.what());
        QVERIFY2(what.find("needs at least ") != std::string::npos && what.find(" GB is available: lower --batch")
                != std::string::npos,
            e.what());
    }
    QCOMPARE(events, 0); // nothing measured, nothing announced
}

QTEST_GUILESS_MAIN(TestBench)
#include "tst_bench.moc"
