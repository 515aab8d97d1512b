// The Torch-free owners: the names of every enum, the run folder's files (written and read by the
// engine alone), and corpus statistics against counts made by hand.

#include "atomicfile.h"
#include "chatbench/config.h"
#include "chatbench/corpusstats.h"
#include "chatbench/error.h"
#include "chatbench/names.h"
#include "chatbench/outputfile.h"
#include "chatbench/runs.h"
#include "chatbench/tokenizer.h"
#include "picklewalk.h"
#include "runstate.h"
#include "testutil.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QRegularExpression>
#include <QScopeGuard>

#include <nlohmann/json.hpp>

#include <clocale>
#include <cmath>
#include <filesystem>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>

using namespace chatbench;

class TestRuns : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void namesRoundTrip();
    void durations_data();
    void durations();
    void metricsRoundTrip();
    void historyToleratesBadRows();
    void stateRoundTrip();
    void stateFieldsAreRangeChecked_data();
    void stateFieldsAreRangeChecked();
    void fieldsOfTheWrongTypeAreNamed_data();
    void fieldsOfTheWrongTypeAreNamed();
    void damagedJsonIsNamedInWords();
    void refusedJsonNamesItsLine();
    void oneWriterPerRun();
    void checkpointsPastEightDigitsAreFound();
    void runFilesThatAreFoldersAreNamed();
    void hugeNumbersAreErrors();
    void stepHistory();
    void runFilesReadTheSameInADecimalCommaLocale();
    void runFolderAccessErrorsSayWhy();
    void stepHistoryIsCutInPlaceAndNeverBlocks();
    void bestEpochAndOverfittingNote();
    void listsOnlyRunsNewestFirst();
    void newRunDirIsFresh();
    void runCorpusErrorsNameTheConfig();
    void corpusStatsByHand();
    void vocabularyAgreesWithConfig();
    void outputTempFilesDoNotOutliveTheirWriter();
    void outputFolderThatCannotBeWrittenIsSaidFirst();
    void checkpointPickleWalk_data();
    void checkpointPickleWalk();
};

namespace {
template <typename E, typename Name, typename Parse>
void roundTrip(const std::vector<std::string>& names, Name name, Parse parse)
{
    QVERIFY(!names.empty());
    for (const auto& n : names) {
        const std::optional<E> v = parse(n);
        QVERIFY2(v.has_value(), n.c_str());
        QCOMPARE(name(*v), n);
    }
    QVERIFY(!parse("no-such-name").has_value());
    QVERIFY(!parse("").has_value());
}
} // namespace

void TestRuns::namesRoundTrip()
{
    roundTrip<CorpusFormat>(formatNames(), formatName, parseFormat);
    roundTrip<TokenizerMode>(tokenizerModeNames(), tokenizerModeName, parseTokenizerMode);
    roundTrip<OptimizerKind>(optimizerNames(), optimizerName, parseOptimizer);
    roundTrip<Precision>(precisionNames(), precisionName, parsePrecision);
    roundTrip<DecodeMethod>(decodeMethodNames(), decodeMethodName, parseDecodeMethod);
    roundTrip<HandoffMode>(handoffModeNames(), handoffModeName, parseHandoffMode);
    roundTrip<BenchPrecision>(benchPrecisionNames(), benchPrecisionName, parseBenchPrecision);
    roundTrip<BenchUnit>(benchUnitNames(), benchUnitName, parseBenchUnit);
    // The spellings users and files rely on.
    QCOMPARE(formatNames(), (std::vector<std::string> { "auto", "yaml", "tsv", "jsonl", "cornell", "dialog" }));
    QCOMPARE(tokenizerModeName(TokenizerMode::Punctuation), std::string("punct"));
    QCOMPARE(benchUnitName(BenchUnit::ReplyLatency), std::string("reply_latency"));
    QCOMPARE(trainingPrecision(BenchPrecision::TF32), Precision::FP32);
    QCOMPARE(trainingPrecision(BenchPrecision::BF16), Precision::BF16);
    QCOMPARE(trainStatusWord(TrainStatus::EarlyStopped), std::string("stopped early"));
    QCOMPARE(joinNames({ "a", "b", "c" }), std::string("a, b or c"));
    QCOMPARE(joinNames({ "a" }), std::string("a"));
    for (const auto& p : presetNames())
        QVERIFY(!presetDescription(p).empty());
}

void TestRuns::durations_data()
{
    QTest::addColumn<double>("seconds");
    QTest::addColumn<QString>("text");
    QTest::newRow("zero") << 0.0 << "0s";
    QTest::newRow("rounds") << 59.4 << "59s";
    QTest::newRow("minute") << 59.6 << "1m00s";
    QTest::newRow("minutes") << 275.0 << "4m35s";
    QTest::newRow("hours") << 7620.0 << "2h07m";
    QTest::newRow("negative") << -1.0 << "?";
    QTest::newRow("nan") << double(NAN) << "?";
    QTest::newRow("inf") << double(INFINITY) << "?";
}

void TestRuns::durations()
{
    QFETCH(double, seconds);
    QFETCH(QString, text);
    QCOMPARE(QString::fromStdString(formatDuration(seconds)), text);
}

void TestRuns::metricsRoundTrip()
{
    QTemporaryDir dir;
    std::vector<EpochMetrics> h;
    for (int e = 0; e < 3; ++e) {
        EpochMetrics m;
        m.epoch = e;
        m.step = 10 * (e + 1);
        m.trainLoss = 5.0 - e;
        m.validationLoss = e == 1 ? NAN : 6.0 - e; // no validation that epoch
        m.validationAccuracy = 0.1 * e;
        m.perplexity = std::exp(m.trainLoss);
        m.seconds = 1.25;
        m.tokensPerSecond = 1000.5;
        m.elapsedSeconds = 1.25 * (e + 1);
        h.push_back(m);
    }
    writeMetricsCsv(dir.path().toStdString(), h);
    const auto back = readRunHistory(dir.path().toStdString());
    QCOMPARE(back.size(), h.size());
    for (size_t i = 0; i < h.size(); ++i) {
        QCOMPARE(back[i].epoch, h[i].epoch);
        QCOMPARE(back[i].step, h[i].step);
        QCOMPARE(back[i].trainLoss, h[i].trainLoss);
        QCOMPARE(std::isnan(back[i].validationLoss), std::isnan(h[i].validationLoss));
        QCOMPARE(back[i].elapsedSeconds, h[i].elapsedSeconds);
        QCOMPARE(back[i].tokensPerSecond, h[i].tokensPerSecond);
    }
    QVERIFY(readRunHistory(dir.filePath("missing").toStdString()).empty());
}

void TestRuns::historyToleratesBadRows()
{
    QTemporaryDir dir;
    // Columns in another order plus an unknown one; a short row, a word and an empty cell skipped.
    testutil::writeFile(dir, "metrics.csv",
        "step,epoch,extra,train_loss,validation_loss,validation_accuracy,perplexity,seconds,tokens_per_second,"
        "elapsed_seconds\n"
        "9,1,x,4.5,nan,0.5,90,1,100,1\n"
        "18,2\n"
        "27,3,x,abc,4,0.5,90,1,100,3\n"
        "36,4,x,3.5,-nan,0.5,,1,100,4\n"
        "40,1e10,x,3.5,4,0.5,90,1,100,4\n" // an epoch no int holds (was converted anyway: undefined)
        "41,4.5,x,3.5,4,0.5,90,1,100,4\n"
        "42,nan,x,3.5,4,0.5,90,1,100,4\n"
        "45,5,x,3.0,3.9,0.6,49,1,100,5\n");
    const auto h = readRunHistory(dir.path().toStdString());
    QCOMPARE(h.size(), size_t(2));
    QCOMPARE(h[0].epoch, 0);
    QCOMPARE(h[0].step, int64_t(9));
    QVERIFY(std::isnan(h[0].validationLoss));
    QCOMPARE(h[1].epoch, 4);
    QCOMPARE(h[1].validationLoss, 3.9);
    // A header without the needed columns: nothing, not garbage.
    testutil::writeFile(dir, "metrics.csv", "a,b,c\n1,2,3\n");
    QVERIFY(readRunHistory(dir.path().toStdString()).empty());
}

void TestRuns::stateRoundTrip()
{
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    QVERIFY(!isRun(run));
    QVERIFY(!holdsRun(run));
    RunState s;
    s.epoch = 2;
    s.batchInEpoch = 3;
    s.step = 21;
    s.checkpoint = checkpointName(21);
    s.haveBest = true;
    s.bestValidationLoss = 3.5;
    EpochMetrics first, m;
    first.epoch = 0;
    first.step = 9;
    // A loss past ~709 has a perplexity past the doubles: written as null (JSON has no
    // infinity), it came back as NaN and metrics.csv said nan after a resume.
    first.trainLoss = 800;
    first.validationLoss = 750;
    first.perplexity = std::exp(first.validationLoss);
    m.epoch = 1;
    m.step = 18;
    m.trainLoss = NAN;
    s.history = { first, m };
    s.vocabFingerprint = 0xfedcba9876543211ULL; // past 2^53: kept as hex text, which doubles do not round
    s.corpusFingerprint = 0x8bf9a0c4d2e61357ULL;
    saveState(run, s);
    QVERIFY(testutil::readFile(dir.filePath("state.json")).contains("\"vocab_fingerprint\": \"fedcba9876543211\""));
    QVERIFY(testutil::readFile(dir.filePath("state.json")).contains("\"corpus_fingerprint\": \"8bf9a0c4d2e61357\""));
    QVERIFY(isRun(run));
    QVERIFY(holdsRun(run));
    const RunState back = loadState(run);
    QCOMPARE(back.checkpoint, std::string("ckpt-00000021.pt"));
    QCOMPARE(back.step, int64_t(21));
    QCOMPARE(back.batchInEpoch, int64_t(3));
    QCOMPARE(back.bestValidationLoss, 3.5);
    QCOMPARE(back.history.size(), size_t(2));
    QVERIFY(std::isnan(back.history[1].trainLoss));
    QVERIFY(std::isinf(back.history[0].perplexity) && back.history[0].perplexity > 0);
    QCOMPARE(back.history[1].perplexity, 0.0); // a finite one as it was
    QCOMPARE(back.vocabFingerprint, 0xfedcba9876543211ULL);
    QCOMPARE(back.corpusFingerprint, 0x8bf9a0c4d2e61357ULL);
    // Runs of the older form hold it as a number; a string that is not 16 hex digits is refused.
    QByteArray text = testutil::readFile(dir.filePath("state.json"));
    testutil::writeFile(
        dir, "state.json", QByteArray(text).replace("\"8bf9a0c4d2e61357\"", QByteArray::number(0x8bf9a0c4d2e61357ULL)));
    QCOMPARE(loadState(run).corpusFingerprint, 0x8bf9a0c4d2e61357ULL);
    testutil::writeFile(dir, "state.json", QByteArray(text).replace("\"8bf9a0c4d2e61357\"", "\"8bf9\""));
    try {
        (void)loadState(run);
        QFAIL("a fingerprint of four digits was read");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("'corpus_fingerprint' must be 16 hex digits"), e.what());
    }
    testutil::writeFile(dir, "state.json", text);

    // state.json and every checkpoint's state gone, best.json left: said, with the way to chat
    // (it was "not a chatbench run").
    QVERIFY(QFile::remove(dir.filePath("state.json")));
    testutil::writeFile(dir, "best.json", "{}");
    try {
        (void)loadState(run);
        QFAIL("a state came from nowhere");
    } catch (const Error& e) {
        QVERIFY2(
            QString(e.what()).contains("only the best weights are left (best.json); chat --weights best"), e.what());
    }
}

void TestRuns::stateFieldsAreRangeChecked_data()
{
    QTest::addColumn<QString>("field");
    QTest::addColumn<QString>("value");
    QTest::newRow("negative batch (was a crash)") << "batch_in_epoch"
                                                  << "-5";
    QTest::newRow("negative step") << "step"
                                   << "-100";
    QTest::newRow("negative epoch") << "epoch"
                                    << "-1";
    QTest::newRow("huge epoch") << "epoch"
                                << "2000000000";
    QTest::newRow("negative tokens") << "epoch_tokens"
                                     << "-3";
    QTest::newRow("negative loss sum") << "epoch_loss_sum"
                                       << "-1.5";
    QTest::newRow("negative time") << "elapsed_seconds"
                                   << "-2";
    QTest::newRow("zero loss scale") << "loss_scale"
                                     << "0";
    QTest::newRow("negative loss-scale counter") << "loss_scale_good_steps"
                                                 << "-1";
    QTest::newRow("negative patience count") << "bad_epochs"
                                             << "-4";
    // 1e300 was accepted, turned into a clock duration out of range (undefined behaviour) and
    // written back as -9223372036 s in a history the next open refused.
    QTest::newRow("epoch time past a billion seconds") << "epoch_seconds"
                                                       << "1e300";
    QTest::newRow("elapsed time past a billion seconds") << "elapsed_seconds"
                                                         << "1e10";
}

void TestRuns::stateFieldsAreRangeChecked()
{
    QFETCH(QString, field);
    QFETCH(QString, value);
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    RunState s;
    s.checkpoint = checkpointName(4);
    s.step = 4;
    saveState(run, s);
    QFile f(QString::fromStdString(statePath(run)));
    QVERIFY(f.open(QIODevice::ReadOnly));
    QString text = QString::fromUtf8(f.readAll());
    f.close();
    const QRegularExpression re("\"" + field + "\": *[-0-9.e+]+");
    QVERIFY(text.contains(re));
    text.replace(re, "\"" + field + "\": " + value);
    testutil::writeFile(dir, "state.json", text.toUtf8());
    try {
        loadState(run);
        QFAIL("expected an error");
    } catch (const Error& e) {
        QCOMPARE(e.file(), statePath(run));
        QVERIFY2(QString(e.what()).contains("'" + field + "' is out of range"), e.what());
    }
}

// Found trying hostile edits: "hidden": "128" in config.json said only "[json.exception.type_error.302]
// type must be number, but is string", naming no field; "hidden": 128.5 was read as 128 and
// "seed": -1 as 2^64 - 1; vocabulary words the tokenizer can never produce were taken.
void TestRuns::fieldsOfTheWrongTypeAreNamed_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("pattern"); // replaced in the file as written
    QTest::addColumn<QString>("replacement");
    QTest::addColumn<QString>("fragment");
    QTest::addColumn<bool>("located"); // the error names the line of the replacement (else the file)
    QTest::newRow("config string") << "config.json"
                                   << "\"hidden\": \\d+"
                                   << "\"hidden\": \"128\""
                                   << "'model.hidden' must be a whole number that fits, not \"128\"" << true;
    QTest::newRow("config fraction") << "config.json"
                                     << "\"hidden\": \\d+"
                                     << "\"hidden\": 128.5"
                                     << "'model.hidden' must be a whole number that fits, not 128.5" << true;
    QTest::newRow("config negative seed")
        << "config.json"
        << "\"seed\": \\d+"
        << "\"seed\": -1"
        << "'train.seed' must be a whole number of 0 or more that fits, not -1" << true;
    QTest::newRow("config key misspelt")
        << "config.json"
        << "\"patience\": \\d+"
        << "\"patience\": 3, \"patiance\": 1"
        << "unknown key 'train.patiance' (a misspelt setting?); 'train' takes optimizer" << true;
    QTest::newRow("config section unknown") << "config.json"
                                            << "\"device\": \\{"
                                            << "\"Device\": { \"threads\": 1 }, \"device\": {"
                                            << "unknown key 'Device'" << true;
    QTest::newRow("config section null") << "config.json"
                                         << "\"device\": \\{"
                                         << "\"device\": null, \"x\": {"
                                         << "'device' must be an object, not null" << true;
    QTest::newRow("config number as bool") << "config.json"
                                           << "\"attention\": false"
                                           << "\"attention\": 0"
                                           << "'model.attention' must be true or false, not 0" << true;
    QTest::newRow("state bool") << "state.json"
                                << "\"finished\": false"
                                << "\"finished\": \"yes\""
                                << "'finished' must be true or false, not \"yes\"" << true;
    QTest::newRow("state history") << "state.json"
                                   << "\"history\": \\[\\]"
                                   << "\"history\": \"x\""
                                   << "'history' must be a list" << true;
    QTest::newRow("state missing") << "state.json"
                                   << "\"step\": \\d+,"
                                   << ""
                                   << "'step' is missing" << false;
    // Edits that keep each field valid but the whole inconsistent, found in a fifth hostile pass.
    QTest::newRow("state step of another checkpoint")
        << "state.json"
        << "\"step\": \\d+,"
        << "\"step\": 7,"
        << "'step' 7 is not the step of its checkpoint 'ckpt-00000004.pt'" << false;
    QTest::newRow("state epochs without history")
        << "state.json"
        << "\"epoch\": 0,"
        << "\"epoch\": 2,"
        << "'history' holds 0 epoch(s) where 'epoch' says 2 are done" << false;
    QTest::newRow("state negative best loss") << "state.json"
                                              << "\"best_validation_loss\": [^,]+,\\s*\"have_best\": false"
                                              << "\"best_validation_loss\": -1.5, \"have_best\": true"
                                              << "'best_validation_loss' is out of range" << true;
    QTest::newRow("state NUL in a name") << "state.json"
                                         << "\"checkpoint\": \"ckpt-00000004.pt\""
                                         << "\"checkpoint\": \"ckpt-00000004.pt\\u0000.json\""
                                         << "'checkpoint' holds a NUL character" << true;
    // Found by an outside pass: "" was read as the run folder ("is a folder, not a file"), and a
    // path was refused without the line.
    QTest::newRow("state empty checkpoint") << "state.json"
                                            << "\"checkpoint\": \"ckpt-00000004.pt\""
                                            << "\"checkpoint\": \"\""
                                            << "'checkpoint' is empty: it names the checkpoint file "
                                               "(ckpt-00000004.pt for its step)"
                                            << true;
    QTest::newRow("state checkpoint path") << "state.json"
                                           << "\"checkpoint\": \"ckpt-00000004.pt\""
                                           << "\"checkpoint\": \"../x.pt\""
                                           << "checkpoint name must be a file in the run folder" << true;
    QTest::newRow("state key twice") << "state.json"
                                     << "\"step\": \\d+,"
                                     << "\"step\": 4, \"step\": 5,"
                                     << "the key 'step' appears twice in one object" << true;
    QTest::newRow("config key twice") << "config.json"
                                      << "\"hidden\": \\d+"
                                      << "\"hidden\": 64, \"hidden\": 200"
                                      << "the key 'hidden' appears twice in one object" << true;
    QTest::newRow("config NUL in a key") << "config.json"
                                         << "\"hidden\": \\d+"
                                         << "\"hidden\": 64, \"hid\\u0000den\": 200"
                                         << "holds a NUL character (\\u0000)" << true;
    QTest::newRow("vocab NUL") << "vocab.json"
                               << "\"hello\""
                               << "\"hel\\u0000lo\""
                               << "is empty or holds white space or NUL" << true;
    QTest::newRow("state best loss missing") << "state.json"
                                             << "\"best_validation_loss\": [^,]+,\\s*\"have_best\": false"
                                             << "\"best_validation_loss\": null, \"have_best\": true"
                                             << "'best_validation_loss' is out of range" << true;
    QTest::newRow("state nested deep (was a stack overflow)")
        << "state.json"
        << "\"checkpoint\": \"ckpt-00000004.pt\""
        << "\"checkpoint\": " + QString(100000, '[') + QString(100000, ']') << "nested more than 100 levels deep"
        << true;
    QTest::newRow("config nested deep") << "config.json"
                                        << "\"hidden\": \\d+"
                                        << "\"hidden\": " + QString(150, '[') + QString(150, ']')
                                        << "nested more than 100 levels deep" << true;
    QTest::newRow("state recipe not settings") << "state.json"
                                               << "\"step\": \\d+,"
                                               << "\"recipe\": {\"model.hidden\": [1]}, \"step\": 4,"
                                               << "'recipe' must be an object of at most 256 settings" << true;
    QTest::newRow("vocab tokens") << "vocab.json"
                                  << "\"tokens\": \\["
                                  << "\"tokens\": 5, \"x\": ["
                                  << "'tokens' must be a list of words" << true;
    QTest::newRow("vocab space") << "vocab.json"
                                 << "\"hello\""
                                 << "\"hel lo\""
                                 << "('hel lo') is empty or holds white space" << true;
    // The setting's own line, not the file as a whole: a name out of its list, a value out of its range.
    QTest::newRow("config optimizer name") << "config.json"
                                           << "\"optimizer\": \"[a-z]+\""
                                           << "\"optimizer\": \"adagrad\""
                                           << "'train.optimizer' must be adam, rmsprop or sgd" << true;
    QTest::newRow("config hidden range") << "config.json"
                                         << "\"hidden\": \\d+"
                                         << "\"hidden\": 0"
                                         << "hidden must be 1..8192" << true;
    // Let through as "cuda…", and refused by the resume only when training began, naming no file.
    QTest::newRow("config device index")
        << "config.json"
        << "\"device\": \"cpu\""
        << "\"device\": \"cuda:99999999999\""
        << "device must be 'cpu', 'cuda' or 'cuda:N' (N a device number), not 'cuda:99999999999'" << true;
    QTest::newRow("vocab mode") << "vocab.json"
                                << "\"mode\": \"[a-z]+\""
                                << "\"mode\": \"bpe\""
                                << "unknown tokenizer mode 'bpe'" << true;
    QTest::newRow("vocab empty") << "vocab.json"
                                 << "\"hello\""
                                 << "\"\""
                                 << "('') is empty or holds white space" << true;
}

// Found by an outside pass: a run file of NUL bytes said "[json.exception.parse_error.101] …
// unexpected end of input", and every JSON error carried nlohmann-json's tag.
void TestRuns::damagedJsonIsNamedInWords()
{
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    testutil::writeFile(dir, "config.json", QByteArray(4096, '\0'));
    try {
        (void)loadRunConfig(run);
        QFAIL("a file of NUL bytes was read");
    } catch (const Error& e) {
        QCOMPARE(QString(e.what()),
            QString::fromStdString(run + "/config.json:1: holds a NUL byte (byte 1): a damaged file, not JSON"));
    }
    testutil::writeFile(dir, "config.json", "{\"format\": \"chatbench-config\",\n \"model\": }\n");
    try {
        (void)loadRunConfig(run);
        QFAIL("broken JSON was read");
    } catch (const Error& e) {
        const QString what = e.what();
        QVERIFY2(what.startsWith(QString::fromStdString(run + "/config.json:2: not valid JSON: parse error at line 2"))
                && !what.contains("json.exception"),
            e.what());
    }
}

// Found by the sixth hostile pass: a key repeated in a run file, a NUL in a key and nesting past
// the limit were refused as "config.json:0", naming no line.
void TestRuns::refusedJsonNamesItsLine()
{
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    const auto refused = [&](const QByteArray& text) -> std::pair<long, std::string> {
        testutil::writeFile(dir, "config.json", text);
        try {
            (void)loadRunConfig(run);
        } catch (const Error& e) {
            return { e.line(), e.message() };
        }
        return { -1, "read" };
    };
    // The string before the model holds what looks like the key and brackets; only keys count.
    const QByteArray head = "{\"format\": \"chatbench-config\",\n \"note\": \"\\\"hidden\\\": 1, {[\",\n";
    auto [line, what] = refused(head + " \"model\": {\"hidden\": 64,\n\n  \"embed\": 8, \"hidden\": 200}}\n");
    QCOMPARE(line, 5L);
    QVERIFY2(what.find("the key 'hidden' appears twice") != std::string::npos, what.c_str());
    std::tie(line, what) = refused(head + " \"model\":\n {\"embed\": 8,\n  \"hid\\u0000den\": 2}}\n");
    QCOMPARE(line, 5L);
    QVERIFY2(what.find("holds a NUL character") != std::string::npos, what.c_str());
    // The top object is depth 0, so the 100th bracket inside it is the first one refused: on the
    // 100th line after the two of the head.
    QByteArray deep = head + " \"model\":";
    for (int i = 0; i < 150; ++i)
        deep += "\n[";
    std::tie(line, what) = refused(deep + QByteArray(150, ']') + "}\n");
    QCOMPARE(line, 103L);
    QVERIFY2(what.find("nested more than 100 levels deep") != std::string::npos, what.c_str());
}

void TestRuns::fieldsOfTheWrongTypeAreNamed()
{
    QFETCH(QString, file);
    QFETCH(QString, pattern);
    QFETCH(QString, replacement);
    QFETCH(QString, fragment);
    QFETCH(bool, located);
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    testutil::writeFile(dir, "config.json", QByteArray::fromStdString(toJson(TrainConfig {})));
    RunState s;
    s.checkpoint = checkpointName(4);
    s.step = 4;
    saveState(run, s);
    Tokenizer::build({ { "hello there", "hi you", "", 1 } }, {}).save(run + "/vocab.json");
    QFile f(dir.filePath(file));
    QVERIFY(f.open(QIODevice::ReadOnly));
    QString text = QString::fromUtf8(f.readAll());
    f.close();
    const QRegularExpression re(pattern);
    QVERIFY2(text.contains(re), qPrintable(text));
    const qsizetype at = text.indexOf(re);
    const long line = located ? static_cast<long>(text.left(at).count('\n')) + 1 : 0L;
    text.replace(at, re.match(text).capturedLength(), replacement);
    testutil::writeFile(dir, file, text.toUtf8());
    try {
        if (file == "config.json")
            (void)loadRunConfig(run);
        else if (file == "state.json")
            (void)loadStateFile(statePath(run));
        else
            (void)Tokenizer::load(run + "/vocab.json");
        QFAIL("expected an error");
    } catch (const Error& e) {
        QVERIFY2(QString::fromStdString(e.file()).endsWith(file), e.what());
        QVERIFY2(QString(e.what()).contains(fragment), e.what());
        QVERIFY2(
            e.line() == line, qPrintable(QString("line %1, expected %2: %3").arg(e.line()).arg(line).arg(e.what())));
    }
}

void TestRuns::oneWriterPerRun()
{
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    // Temporary files of writers killed mid-save (named as before the writer's process was in
    // the name, and as now, one of them with this process' own id, as a reused one would be), and
    // files that must stay: among them an export into the run folder by another live process.
    const pid_t ended = ::fork();
    if (ended == 0)
        ::_exit(0);
    QVERIFY(ended > 0 && ::waitpid(ended, nullptr, 0) == ended);
    QProcess exporter;
    exporter.start("sleep", { "60" });
    QVERIFY(exporter.waitForStarted());
    const QString dead = QString(".ckpt-00000041.pt.tmp-%1-5").arg(ended);
    const QString reused = QString(".state.json.tmp-%1-7").arg(QCoreApplication::applicationPid());
    const QString exporting = QString(".report.json.tmp-%1-6").arg(exporter.processId());
    testutil::writeFile(dir, ".ckpt-00000040.pt.tmp-1234567", QByteArray(1000, 'x'));
    testutil::writeFile(dir, ".state.json.tmp-42", "{");
    testutil::writeFile(dir, dead, "{");
    testutil::writeFile(dir, reused, "{");
    testutil::writeFile(dir, ".best-00000040.pt.tmp-best", "{");
    testutil::writeFile(dir, exporting, "{");
    testutil::writeFile(dir, "ckpt-00000020.pt", "keep");
    testutil::writeFile(dir, "notes.tmp-1", "keep: not one of ours");
    {
        const RunLock first(run);
        for (const QString& removed : { QString(".ckpt-00000040.pt.tmp-1234567"), QString(".state.json.tmp-42"), dead,
                 reused, QString(".best-00000040.pt.tmp-best") })
            QVERIFY2(!QFile::exists(dir.filePath(removed)), qPrintable(removed));
        QVERIFY(QFile::exists(dir.filePath(exporting)));
        exporter.kill();
        exporter.waitForFinished();
        QVERIFY(QFile::exists(dir.filePath("ckpt-00000020.pt")));
        QVERIFY(QFile::exists(dir.filePath("notes.tmp-1")));
        // A second writer (another open of the lock file: flock locks conflict even in one process).
        try {
            const RunLock second(run);
            QFAIL("expected the run to be in use");
        } catch (const Error& e) {
            QVERIFY2(
                QString(e.what()).contains("in use by process " + QString::number(QCoreApplication::applicationPid())),
                e.what());
        }
    }
    const RunLock again(run); // released with the first
}

// ckpt-100000000.pt (step 10^8, reachable: 100000 epochs of batch 1) was not taken for a
// checkpoint: pruning kept every one, and recovery without state.json chose step 99999999.
void TestRuns::checkpointsPastEightDigitsAreFound()
{
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    QCOMPARE(checkpointName(100000004), std::string("ckpt-100000004.pt"));
    for (const int64_t step : { int64_t(99999998), int64_t(100000004), int64_t(20) })
        testutil::writeFile(dir, QString::fromStdString(checkpointName(step)), "x");
    testutil::writeFile(dir, "ckpt-0000000020.pt", "not ours: leading zeros past eight digits");
    testutil::writeFile(dir, "ckpt-1234567x.pt", "not ours");
    QCOMPARE(checkpointFiles(run),
        (std::vector<std::string> { "ckpt-100000004.pt", "ckpt-99999998.pt", "ckpt-00000020.pt" }));
}

// A folder where the run writes metrics.csv, best.json or a checkpoint was found only after an
// epoch's work ("cannot replace file: Is a directory"), with metrics.csv already ahead of state.json.
void TestRuns::runFilesThatAreFoldersAreNamed()
{
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    testutil::writeFile(dir, "state.json", "{}");
    testutil::writeFile(dir, "notes", "x");
    QVERIFY(QDir(dir.path()).mkdir("other-folder"));
    requireRunFilesPlain(run); // nothing of ours is in the way
    for (const QString name : { "metrics.csv", "best.json", "ckpt-00000006.pt", "best-00000004.json" }) {
        QVERIFY(QDir(dir.path()).mkdir(name));
        try {
            requireRunFilesPlain(run);
            QFAIL("expected an error");
        } catch (const Error& e) {
            QCOMPARE(QString::fromStdString(e.file()), dir.filePath(name));
            QVERIFY2(QString(e.what()).contains("is not a regular file"), e.what());
        }
        QVERIFY(QDir(dir.filePath(name)).removeRecursively());
    }
}

void TestRuns::hugeNumbersAreErrors()
{
    // Found by fuzzing: a number beyond double's range made the JSON reader throw an exception
    // that no caller expected (the process aborted). Each reader now names the file.
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    testutil::writeFile(dir, "state.json", "{\"format\": \"chatbench-state\", \"step\": 8.8887E39984}");
    testutil::writeFile(dir, "vocab.json", "{\"format\": \"chatbench-vocab\", \"min_frequency\": -62244E44444892}");
    try {
        loadState(run);
        QFAIL("expected an error");
    } catch (const Error& e) {
        QCOMPARE(e.file(), statePath(run));
    }
    try {
        Tokenizer::load(vocabPath(run));
        QFAIL("expected an error");
    } catch (const Error& e) {
        QCOMPARE(e.file(), vocabPath(run));
    }
    QVERIFY_THROWS_EXCEPTION(
        Error, trainConfigFromJson("{\"format\": \"chatbench-config\", \"x\": 1e999999}", "c.json"));
    // Also found by fuzzing: a "format" that is not a string threw a JSON type error.
    QVERIFY_THROWS_EXCEPTION(Error, trainConfigFromJson("{\"format\": {\"a\": 1}}", "c.json"));
    testutil::writeFile(dir, "vocab.json", "{\"format\": [1, 2]}");
    QVERIFY_THROWS_EXCEPTION(Error, Tokenizer::load(vocabPath(run)));
    testutil::writeFile(dir, "state.json", "{\"format\": 7}");
    QVERIFY_THROWS_EXCEPTION(Error, loadState(run));
}

void TestRuns::stepHistory()
{
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    QVERIFY(readRunSteps(run).empty()); // not a run yet
    RunState s;
    s.checkpoint = checkpointName(3);
    s.step = 3;
    saveState(run, s);
    appendRunSteps(run, { { 0, 1, 2.5, 100, 0.1 }, { 0, 2, 2.4, 110, 0.2 } });
    appendRunSteps(run, { { 0, 3, 2.3, 120, 0.3 }, { 1, 4, 2.2, 130, 0.4 } }); // 4: past state.json
    // A torn last line (killed mid-append) and a garbage row are skipped.
    QFile f(dir.filePath("steps.csv"));
    QVERIFY(f.open(QIODevice::Append));
    f.write("x,y,z\n1,5,2.");
    f.close();
    auto rows = readRunSteps(run);
    QCOMPARE(rows.size(), size_t(3));
    // Epoch cells that are no whole number (were kept as epoch -2147483648) are bad rows.
    {
        QTemporaryDir d2;
        const std::string r2 = d2.path().toStdString();
        saveState(r2, s);
        testutil::writeFile(d2, "steps.csv",
            "step,epoch,loss,tokens_per_second,elapsed_seconds\n1,1e10,3.2,100,0.1\n2,nan,3.1,100,0.2\n"
            "3,2.5,3.0,100,0.3\n3,1,3.0,100,0.3\n");
        const auto r = readRunSteps(r2);
        QCOMPARE(r.size(), size_t(1));
        QCOMPARE(r[0].epoch, 0);
        QCOMPARE(r[0].step, int64_t(3));
    }
    QCOMPARE(rows[2].step, int64_t(3));
    QCOMPARE(rows[1].loss, 2.4);
    QCOMPARE(rows[0].tokensPerSecond, 100.0);
    keepRunSteps(run, 2); // resumed from the checkpoint at step 2
    rows = readRunSteps(run);
    QCOMPARE(rows.size(), size_t(2));
    appendRunSteps(run, { { 0, 3, 2.35, 125, 0.31 } });
    rows = readRunSteps(run);
    QCOMPARE(rows.size(), size_t(3));
    QCOMPARE(rows[2].loss, 2.35);
}

// The window is a QApplication, which sets the C library's locale from the environment: in a
// locale that writes 2,5 (German, French, …) the run files' readers took "2.5" for 2 followed by
// junk, so every row was bad and a run opened in the window had no loss curves. Numbers in run
// files are read the same in every locale.
void TestRuns::runFilesReadTheSameInADecimalCommaLocale()
{
    QTemporaryDir locales;
    QProcess make;
    make.start("localedef", { "-i", "de_DE", "-f", "UTF-8", locales.filePath("de_DE.UTF-8") });
    QVERIFY2(make.waitForFinished(120000) && make.exitStatus() == QProcess::NormalExit && make.exitCode() == 0,
        qPrintable("localedef (Debian's 'locales' package) could not build de_DE.UTF-8: "
            + QString::fromLocal8Bit(make.readAllStandardError())));
    qputenv("LOCPATH", locales.path().toLocal8Bit());
    const auto restore = qScopeGuard([] {
        std::setlocale(LC_NUMERIC, "C");
        qunsetenv("LOCPATH");
    });
    QVERIFY(std::setlocale(LC_NUMERIC, "de_DE.UTF-8") != nullptr);
    QCOMPARE(QByteArray(std::localeconv()->decimal_point), QByteArray(",")); // the locale took
    metricsRoundTrip();
    if (QTest::currentTestFailed())
        return;
    stepHistory();
}

// A run folder that could not be reached was "not a chatbench run folder (no config.json)"
// whatever the reason: a typo, a folder without permission, a loop of links, a name too long.
void TestRuns::runFolderAccessErrorsSayWhy()
{
    QTemporaryDir dir;
    auto errorOf = [](const QString& run) -> QString {
        try {
            (void)loadRunConfig(run.toStdString());
        } catch (const Error& e) {
            return e.what();
        }
        return "no error";
    };
    QCOMPARE(errorOf(dir.filePath("missing")), dir.filePath("missing") + ": no such run folder");
    QVERIFY(QDir().mkpath(dir.filePath("empty")));
    QCOMPARE(errorOf(dir.filePath("empty")), dir.filePath("empty") + ": not a chatbench run folder (no config.json)");
    QVERIFY(QFile::link(dir.filePath("loop1"), dir.filePath("loop2")));
    QVERIFY(QFile::link(dir.filePath("loop2"), dir.filePath("loop1")));
    QCOMPARE(errorOf(dir.filePath("loop1")),
        dir.filePath("loop1") + ": cannot reach it (Too many levels of symbolic links)");
    const QString tooLong = dir.filePath(QString(300, 'x'));
    QCOMPARE(errorOf(tooLong), tooLong + ": cannot reach it (File name too long)");
    testutil::writeFile(dir, "locked/config.json", "{}");
    QCOMPARE(::chmod(qPrintable(dir.filePath("locked")), 0), 0);
    {
        testutil::DacBypassOff asUser;
        QCOMPARE(errorOf(dir.filePath("locked")),
            dir.filePath("locked/config.json") + ": cannot reach it (Permission denied)");
    }
    QCOMPARE(::chmod(qPrintable(dir.filePath("locked")), 0700), 0);
}

// steps.csv was read whole and rewritten at every resume (a 3 GB one grown by hand made that
// slow and, under a memory limit, impossible); a FIFO in its place would have hung a save.
void TestRuns::stepHistoryIsCutInPlaceAndNeverBlocks()
{
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    RunState s;
    s.checkpoint = checkpointName(8);
    s.step = 8;
    saveState(run, s);
    appendRunSteps(run, { { 0, 1, 2.5, 100, 0.1 }, { 0, 2, 2.4, 110, 0.2 } });
    QFile f(dir.filePath("steps.csv"));
    QVERIFY(f.open(QIODevice::Append));
    f.write("not,a,row\n");
    f.close();
    appendRunSteps(run, { { 0, 3, 2.3, 120, 0.3 }, { 1, 4, 2.2, 130, 0.4 } });
    QVERIFY(f.open(QIODevice::Append));
    f.write("1,5,2."); // killed in the middle of an append
    f.close();
    const QByteArray before = testutil::readFile(dir.filePath("steps.csv"));
    struct stat st0 { };
    QCOMPARE(::stat(qPrintable(dir.filePath("steps.csv")), &st0), 0);

    // Resumed at step 4: the rows are all its own, only the torn line goes; the rest is untouched.
    keepRunSteps(run, 4);
    QByteArray after = testutil::readFile(dir.filePath("steps.csv"));
    QCOMPARE(after, before.left(before.size() - 6));
    appendRunSteps(run, { { 1, 5, 2.1, 140, 0.5 } });
    auto rows = readRunSteps(run);
    QCOMPARE(rows.size(), size_t(5));
    QCOMPARE(rows[4].loss, 2.1);

    // Resumed from step 2: the tail from the first row past it is cut off, in the same file.
    keepRunSteps(run, 2);
    struct stat st1 { };
    QCOMPARE(::stat(qPrintable(dir.filePath("steps.csv")), &st1), 0);
    QCOMPARE(st1.st_ino, st0.st_ino);
    after = testutil::readFile(dir.filePath("steps.csv"));
    QVERIFY2(after.endsWith("not,a,row\n"), after.constData());
    rows = readRunSteps(run);
    QCOMPARE(rows.size(), size_t(2));
    QCOMPARE(rows[1].step, int64_t(2));

    // Junk without a line break (5 MB of digits, as a disk that filled mid-write can leave): read
    // past a block at a time, never as one line, and cut off on resume.
    const QByteArray kept = testutil::readFile(dir.filePath("steps.csv"));
    QVERIFY(f.open(QIODevice::Append));
    f.write(QByteArray(5 << 20, '7'));
    f.close();
    QCOMPARE(readRunSteps(run).size(), size_t(2));
    keepRunSteps(run, 2);
    QCOMPARE(testutil::readFile(dir.filePath("steps.csv")), kept);

    // A row past the checkpoint followed by rows before it (junk, or an edit) is not a tail:
    // nothing after it is cut off.
    const QByteArray header = "epoch,step,loss,tokens_per_second,elapsed_seconds\n";
    testutil::writeFile(dir, "steps.csv", header + "1,1,2.5,1,1\n1,1e9,9,9,9\n1,inf,9,9,9\n1,2,2.4,1,1\n");
    keepRunSteps(run, 2);
    QCOMPARE(readRunSteps(run).size(), size_t(2));
    // Columns in another order, and old Mac line ends: rewritten in the engine's order, so that
    // the next append lands under the right columns.
    testutil::writeFile(
        dir, "steps.csv", "step,epoch,loss,tokens_per_second,elapsed_seconds\r1,1,2.5,1,1\r2,1,2.4,1,1\r");
    keepRunSteps(run, 2);
    appendRunSteps(run, { { 0, 3, 2.3, 120, 0.3 } });
    rows = readRunSteps(run);
    QCOMPARE(rows.size(), size_t(3));
    QCOMPARE(rows[1].loss, 2.4);
    QCOMPARE(rows[2].step, int64_t(3));
    QCOMPARE(rows[2].loss, 2.3);
    QVERIFY(testutil::readFile(dir.filePath("steps.csv")).startsWith(header));
    // A link in its place (to a file of another run, say): refused, the file it names untouched.
    const QByteArray victim = header + "1,1,2.5,1,1\n1,100,9,9,9\nkeep me\n";
    testutil::writeFile(dir, "other.csv", victim);
    QVERIFY(QFile::remove(dir.filePath("steps.csv")));
    QVERIFY(QFile::link(dir.filePath("other.csv"), dir.filePath("steps.csv")));
    for (int which = 0; which < 2; ++which) {
        try {
            if (which == 0)
                keepRunSteps(run, 2);
            else
                appendRunSteps(run, { { 0, 3, 2.3, 120, 0.3 } });
            QFAIL("steps.csv was written through a link");
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).contains("is a link (symbolic or hard)"), e.what());
        }
    }
    QCOMPARE(testutil::readFile(dir.filePath("other.csv")), victim);
    QVERIFY(QFile::remove(dir.filePath("steps.csv")));

    // A FIFO where steps.csv belongs: read as nothing, written with a clear error, never waited on.
    QCOMPARE(::mkfifo(qPrintable(dir.filePath("steps.csv")), 0644), 0);
    QVERIFY(readRunSteps(run).empty());
    for (int which = 0; which < 2; ++which) {
        try {
            if (which == 0)
                appendRunSteps(run, { { 0, 3, 2.3, 120, 0.3 } });
            else
                keepRunSteps(run, 2);
            QFAIL("a FIFO was taken for steps.csv");
        } catch (const Error& e) {
            QVERIFY2(
                QString(e.what()).contains("steps.csv") && QString(e.what()).contains("not a regular file"), e.what());
        }
    }
    QVERIFY(QFile::remove(dir.filePath("steps.csv")));

    // A file the resume cannot read (mode 000, as a user), or one with a header that is not ours
    // (another tool's log put in its place, a header edited): was written afresh with the rows it
    // could keep, none, and the history was lost. Now refused, the file untouched.
    const QByteArray history = header + "1,1,2.5,1,1\n1,2,2.4,1,1\n";
    const auto readWrite = QFileDevice::ReadOwner | QFileDevice::WriteOwner;
    auto refused = [&](const QByteArray& content, QFileDevice::Permissions mode, const char* reason) {
        testutil::writeFile(dir, "steps.csv", content);
        QVERIFY(QFile::setPermissions(dir.filePath("steps.csv"), mode));
        {
            testutil::DacBypassOff asUser;
            try {
                keepRunSteps(run, 1);
                QFAIL(qPrintable(QString("steps.csv was replaced: ") + reason));
            } catch (const Error& e) {
                QVERIFY2(e.file() == run + "/steps.csv" && QString(e.what()).contains(reason), e.what());
            }
        }
        QVERIFY(QFile::setPermissions(dir.filePath("steps.csv"), readWrite));
        QCOMPARE(testutil::readFile(dir.filePath("steps.csv")), content);
    };
    refused(history, {}, "cannot read it (Permission denied)");
    refused("time,value\n1,2.5\n2,2.4\n", readWrite, "does not start with chatbench's header (epoch,step,loss,");
    refused("epoch;step;loss;tokens_per_second;elapsed_seconds\n1;1;2.5;1;1\n", readWrite, "does not start with");
    // A header cut short by a kill during the first save holds nothing: written afresh.
    testutil::writeFile(dir, "steps.csv", header.left(9));
    keepRunSteps(run, 2);
    QCOMPARE(testutil::readFile(dir.filePath("steps.csv")), header);
}

void TestRuns::bestEpochAndOverfittingNote()
{
    // Hand-made histories: (train, validation) per epoch.
    auto history = [](const std::vector<std::pair<double, double>>& losses) {
        std::vector<EpochMetrics> h;
        for (size_t i = 0; i < losses.size(); ++i) {
            EpochMetrics m;
            m.epoch = static_cast<int>(i);
            m.step = static_cast<int64_t>(10 * (i + 1));
            m.trainLoss = losses[i].first;
            m.validationLoss = losses[i].second;
            h.push_back(m);
        }
        return h;
    };
    QCOMPARE(bestEpochIndex({}), -1);
    QCOMPARE(bestEpochIndex(history({ { 3, NAN }, { 2, NAN } })), -1);
    // Validation best at epoch 3 (index 2), then three worse epochs while training falls: a note.
    const auto over = history({ { 5, 4.0 }, { 4, 3.5 }, { 3, 3.2 }, { 2.5, 3.3 }, { 2, 3.6 }, { 1.5, 3.4 } });
    QCOMPARE(bestEpochIndex(over), 2);
    const QString note = QString::fromStdString(overfittingNote(over, 3));
    QVERIFY2(note.startsWith("Overfitting:") && note.contains("not improved for 3 epochs")
            && note.contains("best 3.200 at epoch 3") && note.contains("now 3.400") && note.contains("3.000 to 1.500")
            && note.contains("would have stopped at epoch 6"),
        qPrintable(note));
    // Two epochs past the best: not yet; four with patience 3: still said.
    QVERIFY(overfittingNote({ over.begin(), over.end() - 1 }, 3).empty());
    QVERIFY(!overfittingNote(over, 2).empty());
    // Training loss not falling (both curves rising: divergence, not memorising): no note.
    QVERIFY(overfittingNote(history({ { 2, 3 }, { 2.5, 3.5 }, { 3, 4 }, { 3.5, 4.5 } }), 3).empty());
    // Still improving: no note.
    QVERIFY(overfittingNote(history({ { 5, 4 }, { 4, 3.5 }, { 3, 3.2 }, { 2, 3.1 } }), 3).empty());
    // No validation: no note.
    QVERIFY(overfittingNote(history({ { 5, NAN }, { 4, NAN }, { 3, NAN }, { 2, NAN }, { 1, NAN } }), 3).empty());
}

void TestRuns::listsOnlyRunsNewestFirst()
{
    QTemporaryDir dir;
    const std::string root = dir.path().toStdString();
    auto makeRun = [&](const std::string& name) {
        const std::string run = root + "/" + name;
        std::filesystem::create_directories(run);
        RunState s;
        s.checkpoint = checkpointName(0);
        saveState(run, s);
        return run;
    };
    makeRun("older");
    std::filesystem::create_directories(root + "/not-a-run");
    testutil::writeFile(dir, "half/config.json", "{}"); // a run that never checkpointed
    const std::string newer = makeRun("newer");
    // Newer by the clock of the file system, whatever its granularity.
    std::filesystem::last_write_time(
        newer + "/state.json", std::filesystem::last_write_time(root + "/older/state.json") + std::chrono::seconds(5));
    const auto runs = listRuns(root);
    QCOMPARE(runs.size(), size_t(2));
    QCOMPARE(runs[0].name, std::string("newer"));
    QCOMPARE(runs[1].name, std::string("older"));
    QVERIFY(!runs[0].configOk); // no config.json in these hand-made runs
    QVERIFY(holdsRun(root + "/half"));
    QVERIFY(!isRun(root + "/half"));
    QVERIFY(listRuns(root + "/missing").empty());
}

void TestRuns::newRunDirIsFresh()
{
    QTemporaryDir dir;
    const std::string a = newRunDir(dir.path().toStdString(), "seed");
    QVERIFY(QString::fromStdString(a).endsWith("-seed"));
    std::filesystem::create_directories(a);
    const std::string b = newRunDir(dir.path().toStdString(), "seed");
    QVERIFY(a != b);
    QVERIFY(!std::filesystem::exists(b));
}

void TestRuns::runCorpusErrorsNameTheConfig()
{
    QTemporaryDir dir;
    const std::string run = dir.filePath("run").toStdString();
    std::filesystem::create_directories(run); // a folder that is no run (no folder: runFolderAccessErrorsSayWhy)
    try {
        loadRunCorpus(run);
        QFAIL("expected an error");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("config.json"), e.what());
    }
    TrainConfig cfg = preset("quick");
    cfg.model.vocabSize = 10;
    cfg.corpus = dir.filePath("gone.yml").toStdString();
    testutil::writeFile(dir, "run/config.json", QByteArray::fromStdString(toJson(cfg)));
    try {
        loadRunCorpus(run);
        QFAIL("expected an error");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("gone.yml") && QString(e.what()).contains("config.json"), e.what());
    }
    testutil::writeFile(dir, "gone.yml", "conversations:\n- - hello there\n  - hi\n  - how are you\n");
    const Corpus c = loadRunCorpus(run);
    QCOMPARE(c.pairs.size(), size_t(2));
    QCOMPARE(c.path, cfg.corpus);
    // The run's pairing is how it is reloaded (for resume).
    cfg.pairing = Pairing::FirstRest;
    cfg.strictCorpus = true;
    testutil::writeFile(dir, "run/config.json", QByteArray::fromStdString(toJson(cfg)));
    QCOMPARE(loadRunConfig(run).pairing, Pairing::FirstRest);
    QVERIFY(loadRunConfig(run).strictCorpus);
    const Corpus firstRest = loadRunCorpus(run);
    QCOMPARE(firstRest.pairs.size(), size_t(1));
    QCOMPARE(firstRest.pairs[0].response, std::string("hi how are you"));
}

void TestRuns::corpusStatsByHand()
{
    Corpus c;
    c.format = CorpusFormat::Tsv;
    c.files = { "a.tsv" };
    c.warnings = { { "a.tsv", 3, "expected exactly two tab-separated columns", CorpusWarning::Kind::Record },
        { "a.tsv", 0, "no pairs", CorpusWarning::Kind::Note } };
    // Prompts of 1, 2, 3 words; responses of 2, 2, 4 words (Keras tokenizer: punctuation is dropped).
    c.pairs = { { "hi", "hello there", "a.tsv", 1 }, { "how are", "fine thanks!", "a.tsv", 2 },
        { "what is this", "a small test corpus", "a.tsv", 4 } };
    const CorpusStats s = corpusStats(c, {});
    QCOMPARE(s.pairs, int64_t(3));
    QCOMPARE(s.files, int64_t(1));
    QCOMPARE(s.format, CorpusFormat::Tsv);
    QCOMPARE(s.maxPromptWords, int64_t(3));
    QCOMPARE(s.maxResponseWords, int64_t(4));
    QCOMPARE(s.meanPromptWords, 2.0);
    QCOMPARE(s.meanResponseWords, 8.0 / 3.0);
    QCOMPARE(s.promptLengths, (std::vector<int64_t> { 0, 1, 1, 1 }));
    QCOMPARE(s.responseLengths, (std::vector<int64_t> { 0, 0, 2, 0, 1 }));
    QCOMPARE(s.warnings.size(), c.warnings.size());
    QCOMPARE(s.skippedRecords, int64_t(1));
    QCOMPARE(s.skippedFiles, int64_t(0));
    QVERIFY(s.vocabulary > 4 && s.vocabulary <= 4 + 13);
    QVERIFY(s.validationOovRate >= 0 && s.validationOovRate <= 1);
    const QString text = QString::fromStdString(describe(s, "a.tsv"));
    QVERIFY(text.contains("pairs        3 (consecutive pairing)"));
    QVERIFY(text.contains("warnings     1 malformed record skipped, 1 note"));
    QVERIFY(text.contains("warning      a.tsv:3: expected exactly two tab-separated columns"));
    QVERIFY(text.contains("warning      a.tsv: no pairs"));
    // Only the first few when asked, the rest counted.
    const QString shortText = QString::fromStdString(describe(s, "a.tsv", 1));
    QVERIFY(!shortText.contains("no pairs"));
    QVERIFY(shortText.contains("... and 1 more"));
    const auto json = nlohmann::json::parse(toJson(s, "a.tsv"));
    QCOMPARE(json["warnings"][0]["line"].get<long>(), 3L);
    QCOMPARE(json["warnings"][0]["kind"].get<std::string>(), std::string("record"));
    QCOMPARE(json["skipped_records"].get<int>(), 1);
    QCOMPARE(json["pairing"].get<std::string>(), std::string("consecutive"));
}

void TestRuns::vocabularyAgreesWithConfig()
{
    // vocab.json's drop_unknown edited against config.json: chat left unknown words out and a
    // resume trained on other ids, without a word.
    TrainConfig cfg;
    TokenizerOptions opt = cfg.tokenizer;
    const Tokenizer same = Tokenizer::build({ { "hello there", "hi you", "", 1 } }, opt);
    cfg.model.vocabSize = same.size();
    checkRunTokenizer("run", same, cfg, true);
    opt.dropUnknown = !cfg.tokenizer.dropUnknown;
    const Tokenizer edited = Tokenizer::build({ { "hello there", "hi you", "", 1 } }, opt);
    try {
        checkRunTokenizer("run", edited, cfg, true);
        QFAIL("a vocabulary that drops unknown words against config.json was taken");
    } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find("vocab.json") != std::string::npos
                && std::string(e.what()).find("drop_unknown = true but config.json says tokenizer.drop_unknown = false")
                    != std::string::npos,
            e.what());
    }
}

void TestRuns::outputTempFilesDoNotOutliveTheirWriter()
{
    // A corpus export killed while writing left ".out.tsv.tmp-N" beside its output for good.
    QTemporaryDir dir;
    const std::string out = dir.filePath("out.tsv").toStdString();
    // A dead writer's file (a process that has ended), a live one's (this process), and one of
    // another output.
    const pid_t ended = ::fork();
    if (ended == 0)
        ::_exit(0);
    QVERIFY(ended > 0 && ::waitpid(ended, nullptr, 0) == ended);
    const QString dead = dir.filePath(QString(".out.tsv.tmp-%1-7").arg(ended));
    const QString live = dir.filePath(QString(".out.tsv.tmp-%1-8").arg(QCoreApplication::applicationPid()));
    const QString other = dir.filePath(QString(".other.tsv.tmp-%1-9").arg(ended));
    // Names that only start like one: a user's file, and the temporary file of an output named
    // "out.tsv.tmp-<pid>-x" (its writer is the last number).
    const QString users = dir.filePath(QString(".out.tsv.tmp-%1-old").arg(ended));
    const QString longer
        = dir.filePath(QString(".out.tsv.tmp-%1-x.tmp-%2-3").arg(ended).arg(QCoreApplication::applicationPid()));
    for (const QString& f : { dead, live, other, users, longer })
        testutil::writeFile(dir, QFileInfo(f).fileName(), "partial");
    writeOutputFile(out, "a\tb\n");
    QVERIFY(!QFileInfo::exists(dead));
    for (const QString& f : { live, other, users, longer })
        QVERIFY2(QFileInfo::exists(f), qPrintable(f));

    // A signal's handler removes the file being written (the CLI calls this before it exits).
    std::string seen;
    writeFileAtomic(dir.filePath("run.json").toStdString(), [&](const std::string& tmp) {
        testutil::writeFile(dir, QString::fromStdString(tmp.substr(tmp.rfind('/') + 1)), "half");
        seen = tmp;
        removeTempFilesInProgress();
        QVERIFY(!QFileInfo::exists(QString::fromStdString(tmp)));
        testutil::writeFile(dir, QString::fromStdString(tmp.substr(tmp.rfind('/') + 1)), "whole"); // as if it went on
    });
    QVERIFY(QFileInfo(QString::fromStdString(seen)).fileName().startsWith(".run.json.tmp-"));
    QCOMPARE(testutil::readFile(dir.filePath("run.json")), QByteArray("whole"));
    removeTempFilesInProgress(); // nothing in progress: the written file stays
    QVERIFY(QFileInfo::exists(dir.filePath("run.json")));
}

// Found by an outside pass: `bench --out` into a read-only file system measured for minutes, then
// failed to write its report; the folder is checked with the path, before the work.
void TestRuns::outputFolderThatCannotBeWrittenIsSaidFirst()
{
    QTemporaryDir dir;
    QVERIFY(QDir(dir.path()).mkdir("locked"));
    const std::string out = dir.filePath("locked/report.json").toStdString();
    checkOutputPath(out);
    QVERIFY(QFile::setPermissions(dir.filePath("locked"), QFileDevice::ReadOwner | QFileDevice::ExeOwner));
    {
        testutil::DacBypassOff asUser;
        try {
            checkOutputPath(out);
            QFAIL("expected an error");
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what())
                    == out + ": its folder " + dir.filePath("locked").toStdString()
                        + " cannot take a new file (Permission denied)",
                e.what());
        }
    }
    QVERIFY(QFile::setPermissions(
        dir.filePath("locked"), QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner));
}

// A checkpoint's pickle as LibTorch's pickler writes one storage: PROTO 2, MARK, 'storage', the
// GLOBAL torch.<type>, the key, the device, the count as LONG1 (8 bytes), TUPLE, BINPERSID, STOP;
// `middle` goes between the device and the count.
static QByteArray storagePickle(const char* type, int64_t count, const QByteArray& middle = {})
{
    auto unicode = [](const QByteArray& s) {
        QByteArray b("X");
        for (int k = 0; k < 4; ++k)
            b.append(char((s.size() >> (8 * k)) & 0xff));
        return b + s;
    };
    QByteArray p("\x80\x02(", 3);
    p += unicode("storage") + "ctorch\n" + type + "\n" + unicode("0") + unicode("cpu") + middle + "\x8a\x08";
    for (int k = 0; k < 8; ++k)
        p.append(char((uint64_t(count) >> (8 * k)) & 0xff));
    return p + "tQ.";
}

void TestRuns::checkpointPickleWalk_data()
{
    QTest::addColumn<QByteArray>("pickle");
    QTest::addColumn<QString>("refusal"); // empty: passes
    // The record "0" holds 64 bytes.
    QTest::newRow("16 floats fit") << storagePickle("FloatStorage", 16) << "";
    QTest::newRow("8 doubles fit") << storagePickle("DoubleStorage", 8) << "";
    QTest::newRow("17 floats do not") << storagePickle(
        "FloatStorage", 17) << "storage '0' of 17 elements (68 bytes) at byte 60, whose record holds 64 bytes";
    QTest::newRow("2^63 - 1 floats") << storagePickle("FloatStorage", INT64_MAX)
                                     << "storage '0' of 9223372036854775807 elements (over 2^56 bytes) at byte 60";
    QTest::newRow("2^62 longs: 2^65 bytes, which wraps to 0 in 64 bits")
        << storagePickle("LongStorage", int64_t(1) << 62) << "of 4611686018427387904 elements (over 2^56 bytes)";
    QTest::newRow("a negative count") << storagePickle("FloatStorage", -1) << "storage '0' with -1 elements";
    QTest::newRow("a memo index ahead of the entries") << storagePickle("FloatStorage", 16,
        QByteArray("N\x72\x05\x00\x00\x00", 6)) << "memo index 5 at byte 50 (0 entries so far)";
    QTest::newRow("a string longer than the pickle") << QByteArray("\x80\x02X\xff\xff\xff\x7f"
                                                                   "abc.",
        11) << "a string of 2147483647 bytes at byte 2 with 4 left";
    QTest::newRow("not a pickle") << QByteArray("PK\x03\x04") << "";
}

void TestRuns::checkpointPickleWalk()
{
    QFETCH(QByteArray, pickle);
    QFETCH(QString, refusal);
    const std::string why = malformedPickle(reinterpret_cast<const uint8_t*>(pickle.constData()),
        static_cast<size_t>(pickle.size()), [](const std::string& key) -> std::optional<size_t> {
            return key == "0" ? std::optional<size_t>(64) : std::nullopt;
        });
    if (refusal.isEmpty())
        QVERIFY2(why.empty(), why.c_str());
    else
        QVERIFY2(QString::fromStdString(why).contains(refusal), why.c_str());
}

QTEST_GUILESS_MAIN(TestRuns)
#include "tst_runs.moc"
