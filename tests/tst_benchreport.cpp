// The benchmark's Torch-free parts: the FLOP formula against a hand count, the timing harness
// against a fake device clock, the report schema round trip and bad reports.

#include "chatbench/bench.h"
#include "chatbench/error.h"
#include "testutil.h"

#include <QDirIterator>
#include <QFileInfo>
#include <QRegularExpression>
#include <QTemporaryDir>

#include <sys/stat.h>

#include <cmath>

using namespace chatbench;

namespace {

// A fake device: work only queues time; it lands on the clock when someone synchronises, like
// CUDA kernels.
struct FakeDevice {
    double clock = 0;
    double queued = 0;
    BenchClock synced()
    {
        return { [this] { return clock; },
            [this] {
                clock += queued;
                queued = 0;
            } };
    }
};

} // namespace

class TestBenchReport : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void flopsMatchHandCount();
    void summaryStatistics();
    void harnessSynchronisesAndSkipsWarmup();
    void warmUpRunsUntilTimingsSettle();
    void energyIsReadBetweenCounterUpdates();
    void precisionLabelSaysWhatRan();
    void reportRoundTrip();
    void workloadsGroupLikeWithLike();
    void badReports_data();
    void badReports();
    void fieldsOutOfRangeNameTheirLine_data();
    void fieldsOutOfRangeNameTheirLine();
    void reportFilesAreReadSafely();
    void committedReportsImport();
};

void TestBenchReport::flopsMatchHandCount()
{
    // LSTM, 2 layers, E=3, H=4, B=5, T=6. Layer 0: 2·4·4·(3+4)·5·6 = 6720; layer 1: 2·4·4·(4+4)·5·6 = 7680.
    QCOMPARE(lstmFlops(2, 3, 4, 5, 6), 14400.0);
    ModelConfig m;
    m.vocabSize = 10;
    m.embedDim = 3;
    m.hidden = 4;
    m.layers = 2;
    // Encoder over S=7: 2·16·7·35 + 2·16·8·35 = 7840 + 8960 = 16800; decoder over T=6: 14400;
    // projection 2·H·V·B·T = 2·4·10·5·6 = 2400.
    QCOMPARE(seq2seqForwardFlops(m, 5, 7, 6), 33600.0);
    QCOMPARE(seq2seqTrainFlops(m, 5, 7, 6), 100800.0);
    // Attention adds keys 2·H·H·B·S = 1120, scores + context 2·2·S·H·B·T = 3360, combine 2·2H·H·B·T = 1920.
    m.attention = true;
    QCOMPARE(seq2seqForwardFlops(m, 5, 7, 6), 33600.0 + 1120 + 3360 + 1920);
}

void TestBenchReport::summaryStatistics()
{
    const Timing t = summarise({ 5, 1, 4, 2, 3 });
    QCOMPARE(t.median, 3.0);
    QCOMPARE(t.min, 1.0);
    QCOMPARE(t.max, 5.0);
    QCOMPARE(t.p10, 1.4);
    QCOMPARE(t.p90, 4.6);
    QCOMPARE(t.samples.size(), size_t(5));
    QCOMPARE(summarise({ 2, 4 }).median, 3.0);
}

void TestBenchReport::harnessSynchronisesAndSkipsWarmup()
{
    // The first call is a slow warm-up (1 s), later ones take 0.25 s.
    FakeDevice fake;
    const BenchClock device = fake.synced();
    int calls = 0;
    auto work = [&] { fake.queued += calls++ == 0 ? 1.0 : 0.25; };
    const Timing t = timeRepeated(work, /*warmup=*/1, /*repeats=*/4, device);
    QCOMPARE(calls, 5);
    QCOMPARE(t.samples.size(), size_t(4));
    for (double s : t.samples)
        QCOMPARE(s, 0.25); // not 0 (no sync after the work), not 1.25 (warm-up leaking in)
    QCOMPARE(t.median, 0.25);

    // Without a sync the same harness would read 0: the fake really models asynchrony.
    calls = 1;
    const Timing unsynced = timeRepeated(work, 0, 2, BenchClock { [&] { return fake.clock; }, [] {} });
    QCOMPARE(unsynced.median, 0.0);
}

void TestBenchReport::warmUpRunsUntilTimingsSettle()
{
    // A GPU ramping its clocks up: each run faster until the clock tops out at 0.2 s a run.
    const std::vector<double> ramp = { 1.0, 0.6, 0.4, 0.3, 0.25, 0.21, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2 };
    FakeDevice fake;
    const BenchClock device = fake.synced();
    size_t calls = 0;
    auto work = [&] { fake.queued += ramp[std::min(calls++, ramp.size() - 1)]; };
    // At least 2 runs, then until two in a row agree within 5%: 0.21 → 0.2 (4.8%) after 7 runs.
    QCOMPARE(warmUp(work, 2, 20, 0.05, device), 7);
    const Timing t = timeRepeated(work, 0, 3, device);
    for (double x : t.samples)
        QCOMPARE(x, 0.2); // a fixed count of 2 would have timed 0.4, 0.3 and 0.25
    calls = 0;
    QCOMPARE(warmUp(work, 2, 4, 0.05, device), 4); // capped
    calls = 0;
    QCOMPARE(warmUp(work, 0, 4, 0.05, device), 0); // none asked for
    QCOMPARE(calls, size_t(0));
    calls = 8;
    QCOMPARE(warmUp(work, 1, 10, 0.05, device), 2); // already settled: the minimum plus one to compare
}

void TestBenchReport::energyIsReadBetweenCounterUpdates()
{
    // A GPU drawing 100 W whose energy counter moves every 0.1 s, as NVML's did on an H200; a run
    // takes 0.03 s, so it costs 3 J. Reading the counter around five runs (0.15 s) gave 0 or 10 J.
    FakeDevice fake;
    const BenchClock device = fake.synced();
    auto work = [&] { fake.queued += 0.03; };
    auto coarse = [&] { return 10.0 * std::floor(fake.clock / 0.1 + 1e-9); };
    const double perRun = energyPerRun(work, coarse, 1.0, 5.0, device);
    QVERIFY2(std::abs(perRun - 3.0) <= 0.3, qPrintable(QString::number(perRun)));
    QVERIFY(fake.clock >= 1.0 && fake.clock < 1.5); // at least the window, not much more

    // A fine counter gives the exact figure.
    auto fine = [&] { return 100.0 * fake.clock; };
    QCOMPARE(qRound(energyPerRun(work, fine, 0.5, 5.0, device) * 1000), 3000);

    // No counter, or one that never moves: not available (-1), and it gives up within maxSeconds.
    QCOMPARE(energyPerRun(
                 work, [] { return -1.0; }, 1.0, 5.0, device),
        -1.0);
    const double before = fake.clock;
    QCOMPARE(energyPerRun(
                 work, [] { return 42.0; }, 1.0, 2.0, device),
        -1.0);
    QVERIFY(fake.clock - before <= 2.1);
    // A counter that stops answering half-way: not a figure from half a window.
    int reads = 0;
    auto failing = [&] { return ++reads < 20 ? coarse() : -1.0; };
    QCOMPARE(energyPerRun(work, failing, 1.0, 5.0, device), -1.0);
    // Cancelled (Compare's Cancel): it ends after the run in progress, not after the window.
    int runs = 0;
    auto counted = [&] {
        ++runs;
        work();
    };
    QCOMPARE(energyPerRun(counted, coarse, 1.0, 5.0, device, [&] { return runs >= 3; }), -1.0);
    QCOMPARE(runs, 3);
}

void TestBenchReport::precisionLabelSaysWhatRan()
{
    BenchRow row;
    row.precision = BenchPrecision::BF16;
    QCOMPARE(precisionLabel(row), std::string("bf16")); // an old report: nothing probed
    row.lstmDtype = "bfloat16";
    QCOMPARE(precisionLabel(row), std::string("bf16"));
    row.lstmDtype = "float16"; // cuDNN ran the LSTM in half under bf16 autocast
    QCOMPARE(precisionLabel(row), std::string("bf16 (LSTM fp16)"));
    row.lstmDtype = "encoder float32, decoder bfloat16"; // CPU autocast leaves the packed encoder alone
    QCOMPARE(precisionLabel(row), std::string("bf16 (LSTM fp32/bf16)"));
    QCOMPARE(lstmRanShort(row), std::string("fp32/bf16"));
    row.precision = BenchPrecision::FP32;
    row.lstmDtype = "float32";
    row.tf32 = true;
    QCOMPARE(precisionLabel(row), std::string("fp32 (TF32 maths)"));
    QCOMPARE(lstmRanShort(row), std::string("tf32"));
    row.precision = BenchPrecision::TF32;
    QCOMPARE(precisionLabel(row), std::string("tf32"));
    row.tf32 = false;
    QCOMPARE(precisionLabel(row), std::string("tf32 (TF32 off)"));
}

void TestBenchReport::workloadsGroupLikeWithLike()
{
    BenchReport a;
    a.corpus = "chatterbot-english";
    a.corpusPairs = 2046;
    a.model.vocabSize = 2287;
    a.model.embedDim = 200;
    a.model.hidden = 200;
    a.model.layers = 1;
    BenchReport b = a;
    b.model.vocabSize = 2317; // another tokenizer of the same recipe: still the same work
    QVERIFY(sameWorkload(a, 50, b, 50));
    QVERIFY(!sameWorkload(a, 50, b, 64)); // another batch
    QVERIFY(sameWorkload(a, 0, b, 64)); // 0: any batch (race curves)
    BenchReport other = a;
    other.corpus = "chatbench";
    other.corpusPairs = 318;
    QVERIFY(!sameWorkload(a, 50, other, 50)); // the bundled corpus beside the chatterbot one
    BenchReport bigger = a;
    bigger.model.hidden = 512;
    QVERIFY(!sameWorkload(a, 50, bigger, 50));
    BenchReport attention = a;
    attention.model.attention = true;
    QVERIFY(!sameWorkload(a, 50, attention, 50));
    // Fingerprints decide where both reports have one; a report without one matches by name.
    BenchReport fa = a, fb = a;
    fa.corpusFingerprint = 0x1234;
    fb.corpusFingerprint = 0x5678;
    QVERIFY(!sameWorkload(fa, 50, fb, 50));
    QVERIFY(sameWorkload(fa, 50, a, 50));
    QCOMPARE(describeWorkload(a, 50), std::string("chatterbot-english (2046 pairs), E=200 H=200, 1 layer, batch 50"));
    QCOMPARE(describeWorkload(attention, 0),
        std::string("chatterbot-english (2046 pairs), E=200 H=200, 1 layer, attention"));

    // The fingerprint survives the JSON round trip; a malformed one is an error naming the file.
    a.corpusFingerprint = 0xfedcba9876543210ULL;
    QCOMPARE(benchReportFromJson(toJson(a), "a.json").corpusFingerprint, 0xfedcba9876543210ULL);
    QVERIFY(toJson(a).find("\"fingerprint\": \"fedcba9876543210\"") != std::string::npos);
    std::string bad = toJson(a);
    bad.replace(bad.find("fedcba9876543210"), 16, "not-hex-at-all!!");
    try {
        benchReportFromJson(bad, "bad.json");
        QFAIL("expected an error");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).startsWith("bad.json") && QString(e.what()).contains("fingerprint"), e.what());
    }
}

void TestBenchReport::reportRoundTrip()
{
    BenchReport r;
    r.created = "2026-01-02T03:04:05Z";
    r.label = "Test GPU";
    r.machine.cpuModel = "Test CPU";
    r.machine.cpuFlags = { "avx2", "fma" };
    r.machine.cores = 8;
    r.machine.memoryBytes = 1 << 30;
    r.machine.gpuName = "Test GPU";
    r.machine.gpuDriver = "580.1";
    r.machine.torch = "2.11.0";
    r.machine.cuda = "13.0.0";
    r.machine.cudnn = "9.19.0";
    r.machine.onednn = "v3.10";
    r.preset = "seed";
    r.model.vocabSize = 1000;
    r.corpus = "chatbench";
    r.corpusPairs = 318;
    r.gemm = { { "cuda:0", BenchPrecision::FP16, 0, 4096, 512000.5 } };
    BenchRow row;
    row.device = "cuda:0";
    row.precision = BenchPrecision::FP16;
    row.batch = 64;
    row.unit = BenchUnit::TrainStep;
    row.time = summarise({ 0.010, 0.011, 0.012 });
    row.tokensPerSecond = 123456.5;
    row.gflops = 2048.25;
    row.gemmFraction = 0.004;
    row.peakMemoryBytes = 123456789;
    row.energyJoules = 1.5;
    row.energySource = "nvml";
    row.warmupRuns = 7;
    row.lstmDtype = "float16";
    r.rows = { row };
    row.unit = BenchUnit::ReplyLatency;
    row.energyJoules = -1;
    row.energySource = "not available";
    r.rows.push_back(row);
    // A race that diverged: its loss is written as null, and read back as NaN.
    r.races = { { "cuda:0", BenchPrecision::FP16, 0, { { 0.5, 5.0, 5.5 }, { 1.0, 4.0, NAN }, { 1.5, NAN, NAN } } } };
    r.notes = { "cpu fp16: not supported" };
    const std::string json = toJson(r);
    const BenchReport back = benchReportFromJson(json, "mem.json");
    QCOMPARE(toJson(back), json);
    QCOMPARE(back.rows.size(), size_t(2));
    QCOMPARE(back.rows[0].time.median, 0.011);
    QCOMPARE(back.rows[1].energyJoules, -1.0);
    QCOMPARE(back.rows[0].warmupRuns, 7);
    QCOMPARE(back.rows[0].lstmDtype, std::string("float16"));
    QVERIFY(std::isnan(back.races[0].points[1].validationLoss));
    QVERIFY(std::isnan(back.races[0].points[2].loss));
    QCOMPARE(back.schemaVersion, BenchReport::kSchemaVersion);
}

void TestBenchReport::badReports_data()
{
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<long>("line");
    QTest::addColumn<QString>("fragment");
    QTest::newRow("syntax") << QByteArray("{\n \"format\": \"chatbench-bench\",\n \"rows\": [,]\n}") << 3L << "JSON";
    QTest::newRow("other-format") << QByteArray("{\"format\": \"chatbench-config\"}") << 1L
                                  << "not a chatbench benchmark";
    QTest::newRow("newer-schema") << QByteArray("{\"format\": \"chatbench-bench\", \"schema_version\": 99}") << 1L
                                  << "schema version 99";
    QTest::newRow("missing") << QByteArray("{\"format\": \"chatbench-bench\", \"schema_version\": 1}") << 0L
                             << "bad benchmark report";
    QTest::newRow("unknown-unit") << QByteArray(
        "{\"format\": \"chatbench-bench\", \"schema_version\": 1, \"machine\": {},"
        " \"model\": {\"vocab_size\": 1, \"embed_dim\": 1, \"hidden\": 1, \"layers\": 1},"
        " \"corpus\": {}, \"gemm\": [], \"rows\": [{\"device\": \"cpu\", \"precision\":"
        " \"fp32\", \"threads\": 1, \"batch\": 1, \"unit\": \"fortnight\"}]}")
                                  << 1L << "unknown unit 'fortnight'";
    QTest::newRow("unknown-precision") << QByteArray(
        "{\"format\": \"chatbench-bench\", \"schema_version\": 1, \"machine\": {},"
        " \"model\": {\"vocab_size\": 1, \"embed_dim\": 1, \"hidden\": 1, \"layers\": 1},"
        " \"corpus\": {}, \"gemm\": [{\"device\": \"cpu\", \"precision\": \"fp8\", \"n\": 1, \"gflops\": 1}],"
        " \"rows\": []}") << 1L << "unknown precision 'fp8'";
}

void TestBenchReport::badReports()
{
    QFETCH(QByteArray, bytes);
    QFETCH(long, line);
    QFETCH(QString, fragment);
    try {
        benchReportFromJson(bytes.toStdString(), "r.json");
        QFAIL("expected an error");
    } catch (const Error& e) {
        QCOMPARE(e.file(), std::string("r.json"));
        QCOMPARE(e.line(), line);
        QVERIFY2(QString(e.what()).contains(fragment), e.what());
    }
}

namespace {
// A report as `bench` writes it: one CPU row, one GEMM ceiling, a race.
std::string wellFormedReport()
{
    BenchReport r;
    r.label = "fixture";
    r.model.vocabSize = 100;
    r.corpus = "fixture";
    r.corpusPairs = 10;
    r.gemm = { { "cpu", BenchPrecision::FP32, 2, 1024, 150.0 } };
    BenchRow row;
    row.device = "cpu";
    row.threads = 2;
    row.batch = 50;
    row.unit = BenchUnit::TrainStep;
    row.time = summarise({ 0.020, 0.021, 0.022, 0.025 });
    row.tokensPerSecond = 25000;
    row.gflops = 70;
    row.gemmFraction = 0.47;
    row.peakMemoryBytes = 1 << 29;
    r.rows = { row };
    r.races = { { "cpu", BenchPrecision::FP32, 2, { { 1.0, 5.0, 5.5 }, { 2.0, 4.0, 5.0 } } } };
    r.notes = { "a note" };
    return toJson(r);
}
} // namespace

// Found by reading the reader after an outside pass: it took any number a report held (a batch
// of 0 or 1e300, which was cast to int, a negative time, times out of order, a zero median the
// speed-ups divide by) and said "report.json:" without a line for the fields it refused.
void TestBenchReport::fieldsOutOfRangeNameTheirLine_data()
{
    QTest::addColumn<QString>("pattern"); // replaced in a well-formed report
    QTest::addColumn<QString>("replacement");
    QTest::addColumn<QString>("fragment");
    QTest::addColumn<QString>("lineOf"); // the error's line: the first holding this after the edit
    QTest::newRow("batch 0") << "\"batch\": 50"
                             << "\"batch\": 0"
                             << "'rows[0].batch' must be between 1 and"
                             << "\"batch\"";
    QTest::newRow("batch 1e300") << "\"batch\": 50"
                                 << "\"batch\": 1e300"
                                 << "'rows[0].batch' must be a whole number"
                                 << "\"batch\"";
    QTest::newRow("threads negative") << "\"threads\": 2,\\s*\"batch\""
                                      << "\"threads\": -2, \"batch\""
                                      << "'rows[0].threads' must be between 0 and"
                                      << "\"threads\": -2";
    QTest::newRow("median negative") << "\"median_s\": [0-9.e-]+"
                                     << "\"median_s\": -0.02"
                                     << "'rows[0].time.median_s' must be between 0 and"
                                     << "\"median_s\"";
    QTest::newRow("median zero") << "\"median_s\": [0-9.e-]+"
                                 << "\"median_s\": 0"
                                 << "'rows[0].time.median_s' must be above 0"
                                 << "\"median_s\"";
    QTest::newRow("times out of order") << "\"p10_s\": [0-9.e-]+"
                                        << "\"p10_s\": 9.5"
                                        << "'rows[0].time' is out of order"
                                        << "\"time\"";
    QTest::newRow("sample negative") << "\"samples_s\": \\[\\s*[0-9.e-]+"
                                     << "\"samples_s\": [\n -1.5"
                                     << "'rows[0].time.samples_s[0]' must be a number of seconds"
                                     << "-1.5";
    QTest::newRow("gflops huge") << "\"gflops\": 70[.0-9]*"
                                 << "\"gflops\": 1e300"
                                 << "'rows[0].gflops' must be between 0 and"
                                 << "1e300";
    QTest::newRow("energy a word") << "\"energy_joules\": null"
                                   << "\"energy_joules\": \"lots\""
                                   << "'rows[0].energy_joules' must be a number"
                                   << "\"energy_joules\"";
    QTest::newRow("row not an object") << "\"rows\": \\["
                                       << "\"rows\": [\n 55555, "
                                       << "'rows[0]' must be an object"
                                       << "55555";
    QTest::newRow("label too long") << "\"label\": \"fixture\""
                                    << "\"label\": \"" + QString(5000, 'x') + "\""
                                    << "'label' is longer than 4096 bytes"
                                    << "\"label\"";
    QTest::newRow("too many notes") << "\"notes\": \\[[^\\]]*\\]"
                                    << "\"notes\": [" + QString("\"n\", ").repeated(10000) + "\"n\"]"
                                    << "'notes' holds 10001 items, more than the 10000"
                                    << "\"notes\"";
    QTest::newRow("race seconds negative") << "\"seconds\": 1.0"
                                           << "\"seconds\": -7.25"
                                           << "'races[0].points[0].seconds' must be between 0 and"
                                           << "-7.25";
    QTest::newRow("model hidden zero") << "\"hidden\": 200"
                                       << "\"hidden\": 0"
                                       << "'model.hidden' must be between 1 and"
                                       << "\"hidden\"";
    QTest::newRow("precision unknown") << "\"precision\": \"fp32\",\\s*\"threads\": 2,\\s*\"batch\""
                                       << "\"precision\": \"fp4\", \"threads\": 2, \"batch\""
                                       << "unknown precision 'fp4'"
                                       << "fp4";
}

void TestBenchReport::fieldsOutOfRangeNameTheirLine()
{
    QFETCH(QString, pattern);
    QFETCH(QString, replacement);
    QFETCH(QString, fragment);
    QFETCH(QString, lineOf);
    QString text = QString::fromStdString(wellFormedReport());
    (void)benchReportFromJson(text.toStdString(), "r.json"); // well formed before the edit
    const QRegularExpression re(pattern);
    const auto m = re.match(text);
    QVERIFY2(m.hasMatch(), qPrintable(pattern));
    text.replace(m.capturedStart(), m.capturedLength(), replacement);
    const long line = static_cast<long>(text.left(text.indexOf(lineOf)).count('\n')) + 1;
    try {
        (void)benchReportFromJson(text.toStdString(), "r.json");
        QFAIL("expected an error");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains(fragment), e.what());
        QVERIFY2(
            e.line() == line, qPrintable(QString("line %1, expected %2: %3").arg(e.line()).arg(line).arg(e.what())));
    }
}

void TestBenchReport::reportFilesAreReadSafely()
{
    QTemporaryDir dir;
    const std::string good = testutil::writeFile(dir, "good.json", QByteArray::fromStdString(wellFormedReport()));
    QCOMPARE(readBenchReport(good).rows.size(), size_t(1));
    // A pipe is refused before it is opened (opening waits for a writer), a folder by name.
    const QString pipe = dir.filePath("pipe.json");
    QCOMPARE(::mkfifo(QFile::encodeName(pipe).constData(), 0600), 0);
    auto refused = [](const std::string& path) {
        try {
            (void)readBenchReport(path);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("read");
    };
    QVERIFY(refused(pipe.toStdString()).find("not a regular file") != std::string::npos);
    QVERIFY(refused(pipe.toStdString()).find("folders") == std::string::npos); // a folder is refused too
    QVERIFY(refused(dir.path().toStdString()).find("is a folder") != std::string::npos);
    // A file far larger than any report is refused by its size, unread (a sparse 3 GiB file).
    const QString huge = dir.filePath("huge.json");
    {
        QFile f(huge);
        QVERIFY(f.open(QIODevice::WriteOnly));
        QVERIFY(f.resize(qint64(3) << 30));
    }
    QVERIFY2(refused(huge.toStdString()).find("more than the limit of 64 MiB") != std::string::npos,
        refused(huge.toStdString()).c_str());
}

void TestBenchReport::committedReportsImport()
{
    // Every report in bench/reports (chatbench's own and the peers', written by Python) reads back.
    int seen = 0;
    QDirIterator it(CHATBENCH_SOURCE_DIR "/bench/reports", { "*.json" }, QDir::Files, QDirIterator::Subdirectories);
    while (it.hasNext()) {
        const QString path = it.next();
        if (QFileInfo(path).fileName() == "summary.json")
            continue; // the peers' comparison table (bench/peers/compare.py), another format
        // Every other name is a report; one that does not read fails here with its reason.
        try {
            const BenchReport r = readBenchReport(path.toStdString());
            QVERIFY2(!r.rows.empty(), qPrintable(path));
        } catch (const std::exception& e) {
            QFAIL(e.what());
        }
        ++seen;
    }
    QVERIFY(seen >= 4);
}

QTEST_GUILESS_MAIN(TestBenchReport)
#include "tst_benchreport.moc"
