// chatbench-cli smoke tests: every command as a user runs it, including the error paths.

#include "testutil.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QThread>

#include <csignal>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

struct Run {
    int code = -1;
    QString out;
    QString err;
};

Run program(const QString& path, const QStringList& args, const QByteArray& input = {}, int timeoutMs = 300000)
{
    QProcess p;
    p.start(path, args);
    if (!p.waitForStarted())
        qFatal("cannot start the CLI");
    if (!input.isEmpty())
        p.write(input);
    p.closeWriteChannel();
    if (!p.waitForFinished(timeoutMs))
        qFatal("the CLI did not finish");
    return { p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAllStandardOutput()),
        QString::fromUtf8(p.readAllStandardError()) };
}

Run cli(const QStringList& args, const QByteArray& input = {}, int timeoutMs = 300000)
{
    return program(CHATBENCH_CLI, args, input, timeoutMs);
}

// A bash script with the CLI as $0 and `args` as $1...
Run shell(const QString& script, const QStringList& args = {})
{
    return program("/bin/bash", QStringList { "-c", script, CHATBENCH_CLI } + args);
}

const QByteArray kYaml = "categories:\n- test\nconversations:\n"
                         "- - good morning\n  - morning to you too\n"
                         "- - what is the weather like\n  - sunny with a chance of gradients\n"
                         "- - do you sleep\n  - only when the loss is flat\n"
                         "- - how old are you\n  - a few epochs old\n"
                         "- - see you later\n  - bye for now\n";

} // namespace

class TestCli : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase();
    void help();
    void corpusCommands();
    void corpusErrorsNameFileAndLine();
    void trainSeedPresetAndChat();
    void chatJsonTrace();
    void chatExplain();
    void interactiveChat();
    void badArguments();
    void corpusOutOfMemoryNamesTheFile();
    void brokenPipeStopsTrainingWithACheckpoint();
    void fileSizeLimitIsAnErrorNotASignal();
    void smallStackLimitIsNoLimit();
    void namesThatActOnTheTerminalAreEscaped();
    void progressLinesOnlyWhereTheTerminalRedraws();
    void defaultCorpusSaysWhereItCameFrom();
    void threadsTheSystemRefusesAreSaid();
    void stopAndResume();
    void signalWhileWaitingEndsAtOnce();
    void chatLineEndingsAndControlBytes();
    void explainRefusesAChangedCorpus();
    void corruptRunFilesAndTwoWriters();
    void outputsNeverOverwriteInputsOrRuns();
    void aVocabularyOfOneOffWordsIsPointedAtMaxVocab();
    void runFilesAreNeverWrittenThroughLinksNorReplaced();
    void outputsGoThroughLinksAndNeverIntoPipes();
    void oversizedInputsAreRefusedByName();
    void doctor();
    void bench();
    void importKeras();

private:
    QTemporaryDir m_dir;
    QString m_corpus;
    QString m_run;
};

void TestCli::initTestCase()
{
    m_corpus = QString::fromStdString(testutil::writeFile(m_dir, "unseen/chat.yml", kYaml));
    m_run = m_dir.filePath("run");
}

void TestCli::help()
{
    const Run r = cli({ "--help" });
    QCOMPARE(r.code, 0);
    for (const char* cmd : { "corpus", "train", "chat", "doctor" })
        QVERIFY(r.out.contains(cmd));
    for (const char* cmd : { "train", "chat", "doctor" }) {
        const Run sub = cli({ cmd, "--help" });
        QCOMPARE(sub.code, 0);
        QVERIFY(sub.out.contains("--"));
    }
}

void TestCli::corpusCommands()
{
    const Run v = cli({ "corpus", "validate", CHATBENCH_DATASETS_DIR "/chatbench" });
    QCOMPARE(v.code, 0);
    QVERIFY(v.out.startsWith("ok: "));
    const Run s = cli({ "corpus", "stats", "--json", m_corpus });
    QCOMPARE(s.code, 0);
    const QJsonObject j = QJsonDocument::fromJson(s.out.toUtf8()).object();
    QCOMPARE(j["pairs"].toInt(), 5);
    QCOMPARE(j["format"].toString(), QString("yaml"));
    QVERIFY(j["vocabulary"].toInt() > 4);
    const Run t = cli({ "corpus", "stats", m_corpus });
    QCOMPARE(t.code, 0);
    QVERIFY(t.out.contains("OOV rate"));
    // One pair holds nothing out: no validation words, not "0.0% of validation words".
    const QString one
        = QString::fromStdString(testutil::writeFile(m_dir, "one-pair.tsv", "hello there\tgeneral kenobi\n"));
    const Run single = cli({ "corpus", "stats", one });
    QVERIFY2(single.code == 0 && single.out.contains("OOV rate     - (no validation words"), qPrintable(single.out));
    const Run singleJson = cli({ "corpus", "stats", "--json", one });
    QVERIFY2(QJsonDocument::fromJson(singleJson.out.toUtf8()).object()["validation_oov_rate"].isNull(),
        qPrintable(singleJson.out));
}

void TestCli::corpusErrorsNameFileAndLine()
{
    // A bad record is skipped and named (stderr) unless --strict, which fails on it.
    QByteArray lines = "a\tb\nno tab\n";
    for (int i = 0; i < 7; ++i)
        lines += "q" + QByteArray::number(i) + "\tr\tthird column\n";
    const QString bad = QString::fromStdString(testutil::writeFile(m_dir, "bad.tsv", lines));
    const Run tolerant = cli({ "corpus", "validate", bad });
    QCOMPARE(tolerant.code, 0);
    QVERIFY2(tolerant.out.startsWith("ok: 1 pair (consecutive pairing)"), qPrintable(tolerant.out));
    QVERIFY(tolerant.out.contains("skipped 8 malformed record(s)"));
    QVERIFY2(tolerant.err.startsWith("8 malformed records skipped\n"), qPrintable(tolerant.err));
    QVERIFY(tolerant.err.contains("warning: " + bad + ":2: expected 'prompt<TAB>response', found no tab"));
    QVERIFY(tolerant.err.contains("... and 3 more")); // the first 5 of 8
    QVERIFY(!tolerant.err.contains(bad + ":9:"));
    const Run verbose = cli({ "corpus", "validate", bad, "--verbose" });
    QVERIFY(verbose.err.contains(bad + ":9: expected exactly two tab-separated columns"));
    const Run stats = cli({ "corpus", "stats", "--json", bad });
    const QJsonObject sj = QJsonDocument::fromJson(stats.out.toUtf8()).object();
    QCOMPARE(sj["skipped_records"].toInt(), 8);
    QCOMPARE(sj["warnings"].toArray().size(), 8);
    QCOMPARE(sj["warnings"].toArray()[0].toObject()["line"].toInt(), 2);

    const Run r = cli({ "corpus", "validate", "--strict", bad });
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains(bad + ":2:"), qPrintable(r.err));
    const Run missing = cli({ "corpus", "validate", m_dir.filePath("nope.yml") });
    QCOMPARE(missing.code, 1);
    QVERIFY(missing.err.contains("no such file"));
    const Run train = cli({ "train", "--strict", "--corpus", bad, "--run", m_dir.filePath("never") });
    QCOMPARE(train.code, 1);
    QVERIFY(train.err.contains(bad + ":2:"));
    QVERIFY(!QDir(m_dir.filePath("never")).exists());
    // Nothing usable left: an error at the first bad record, strict or not.
    const QString hopeless = QString::fromStdString(testutil::writeFile(m_dir, "hopeless.tsv", "x\ny\n"));
    const Run none = cli({ "train", "--corpus", hopeless, "--run", m_dir.filePath("never") });
    QCOMPARE(none.code, 1);
    QVERIFY2(none.err.contains(hopeless + ":1:"), qPrintable(none.err));

    // --pairing first-rest: the recipe's pairs, shown and stored in the run.
    const QString dialog = QString::fromStdString(testutil::writeFile(m_dir, "d.yml",
        "conversations:\n- - hello there\n  - hi\n  - how are you\n- - bye now\n  - see you\n  - take care\n"));
    const Run fr = cli({ "corpus", "stats", "--json", "--pairing", "first-rest", dialog });
    const QJsonObject fj = QJsonDocument::fromJson(fr.out.toUtf8()).object();
    QCOMPARE(fj["pairs"].toInt(), 2);
    QCOMPARE(fj["pairing"].toString(), QString("first-rest"));
    const QString run = m_dir.filePath("firstrest");
    const Run t = cli(
        { "train", "--preset", "quick", "--epochs", "1", "--pairing", "first-rest", "--corpus", dialog, "--run", run });
    QVERIFY2(t.code == 0, qPrintable(t.out + t.err));
    QVERIFY(t.out.contains("(2 pairs)"));
    QFile cfg(run + "/config.json");
    QVERIFY(cfg.open(QIODevice::ReadOnly));
    QCOMPARE(QJsonDocument::fromJson(cfg.readAll()).object()["corpus"].toObject()["pairing"].toString(),
        QString("first-rest"));
    // Resume reloads the corpus paired the same way (else the fingerprint would not match).
    const Run more = cli({ "train", "--resume", "--run", run, "--epochs", "2" });
    QVERIFY2(more.code == 0, qPrintable(more.out + more.err));
    const Run wrong = cli({ "corpus", "validate", "--pairing", "first_rest", dialog });
    QVERIFY(wrong.code != 0);
    QVERIFY(wrong.err.contains("first-rest"));
}

void TestCli::trainSeedPresetAndChat()
{
    // The seed preset (the Keras recipe) on a chatterbot corpus it has never seen.
    const Run t = cli({ "train", "--preset", "seed", "--corpus", m_corpus, "--run", m_run, "--epochs", "120",
        "--val-fraction", "0", "--lr", "0.003" });
    QVERIFY2(t.code == 0, qPrintable(t.out + t.err));
    QVERIFY(t.out.contains("finished after 120 epoch(s)"));
    QVERIFY(t.out.contains("epoch 120"));
    const Run c = cli({ "chat", "--run", m_run, "--once", "do you sleep", "--checks" });
    QCOMPARE(c.code, 0);
    const QStringList lines = c.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines[0], QString("only when the loss is flat"));
    QVERIFY(lines[1].contains("handoff ok"));
    const Run other = cli({ "chat", "--run", m_run, "--once", "how old are you" });
    QCOMPARE(other.out.trimmed(), QString("a few epochs old"));
    QVERIFY2(!other.err.contains("--max-length"), qPrintable(other.err));
    // A --max-length past what the model was built for is capped, and that is said.
    const Run longer = cli({ "chat", "--run", m_run, "--once", "how old are you", "--max-length", "100" });
    QCOMPARE(longer.out.trimmed(), QString("a few epochs old"));
    QVERIFY2(longer.err.contains("note: --max-length 100 is more than this model's replies can be: they stop at 73 "
                                 "tokens (model.max_target_length 74 in config.json)"),
        qPrintable(longer.err));
    QVERIFY(!cli({ "chat", "--run", m_run, "--once", "hi", "--max-length", "73" }).err.contains("--max-length"));
    const Run beam = cli({ "chat", "--run", m_run, "--once", "good morning", "--method", "beam", "--beam", "3" });
    QCOMPARE(beam.out.trimmed(), QString("morning to you too"));
}

void TestCli::chatJsonTrace()
{
    const Run r = cli({ "chat", "--run", m_run, "--once", "what is the weather like", "--json" });
    QCOMPARE(r.code, 0);
    const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
    QCOMPARE(j["reply"].toString(), QString("sunny with a chance of gradients"));
    const QJsonObject checks = j["trace"].toObject()["checks"].toObject();
    QVERIFY(checks["handoff_equal"].toBool());
    QVERIFY(checks["state_carried"].toBool());
    QVERIFY(checks["teacher_forced_equal"].toBool());
    QCOMPARE(j["trace"].toObject()["encoder_final"].toArray()[0].toObject()["h"].toArray().size(), 200);
    const Run broken
        = cli({ "chat", "--run", m_run, "--once", "what is the weather like", "--json", "--handoff", "zero-init" });
    const QJsonObject bc
        = QJsonDocument::fromJson(broken.out.toUtf8()).object()["trace"].toObject()["checks"].toObject();
    QVERIFY(!bc["handoff_equal"].toBool());
    QVERIFY(!bc["teacher_forced_equal"].toBool());
}

void TestCli::chatExplain()
{
    // A reply explained: occlusion, the nearest training prompt (memorised), the beam tree and a
    // what-if branch, as JSON and as text.
    const Run r = cli({ "chat", "--run", m_run, "--once", "how old are you", "--explain", "--json", "--method", "beam",
        "--beam", "2", "--force", "1:morning", "--neighbours", "2", "--compare", "do you sleep" });
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY(r.err.contains("indexed 5 training prompts"));
    const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
    QCOMPARE(j["reply"]["reply"].toString(), QString("a few epochs old"));
    QCOMPARE(j["occlusion"].toArray().size(), qsizetype(4));
    QCOMPARE(j["neighbours"]["nearest"][0]["prompt"].toString(), QString("how old are you"));
    QVERIFY(j["neighbours"]["memorised"].toBool());
    QVERIFY(j["reply"]["beam_tree"].toArray().size() > 3);
    const QJsonObject branch = j["branches"][0].toObject();
    QCOMPARE(branch["step"].toInt(), 1);
    QVERIFY(branch["reply"]["reply"].toString().startsWith("a morning"));
    QVERIFY(branch["reply"]["trace"]["checks"]["teacher_forced_equal"].toBool());
    QVERIFY(j["comparison"]["replies_differ"].toBool());
    QVERIFY(!j["comparison"]["zero_init_replies_differ"].toBool());

    const Run text = cli({ "chat", "--run", m_run, "--once", "do you sleep", "--explain", "--metric", "l2" });
    QCOMPARE(text.code, 0);
    QVERIFY(text.out.startsWith("only when the loss is flat\n"));
    QVERIFY(text.out.contains("which words moved the state"));
    QVERIFY(text.out.contains("nearest training prompts (l2, of 5)"));
    QVERIFY(text.out.contains("memorised"));

    // Bad what-if requests name what is wrong.
    const Run word = cli({ "chat", "--run", m_run, "--once", "do you sleep", "--force", "0:zzyzx" });
    QVERIFY(word.code != 0);
    QVERIFY2(word.err.contains("zzyzx") && word.err.contains("vocabulary"), qPrintable(word.err));
    const Run step = cli({ "chat", "--run", m_run, "--once", "do you sleep", "--force", "99:flat" });
    QVERIFY(step.code != 0);
    QVERIFY2(step.err.contains("step 99"), qPrintable(step.err));
    const Run spec = cli({ "chat", "--run", m_run, "--once", "do you sleep", "--force", "x:flat" });
    QVERIFY(spec.code != 0);
    QVERIFY2(spec.err.contains("STEP:WORD"), qPrintable(spec.err));
    // Interactive: a question the options cannot explain is an error for that question only.
    const Run session = cli({ "chat", "--run", m_run, "--force", "5:flat" }, "good morning\ndo you sleep\n");
    QCOMPARE(session.code, 1);
    QVERIFY2(session.err.contains("step 5"), qPrintable(session.err));
    QVERIFY2(session.out.contains("what if step 5 were \"flat\""), qPrintable(session.out));
}

void TestCli::interactiveChat()
{
    // A blank line piped in is skipped as an empty one is (it was answered, while --once refused it).
    const Run r = cli({ "chat", "--run", m_run }, "good morning\n\n  \t \nsee you later\n");
    QCOMPARE(r.code, 0);
    QCOMPARE(r.out.split('\n', Qt::SkipEmptyParts), (QStringList { "morning to you too", "bye for now" }));
    const Run unk = cli({ "chat", "--run", m_run, "--once", "good morning zzyzx" });
    QVERIFY(unk.out.contains("unknown words: zzyzx"));
    QVERIFY(!unk.out.contains("knows no word"));
    // Found by an outside pass: a message of punctuation alone was answered without a word on
    // what the model read (nothing).
    const Run none = cli({ "chat", "--run", m_run, "--once", "???" });
    QCOMPARE(none.code, 0);
    QVERIFY2(none.out.contains("(the model knows no word of this message: its encoder reads only <unk>)"),
        qPrintable(none.out));
    const Run unknown = cli({ "chat", "--run", m_run, "--once", "zzyzx qwxv" });
    QVERIFY2(unknown.out.contains("unknown words: zzyzx, qwxv") && unknown.out.contains("knows no word"),
        qPrintable(unknown.out));
}

// Found by an outside pass: a YAML file whose aliases expand to 1.2 GB, loaded with the corpus cap
// raised as the cap's own error suggests, under a 3 GB address-space limit, ended in a bare
// "error: std::bad_alloc" that named no file.
void TestCli::corpusOutOfMemoryNamesTheFile()
{
#ifdef __SANITIZE_ADDRESS__
    QSKIP("an address-space limit and AddressSanitizer's shadow memory do not mix");
#else
    QByteArray yaml = "conversations:\n- - &a \"" + QByteArray(60000, 'x') + "\"\n";
    for (int i = 0; i < 20000; ++i)
        yaml += "  - *a\n";
    const QString file = QString::fromStdString(testutil::writeFile(m_dir, "aliases/expands.yml", yaml));
    const Run r = shell("ulimit -v 3000000 && exec \"$0\" corpus validate \"$1\" --max-corpus-mb 100000", { file });
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains(file + ": out of memory while loading the corpus (it may take up to 100000 MiB")
            && !r.err.contains("bad_alloc"),
        qPrintable(r.err));
#endif
}

// Found by an outside pass: `train | head -3` ended training at the next epoch's line by SIGPIPE
// (status 141), without a word on standard error. It stops now as a closed terminal stops it: with
// a checkpoint, the way to continue, and the lost output said.
// Under a file-size limit (ulimit -f) every writer died by SIGXFSZ (status 153) without a word,
// leaving its temporary file; the write now fails, and the error names the file and the limit.
void TestCli::fileSizeLimitIsAnErrorNotASignal()
{
    const QString run = m_dir.filePath("fsize");
    const Run first = cli({ "train", "--preset", "quick", "--epochs", "1", "--corpus", m_corpus, "--run", run });
    QVERIFY2(first.code == 0, qPrintable(first.err));
    qint64 checkpoint = 0;
    for (const QFileInfo& f : QDir(run).entryInfoList({ "ckpt-*.pt" }, QDir::Files))
        checkpoint = std::max(checkpoint, f.size());
    QVERIFY(checkpoint > 8192);
    const QByteArray state = testutil::readFile(run + "/state.json");
    const Run over = shell(
        QString("ulimit -f %1; exec \"$0\" train --resume --run \"$1\" --epochs 3").arg(checkpoint / 2048), { run });
    QCOMPARE(over.code, 1);
    QVERIFY2(over.err.contains("ckpt-") && over.err.contains("write failed (File too large)")
            && over.err.contains("the file-size limit, ulimit -f") && over.err.contains("raise the limit"),
        qPrintable(over.err));
    QVERIFY(QDir(run).entryList({ ".*tmp-*" }, QDir::Hidden | QDir::Files).isEmpty());
    QCOMPARE(testutil::readFile(run + "/state.json"), state); // the last good checkpoint stays the run's
    const Run chat = cli({ "chat", "--run", run, "--once", "good morning" });
    QVERIFY2(chat.code == 0, qPrintable(chat.err));
    // A new run whose first files are over the limit: an error, and no half run left.
    const QString fresh = m_dir.filePath("fsize-new");
    const Run start = shell(
        "ulimit -f 1; exec \"$0\" train --preset quick --epochs 1 --corpus \"$1\" --run \"$2\"", { m_corpus, fresh });
    QCOMPARE(start.code, 1);
    QVERIFY2(start.err.contains("write failed (File too large)"), qPrintable(start.err));
    QVERIFY(!QFileInfo::exists(fresh));
}

// `ulimit -s` sets the hard limit too, so the program cannot raise it: MKL's products overflowed
// 256 KiB in a worker thread (SIGSEGV inside sgemm) and the YAML parser 128 KiB at 400 levels.
void TestCli::smallStackLimitIsNoLimit()
{
    const QString run = m_dir.filePath("small-stack");
    const Run train = shell("ulimit -s 256; exec \"$0\" train --epochs 1 --threads 2 --corpus \"$1\" --run \"$2\"",
        { CHATBENCH_DATASETS_DIR "/chatbench", run });
    QVERIFY2(train.code == 0, qPrintable(train.err));
    const Run chat = shell("ulimit -s 64; exec \"$0\" chat --run \"$1\" --once \"good morning\"", { run });
    QVERIFY2(chat.code == 0 && !chat.out.trimmed().isEmpty(), qPrintable(chat.err));
    QByteArray nested = "conversations:\n- - ";
    nested += QByteArray(400, '[') + QByteArray(400, ']') + "\n  - hello\n";
    const QString deep = QString::fromStdString(testutil::writeFile(m_dir, "deep.yml", nested));
    const Run stats = shell("ulimit -s 128; exec \"$0\" corpus stats \"$1\"", { deep });
    QCOMPARE(stats.code, 1);
    QVERIFY2(stats.err.contains("deep.yml:2: a turn must be text, not a list or a map"), qPrintable(stats.err));
}

void TestCli::brokenPipeStopsTrainingWithACheckpoint()
{
    const QString run = m_dir.filePath("piped");
    const Run r = shell("\"$0\" train --preset quick --epochs 1000 --corpus \"$1\" --run \"$2\" | head -2 >/dev/null;"
                        " echo \"status ${PIPESTATUS[0]}\"",
        { m_corpus, run });
    QVERIFY2(r.out.trimmed() == "status 130", qPrintable(r.out + r.err));
    QVERIFY2(r.err.contains(
                 "standard output could not be written (its reader ended, or its disk is full: the reason is below): "
                 "training stopped")
            && r.err.contains("continue with: chatbench-cli train --resume --run")
            && r.err.contains("error: the output could not be written to standard output (Broken pipe)"),
        qPrintable(r.err));
    const QJsonObject state = QJsonDocument::fromJson(testutil::readFile(run + "/state.json")).object();
    QVERIFY2(state["step"].toInteger() > 0 && state["epoch"].toInteger() < 1000, qPrintable(r.err));
    const Run chat = cli({ "chat", "--run", run, "--once", "good morning" });
    QVERIFY2(chat.code == 0, qPrintable(chat.err));
    // Chat stops at the first reply it cannot write, and says so.
    const Run piped = shell("yes 'good morning' | head -2000 | \"$0\" chat --run \"$1\" | head -1 >/dev/null;"
                            " echo \"status ${PIPESTATUS[2]}\"",
        { run });
    QVERIFY2(piped.out.trimmed() == "status 1"
            && piped.err.contains("error: the output could not be written to standard output (Broken pipe)"),
        qPrintable(piped.out + piped.err));
}

// The live progress line redraws itself with "\r" and ESC[K on a terminal; where TERM says the
// terminal cannot (dumb: an editor's shell, a CI log recorded through a terminal), the escapes
// would be shown as text, so only the epoch lines are written. `script` gives the CLI a terminal.
// A folder a new run cannot take is refused before the start is announced.
void TestCli::progressLinesOnlyWhereTheTerminalRedraws()
{
    for (const char* term : { "xterm", "dumb", "" }) {
        const QString run = m_dir.filePath(QString("tty-") + (*term ? term : "unset"));
        const Run r = shell(QString("TERM='%1' script -qec \"'$0' train --preset quick --epochs 2 --corpus '$1' --run "
                                    "'$2'\" /dev/null")
                                .arg(term),
            { m_corpus, run });
        QVERIFY2(r.code == 0 && r.out.contains("epoch   2  train loss"), qPrintable(r.out + r.err));
        QVERIFY2(r.out.contains("\033[K") == (std::string_view(term) == "xterm"), qPrintable(term + (": " + r.out)));
    }
    const Run taken = cli({ "train", "--preset", "quick", "--corpus", m_corpus, "--run", m_dir.filePath("tty-xterm") });
    QVERIFY2(taken.code == 1 && taken.out.isEmpty()
            && taken.err.contains("this folder already holds a run: resume it or choose another folder"),
        qPrintable(taken.out + taken.err));
    // A path that cannot become a folder: said before the corpus is read (an outside pass found
    // them said after the start was announced).
    const QString file = QString::fromStdString(testutil::writeFile(m_dir, "not-a-folder", "x"));
    QCOMPARE(::symlink(qPrintable(m_dir.filePath("nowhere")), qPrintable(m_dir.filePath("dangling-run"))), 0);
    for (const auto& [run, why] : { std::pair { file, QString("is a file, not a folder") },
             std::pair { file + "/sub", QString("is a file, not a folder") },
             std::pair { m_dir.filePath("dangling-run"), QString("which does not exist: make that folder") } }) {
        const Run r
            = cli({ "train", "--preset", "quick", "--corpus", m_dir.filePath("no-such-corpus.yml"), "--run", run });
        QVERIFY2(r.code == 1 && r.out.isEmpty() && r.err.contains(why), qPrintable(r.out + r.err));
    }
}

// Found by an outside pass: a corpus file and run folders named with an escape sequence and a
// right-to-left override reached the terminal as they were in `corpus stats`' header, import-keras'
// "diagnosis prompts … from" and "imported into" lines and its "chat with it" hint (whose $'…'
// escaped control bytes but not the override).
void TestCli::namesThatActOnTheTerminalAreEscaped()
{
    const QString odd = QString::fromUtf8("c\x1B[31mred\u202Eevil");
    const QString corpus = QString::fromStdString(testutil::writeFile(m_dir, odd + ".yml", kYaml));
    const Run stats = cli({ "corpus", "stats", corpus });
    QCOMPARE(stats.code, 0);
    QVERIFY2(stats.out.contains("c\\x1B[31mred\\xE2\\x80\\xAEevil.yml") && !stats.out.contains(QChar(0x1B))
            && !stats.out.contains(QChar(0x202E)),
        qPrintable(stats.out));
    const QString fixtures = CHATBENCH_SOURCE_DIR "/tests/fixtures/keras/";
    const QString out = m_dir.filePath(odd + "-run");
    const Run r = cli({ "import-keras", fixtures + "stacked.keras", "--tokenizer", fixtures + "stacked_tokenizer.json",
        "--out", out, "--prompts", "2", "--corpus", corpus });
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY2(!r.out.contains(QChar(0x1B)) && !r.out.contains(QChar(0x202E)), qPrintable(r.out));
    QVERIFY2(r.out.contains("from " + m_dir.path() + "/c\\x1B[31mred\\xE2\\x80\\xAEevil.yml\n")
            && r.out.contains("imported into " + m_dir.path() + "/c\\x1B[31mred\\xE2\\x80\\xAEevil-run: ")
            && r.out.contains("--run $'" + m_dir.path() + "/c\\x1b[31mred\\xe2\\x80\\xaeevil-run'\n"),
        qPrintable(r.out));
    // The hint pastes back to the folder: bash reads the $'…' word as the name.
    const Run pasted = shell("eval \"set -- $1\"; [ -d \"$1\" ] && echo found",
        { "$'" + m_dir.path() + "/c\\x1b[31mred\\xe2\\x80\\xaeevil-run'" });
    QCOMPARE(pasted.out, QString("found\n"));
}

// Found by an outside pass: without --corpus, $CHATBENCH_CORPUS or a datasets/chatbench in the
// working folder is read before the bundled corpus, and an error loading it did not say why that
// path was read (--help said "the bundled corpus").
void TestCli::defaultCorpusSaysWhereItCameFrom()
{
    const Run env
        = shell("CHATBENCH_CORPUS=/nonexistent/corpus.yml \"$0\" train --preset quick --epochs 1 --run \"$1\"",
            { m_dir.filePath("env-run") });
    QCOMPARE(env.code, 1);
    QVERIFY2(env.err.contains("/nonexistent/corpus.yml")
            && env.err.contains("(the default corpus, $CHATBENCH_CORPUS; --corpus names another)"),
        qPrintable(env.err));
    const QString work = m_dir.filePath("elsewhere");
    testutil::writeFile(m_dir, "elsewhere/datasets/chatbench/notes.txt", "not a corpus\n");
    const Run cwd
        = shell("cd \"$1\" && \"$0\" bench --preset quick --batch 2 --repeats 1 --no-epoch --out ''", { work });
    QCOMPARE(cwd.code, 1);
    QVERIFY2(cwd.err.contains("(the default corpus, datasets/chatbench in the working folder; --corpus names another)"),
        qPrintable(cwd.err));
    QVERIFY(!QDir(m_dir.filePath("env-run")).exists());
    const Run help = cli({ "train", "--help" });
    QVERIFY2(help.out.contains("$CHATBENCH_CORPUS"), qPrintable(help.out));
}

// Found by an outside pass: with threads the system will not start (OMP_STACKSIZE=64G here; a
// process limit does the same) the first parallel region ended the process with libgomp's
// "Thread creation failed", and a new run's folder was left holding only its lock file.
void TestCli::threadsTheSystemRefusesAreSaid()
{
    if (QThread::idealThreadCount() < 2)
        QSKIP("one core: the default is one thread, and none is started");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, size_t(64) << 30);
    pthread_t t;
    const int refused = pthread_create(
        &t, &attr, [](void*) -> void* { return nullptr; }, nullptr);
    pthread_attr_destroy(&attr);
    if (refused == 0) {
        pthread_join(t, nullptr);
        QSKIP("this system starts threads with 64 GB stacks");
    }
    const QString run = m_dir.filePath("no-threads");
    const QString expected = "the system would not start 1 worker thread(s) for 2 CPU threads";
    const Run train = shell("OMP_STACKSIZE=64G exec \"$0\" train --preset quick --epochs 1 --threads 2 --corpus \"$1\" "
                            "--run \"$2\"",
        { m_corpus, run });
    QCOMPARE(train.code, 1);
    QVERIFY2(train.err.contains(expected) && train.err.contains("OMP_STACKSIZE=64G asks that much stack for each")
            && train.err.contains("run with OMP_NUM_THREADS=1") && !train.err.contains("libgomp"),
        qPrintable(train.err));
    QVERIFY(!QDir(run).exists()); // the start took back its folder
    const Run chat = shell("OMP_STACKSIZE=64G OMP_NUM_THREADS=2 exec \"$0\" chat --run \"$1\" --once hi", { m_run });
    QVERIFY2(chat.code == 1 && chat.err.contains(expected) && !chat.err.contains("libgomp"), qPrintable(chat.err));
    // One thread starts none: the same settings train.
    const Run one = shell("OMP_STACKSIZE=64G exec \"$0\" train --preset quick --epochs 1 --threads 1 --corpus \"$1\" "
                          "--run \"$2\" --quiet",
        { m_corpus, run });
    QVERIFY2(one.code == 0, qPrintable(one.err));
}

void TestCli::badArguments()
{
    // Whole numbers are decimal: CLI11 read "010" as 8 and "0x10" as 16 (found by an outside pass).
    for (const char* odd : { "0x10", "1e2", "12abc" }) {
        const Run r = cli({ "train", "--corpus", m_corpus, "--run", m_dir.filePath("octal"), "--hidden", odd });
        QVERIFY(r.code != 0);
        QVERIFY2(r.err.contains("is not a whole number in decimal digits"), qPrintable(r.err));
    }
    const QString octal = m_dir.filePath("octal");
    QCOMPARE(cli({ "train", "--preset", "quick", "--corpus", m_corpus, "--run", octal, "--epochs", "01", "--hidden",
                     "010", "--quiet" })
                 .code,
        0);
    QCOMPARE(QJsonDocument::fromJson(testutil::readFile(octal + "/config.json"))
                 .object()["model"]
                 .toObject()["hidden"]
                 .toInt(),
        10);
    QVERIFY(cli({ "train", "--epochs", "0" }).code != 0);
    // Contradicting flags are refused (the last one used to win silently), and a corpus of
    // punctuation only is pointed at the tokenizer that has words for it (found by an outside pass).
    const Run both
        = cli({ "train", "--corpus", m_corpus, "--run", m_dir.filePath("both"), "--attention", "--no-attention" });
    QVERIFY(both.code != 0);
    QVERIFY2(both.err.contains("excludes"), qPrintable(both.err));
    const QString marks = QString::fromStdString(testutil::writeFile(m_dir, "marks.tsv", "!!!\t???\n...\t,,,\n"));
    const Run punct = cli({ "train", "--preset", "quick", "--corpus", marks, "--run", m_dir.filePath("marks-run") });
    QCOMPARE(punct.code, 1);
    QVERIFY2(punct.err.contains("--tokenizer punct") && !punct.err.contains("lower it"), qPrintable(punct.err));
    QVERIFY(cli({ "train", "--preset", "huge" }).code != 0);
    QVERIFY(cli({ "chat", "--method", "psychic" }).code != 0);
    // An empty --once (an unset shell variable) is refused, not answered as if it were a word.
    for (const QString& empty : { QString(), QString(" \t "), QString(QChar(0xFEFF)) }) {
        const Run r = cli({ "chat", "--run", m_dir.filePath("no-run"), "--once", empty });
        QVERIFY(r.code != 0);
        QVERIFY2(r.err.contains("--once: the message is empty") && r.out.isEmpty(), qPrintable(r.err));
        const Run compare = cli({ "chat", "--run", m_dir.filePath("no-run"), "--once", "hi", "--compare", empty });
        QVERIFY2(compare.code != 0 && compare.err.contains("--compare: the message is empty"), qPrintable(compare.err));
    }
    // Help that cannot be written is an error, not status 0.
    for (const QString flag : { "--help", "--version" }) {
        const Run full = shell("\"$0\" \"$1\" > /dev/full", { flag });
        QVERIFY2(
            full.code == 1 && full.err.contains("could not be written to standard output (No space left on device)"),
            qPrintable(flag + ": " + full.err));
    }
    const Run dev = cli({ "train", "--corpus", m_corpus, "--run", m_dir.filePath("dev"), "--device", "tpu" });
    QCOMPARE(dev.code, 1);
    QVERIFY(dev.err.contains("device"));
    // Refused before the first checkpoint: the folder it made is not left behind holding only
    // its lock (found by an outside pass, with cuda:-1).
    for (const QString device : { "cuda:-1", "cuda:abc" }) {
        const Run d = cli({ "train", "--corpus", m_corpus, "--run", m_dir.filePath("dev-left"), "--device", device });
        QCOMPARE(d.code, 1);
        QVERIFY2(d.err.contains("device must be 'cpu', 'cuda' or 'cuda:N' (N a device number), not '" + device + "'"),
            qPrintable(d.err));
        QVERIFY(!QFileInfo::exists(m_dir.filePath("dev-left")));
    }
    const Run again = cli({ "train", "--corpus", m_corpus, "--run", m_run });
    QCOMPARE(again.code, 1);
    QVERIFY(again.err.contains("already holds a run"));
    const Run noRun = cli({ "chat", "--run", m_dir.filePath("missing"), "--once", "hi" });
    QCOMPARE(noRun.code, 1);
    QVERIFY2(noRun.err.contains(m_dir.filePath("missing") + ": no such run folder"), qPrintable(noRun.err));
    QVERIFY(QDir().mkpath(m_dir.filePath("not-a-run")));
    const Run notRun = cli({ "chat", "--run", m_dir.filePath("not-a-run"), "--once", "hi" });
    QCOMPARE(notRun.code, 1);
    QVERIFY2(notRun.err.contains("not a chatbench run folder (no config.json)"), qPrintable(notRun.err));
    // NaN and out-of-range numbers are refused, not silently replaced.
    for (const QStringList& bad :
        { QStringList { "chat", "--run", m_run, "--once", "hi", "--method", "sample", "--temperature", "nan" },
            QStringList { "chat", "--run", m_run, "--once", "hi", "--method", "sample", "--seed", "-1" },
            QStringList { "train", "--corpus", m_corpus, "--run", m_dir.filePath("nan"), "--lr", "nan" },
            QStringList { "train", "--corpus", m_corpus, "--run", m_dir.filePath("nan"), "--dropout", "inf" },
            QStringList { "train", "--corpus", m_corpus, "--run", m_dir.filePath("nan"), "--seed", "-1" } }) {
        const Run r = cli(bad);
        QVERIFY2(r.code != 0, qPrintable(bad.join(' ')));
    }
    QVERIFY(!QDir(m_dir.filePath("nan")).exists());
    // Invalid UTF-8 typed into a chat asked for JSON: replaced in the JSON, not an exception.
    const Run bytes = cli({ "chat", "--run", m_run, "--json" }, QByteArray("caf\xC3 \xFF good morning\n"));
    QVERIFY2(bytes.code == 0, qPrintable(bytes.err));
    QVERIFY(QJsonDocument::fromJson(bytes.out.split('\n').first().toUtf8()).isObject() || bytes.out.contains("reply"));
    // A FIFO named as a corpus is refused at once (it used to block forever).
    const QString fifo = m_dir.filePath("pipe.tsv");
    QCOMPARE(::mkfifo(fifo.toLocal8Bit().constData(), 0600), 0);
    const Run pipe = cli({ "corpus", "validate", fifo }, {}, 30000);
    QCOMPARE(pipe.code, 1);
    QVERIFY(pipe.err.contains("not a regular file"));
    // A misspelt command is named; a seed past 2^64 - 1 is refused, not clamped; an empty run
    // path is a clear error.
    const Run typo = cli({ "trian" });
    QCOMPARE(typo.code, 109);
    QVERIFY2(typo.err.contains("unknown command 'trian'") && typo.err.contains("train"), qPrintable(typo.err));
    QVERIFY(cli({ "chat", "--run", m_run, "--once", "hi", "--method", "sample", "--seed", "18446744073709551616" }).code
        != 0);
    // An option the chosen method does not read is refused, not ignored (--temperature 5 gave
    // the greedy reply).
    for (const auto& [args, why] : std::vector<std::pair<QStringList, QString>> {
             { { "--temperature", "5" }, "--temperature applies to --method sample, not --method greedy" },
             { { "--seed", "3" }, "--seed applies to --method sample" },
             { { "--method", "beam", "--top-k", "3" }, "--top-k applies to --method sample, not --method beam" },
             { { "--method", "sample", "--beam", "4" }, "--beam applies to --method beam, not --method sample" },
             { { "--metric", "l2" }, "--metric applies to --explain" },
             { { "--neighbours", "3" }, "--neighbours applies to --explain" } }) {
        const Run r = cli(QStringList { "chat", "--run", m_run, "--once", "hi" } + args);
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains(why), qPrintable(r.err));
    }
    QCOMPARE(cli({ "chat", "--run", m_run, "--once", "hi", "--method", "sample", "--temperature", "0.5", "--seed", "3",
                     "--top-k", "2" })
                 .code,
        0);
    const Run emptyRun = cli({ "train", "--preset", "quick", "--corpus", m_corpus, "--run", "" });
    QCOMPARE(emptyRun.code, 1);
    QVERIFY2(emptyRun.err.contains("no run folder given"), qPrintable(emptyRun.err));
    // Found by an outside pass. A decimal option took hex ("--clip 0x10" was 16) where whole
    // numbers are decimal only.
    for (const char* hex : { "0x10", "0x1p-3" }) {
        const Run r = cli({ "train", "--corpus", m_corpus, "--run", m_dir.filePath("hex"), "--clip", hex });
        QVERIFY(r.code != 0);
        QVERIFY2(r.err.contains("is not a decimal number"), qPrintable(r.err));
    }
    // /dev/stdout into a pipe (this test's) was "…/proc/self/fd/pipe:[N]: cannot write file", and
    // into a file (`>> file`) replaced the file. Standard output (or "-") gets the pairs, whatever
    // it is, with the summary on standard error; standard error is refused (pipes and devices
    // other than standard output stay refused: outputsGoThroughLinksAndNeverIntoPipes).
    for (const char* out : { "/dev/stdout", "-" }) {
        const Run toPipe = cli({ "corpus", "export", m_corpus, "--out", out });
        QVERIFY2(toPipe.code == 0, qPrintable(toPipe.err));
        QVERIFY2(
            toPipe.out.startsWith("# prompt<TAB>response\n") && toPipe.out.count('\n') == 6, qPrintable(toPipe.out));
        QVERIFY2(toPipe.err.contains("wrote 5 pairs (consecutive pairing) to standard output"), qPrintable(toPipe.err));
    }
    const Run toStderr = cli({ "corpus", "export", m_corpus, "--out", "/dev/stderr" });
    QCOMPARE(toStderr.code, 1);
    QVERIFY2(toStderr.err.contains("/dev/stderr: is this command's standard error, where its messages go: give a file"),
        qPrintable(toStderr.err));
    const QString appended = QString::fromStdString(testutil::writeFile(m_dir, "appended.tsv", "# kept\n"));
    const Run append = shell("\"$0\" corpus export \"$1\" --out /dev/stdout >> \"$2\"", { m_corpus, appended });
    QVERIFY2(append.code == 0, qPrintable(append.err));
    const QByteArray written = testutil::readFile(appended);
    QVERIFY2(written.startsWith("# kept\n# prompt<TAB>response\n") && written.count('\n') == 7, written.constData());
    const Run report = shell("\"$0\" bench --preset quick --out /dev/stdout >> \"$1\"", { appended });
    QCOMPARE(report.code, 1);
    QVERIFY2(report.err.contains("/dev/stdout: is this command's standard output: --json prints the report there"),
        qPrintable(report.err));
    QCOMPARE(testutil::readFile(appended), written);
    // Found by a review: standard output appended to the input itself (or into its folder), and
    // /dev/stderr onto the log it appends to, got no checks.
    const Run intoInput = shell("\"$0\" corpus export \"$1\" --out - >> \"$1\"", { appended });
    QCOMPARE(intoInput.code, 1);
    QVERIFY2(intoInput.err.contains("standard output (" + QFileInfo(appended).canonicalFilePath()
                 + "): would overwrite the input " + appended),
        qPrintable(intoInput.err));
    QCOMPARE(testutil::readFile(appended), written);
    const Run toLog = shell("\"$0\" corpus export \"$1\" --out /dev/stderr 2>> \"$2\"", { m_corpus, appended });
    QCOMPARE(toLog.code, 1);
    QVERIFY2(testutil::readFile(appended).contains(
                 "/dev/stderr: is this command's standard error, where its messages go: give a file"),
        testutil::readFile(appended).constData());
    QVERIFY(testutil::readFile(appended).startsWith(written));
    const Run stdoutClosed = shell("\"$0\" corpus export \"$1\" --out - >&-", { m_corpus });
    QCOMPARE(stdoutClosed.code, 1);
    QVERIFY2(stdoutClosed.err.trimmed() == "error: the output could not be written to standard output (it was closed)",
        qPrintable(stdoutClosed.err));
    // A run folder named by a link to nowhere was "cannot create run folder: File exists".
    const QString dangling = m_dir.filePath("dangling");
    QCOMPARE(::symlink("nowhere/x", dangling.toLocal8Bit().constData()), 0);
    const Run link = cli({ "train", "--corpus", m_corpus, "--run", dangling });
    QCOMPARE(link.code, 1);
    QVERIFY2(link.err.contains("is a link to nowhere/x, which does not exist"), qPrintable(link.err));
    // A run folder where a file is (or a file on the way to it) was "cannot create the run
    // folder: Not a directory".
    const QString aFile = m_dir.filePath("a-file");
    testutil::writeFile(m_dir, "a-file", "x");
    for (const QString& run : { aFile, aFile + "/sub" }) {
        const Run onFile = cli({ "train", "--corpus", m_corpus, "--run", run });
        QCOMPARE(onFile.code, 1);
        QVERIFY2(
            onFile.err.contains(aFile + " is a file, not a folder; give another run folder"), qPrintable(onFile.err));
    }
    // Early stopping with no validation pairs to watch said nothing and did nothing.
    const Run noVal = cli({ "train", "--corpus", m_corpus, "--run", m_dir.filePath("noval"), "--preset", "quick",
        "--epochs", "1", "--embed", "8", "--hidden", "8", "--val-fraction", "0", "--patience", "1" });
    QVERIFY2(noVal.code == 0, qPrintable(noVal.err));
    QVERIFY2(
        noVal.out.contains("patience 1 is off") && noVal.out.contains("no validation pairs"), qPrintable(noVal.out));
    // A training or import killed before its first checkpoint leaves config.json alone (and maybe
    // vocab.json): chat said "vocab.json: cannot open file".
    QVERIFY(QDir().mkpath(m_dir.filePath("stopped-early")));
    QVERIFY(QFile::copy(m_run + "/config.json", m_dir.filePath("stopped-early/config.json")));
    const Run early = cli({ "chat", "--run", m_dir.filePath("stopped-early"), "--once", "hello" });
    QCOMPARE(early.code, 1);
    QVERIFY2(early.err.contains("stopped before its first checkpoint"), qPrintable(early.err));
    // Started from a folder that was deleted, every command (even --version) stopped with "Intel
    // oneMKL FATAL ERROR: Cannot load …/libtorch_cpu.so"; a reply written to a full disk, or to a
    // closed standard output, exited 0.
    auto shell = [&](const QString& script) {
        QProcess p;
        p.setWorkingDirectory(m_dir.path());
        p.start("/bin/sh", { "-c", script, "sh", CHATBENCH_CLI, m_run });
        if (!p.waitForFinished(120000))
            qFatal("the shell did not finish");
        return Run { p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()),
            QString::fromUtf8(p.readAllStandardError()) };
    };
    const Run gone = shell("mkdir gone && cd gone && rmdir ../gone && exec \"$1\" --version");
    QCOMPARE(gone.code, 1);
    QVERIFY2(gone.err.contains("the current folder no longer exists"), qPrintable(gone.err));
    const Run full = shell("exec \"$1\" chat --run \"$2\" --once hello > /dev/full");
    QCOMPARE(full.code, 1);
    QVERIFY2(
        full.err.contains("could not be written to standard output (No space left on device)"), qPrintable(full.err));
    // A write that failed before the last flush (stats flushes each line): its reason, kept when
    // it failed (by the end errno held another call's: "No such file or directory").
    const Run earlier = shell("exec \"$1\" corpus stats \"$2/../unseen/chat.yml\" > /dev/full");
    QCOMPARE(earlier.code, 1);
    QVERIFY2(earlier.err.contains("could not be written to standard output (No space left on device)"),
        qPrintable(earlier.err));
    const Run closed = shell("exec \"$1\" chat --run \"$2\" --once hello >&-");
    QCOMPARE(closed.code, 1);
    QVERIFY2(closed.err.contains("could not be written to standard output (it was closed)"), qPrintable(closed.err));
    // No GPU here: asking for one falls back with a note, never a crash.
    const Run gpu = cli({ "chat", "--run", m_run, "--once", "good morning", "--device", "cuda:0" });
    QCOMPARE(gpu.code, 0);
    QVERIFY2(gpu.err.contains("note:") && gpu.err.contains("cpu"), qPrintable(gpu.err));
    QVERIFY(!gpu.out.trimmed().isEmpty());
}

void TestCli::stopAndResume()
{
    const QString run = m_dir.filePath("stopped");
    QProcess p;
    p.start(CHATBENCH_CLI,
        { "train", "--preset", "quick", "--corpus", CHATBENCH_DATASETS_DIR "/chatbench", "--run", run, "--epochs",
            "500" });
    QVERIFY(p.waitForStarted());
    QByteArray out;
    QTRY_VERIFY_WITH_TIMEOUT((out += p.readAllStandardOutput()).contains("epoch   1"), 120000);
    p.terminate(); // SIGTERM, like Ctrl-C
    QVERIFY(p.waitForFinished(30000));
    QCOMPARE(p.exitCode(), 130);
    QVERIFY(QFile::exists(run + "/state.json"));
    // What config.json fixes cannot be changed on resume: refused, not silently ignored.
    const Run changed = cli({ "train", "--resume", "--run", run, "--hidden", "64", "--batch-size", "1" });
    QCOMPARE(changed.code, 1);
    QVERIFY2(changed.err.contains("--batch-size, --hidden cannot change"), qPrintable(changed.err));
    const Run corpusOption = cli({ "train", "--resume", "--run", run, "--max-corpus-mb", "1000" });
    QCOMPARE(corpusOption.code, 1); // it describes --corpus: without one it would be ignored
    QVERIFY2(corpusOption.err.contains("--max-corpus-mb applies to --corpus"), qPrintable(corpusOption.err));
    // The same kind of change made by editing config.json is refused too, by name (a new seed or
    // validation fraction used to give another split and other batches without a word); what a
    // resume may change (here how many checkpoints are kept) is taken.
    const QString config = run + "/config.json";
    const QByteArray original = testutil::readFile(config);
    QJsonObject cfg = QJsonDocument::fromJson(original).object();
    QJsonObject trainCfg = cfg["train"].toObject();
    trainCfg["seed"] = 7;
    trainCfg["validation_fraction"] = 0.25;
    trainCfg["keep_checkpoints"] = 3;
    cfg["train"] = trainCfg;
    testutil::writeFile(m_dir, "stopped/config.json", QJsonDocument(cfg).toJson());
    const Run edited = cli({ "train", "--resume", "--run", run });
    QCOMPARE(edited.code, 1);
    QVERIFY2(edited.err.contains(config + ": differs from the settings this run started with (")
            && edited.err.contains("train.seed was 42, now 7")
            && edited.err.contains("train.validation_fraction was 0.1, now 0.25")
            && !edited.err.contains("keep_checkpoints"),
        qPrintable(edited.err));
    trainCfg["seed"] = 42;
    trainCfg["validation_fraction"] = 0.1;
    cfg["train"] = trainCfg;
    testutil::writeFile(m_dir, "stopped/config.json", QJsonDocument(cfg).toJson());
    // A closed terminal (SIGHUP) stops with a checkpoint too, as Ctrl-C does.
    const auto stepOf = [&] {
        QFile f(run + "/state.json");
        return f.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(f.readAll()).object()["step"].toInt() : -1;
    };
    const int stoppedAt = stepOf();
    QProcess h;
    h.start(CHATBENCH_CLI, { "train", "--resume", "--run", run, "--epochs", "500" });
    QVERIFY(h.waitForStarted());
    QByteArray hout;
    QTRY_VERIFY_WITH_TIMEOUT((hout += h.readAllStandardOutput()).contains("train loss"), 120000); // an epoch's line
    QCOMPARE(::kill(static_cast<pid_t>(h.processId()), SIGHUP), 0);
    QVERIFY(h.waitForFinished(30000));
    QCOMPARE(h.exitStatus(), QProcess::NormalExit);
    QCOMPARE(h.exitCode(), 130);
    QVERIFY(stepOf() > stoppedAt);
    // Where and how long it runs may change on resume (they were refused as options), out-of-range
    // values not; config.json keeps what was given.
    const Run badKeep = cli({ "train", "--resume", "--run", run, "--threads", "-3" });
    QCOMPARE(badKeep.code, 1);
    QVERIFY2(badKeep.err.contains("threads must be 0..1024"), qPrintable(badKeep.err));
    const Run r = cli({ "train", "--resume", "--run", run, "--epochs", "40", "--threads", "1", "--keep-checkpoints",
        "3", "--patience", "60", "--checkpoint-every", "500" });
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY(r.out.contains("finished after 40 epoch(s)"));
    // Another thread count is announced (from 0, the process' default, only where that differs).
    const Run more2 = cli({ "train", "--resume", "--run", run, "--epochs", "41", "--threads", "2" });
    QVERIFY2(more2.code == 0, qPrintable(more2.out + more2.err));
    QVERIFY2(more2.out.contains("note: threads 1 -> 2: sums are rounded in another order"), qPrintable(more2.out));
    const QJsonObject after = QJsonDocument::fromJson(testutil::readFile(config)).object();
    QCOMPARE(after["device"].toObject()["threads"].toInt(), 2);
    QCOMPARE(after["train"].toObject()["keep_checkpoints"].toInt(), 3);
    QCOMPARE(after["train"].toObject()["patience"].toInt(), 60);
    QCOMPARE(after["train"].toObject()["checkpoint_every_steps"].toInt(), 500);
    QCOMPARE(after["train"].toObject()["epochs"].toInt(), 41);
    QCOMPARE(QDir(run).entryList({ "ckpt-*.pt" }, QDir::Files).size(), 3);
    // Ctrl-\ (SIGQUIT) too, and a soft CPU-time limit (its SIGXCPU repeats every second until the
    // hard limit): both ended training without a checkpoint (statuses 131 and 152).
    {
        const int before = stepOf();
        QProcess q;
        q.start(CHATBENCH_CLI, { "train", "--resume", "--run", run, "--epochs", "500" });
        QVERIFY(q.waitForStarted());
        QByteArray qout;
        QTRY_VERIFY_WITH_TIMEOUT((qout += q.readAllStandardOutput()).contains("train loss"), 120000);
        QCOMPARE(::kill(static_cast<pid_t>(q.processId()), SIGQUIT), 0);
        QVERIFY(q.waitForFinished(30000));
        QCOMPARE(q.exitStatus(), QProcess::NormalExit);
        QCOMPARE(q.exitCode(), 130);
        QVERIFY(stepOf() > before);
    }
    const int beforeLimit = stepOf();
    const Run limited = shell(
        "ulimit -S -t 8; ulimit -H -t 90; exec \"$0\" train --resume --run \"$1\" --epochs 5000 --patience 0", { run });
    QVERIFY2(limited.code == 130, qPrintable(limited.out.right(300) + limited.err));
    // Stopped, wherever in the epoch the signal found it (a step, validation, a save).
    QVERIFY2(limited.out.contains("stopped after "), qPrintable(limited.out.right(300)));
    QVERIFY(stepOf() > beforeLimit);
}

void TestCli::signalWhileWaitingEndsAtOnce()
{
    // Outside training nothing checks the stop flag: a chat waiting for its next line, or a
    // corpus being read, used to ignore the first SIGTERM. It now ends the process.
    QProcess p;
    p.start(CHATBENCH_CLI, { "chat", "--run", m_run });
    QVERIFY(p.waitForStarted());
    QTest::qWait(1500);
    p.terminate();
    QVERIFY2(p.waitForFinished(10000), "SIGTERM ignored");
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 128 + SIGTERM);
}

void TestCli::chatLineEndingsAndControlBytes()
{
    // A line from a CRLF file is the same question; bytes a terminal would act on are shown
    // escaped, not written to it.
    const Run r = cli({ "chat", "--run", m_run }, QByteArray("how old are you\r\nred \x1B[31m alert\n"));
    QCOMPARE(r.code, 0);
    const QStringList lines = r.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines[0], QString("a few epochs old"));
    QVERIFY2(!r.out.contains(QChar(0x1B)) && r.out.contains("\\x1B"), qPrintable(r.out));
    QVERIFY(!r.out.contains('\r'));
    // A Notepad file whose first line is empty (a byte-order mark, then CRLF) asks one question,
    // not a question of no words first.
    const Run bom = cli({ "chat", "--run", m_run }, QByteArray("\xEF\xBB\xBF\r\nhow old are you\r\n"));
    QVERIFY2(bom.code == 0 && bom.out == "a few epochs old\n" && bom.err.isEmpty(), qPrintable(bom.out + bom.err));
    // A run folder named with an escape and a newline (found by an outside pass: "run folder:"
    // printed it raw): shown escaped.
    const QString odd = m_dir.filePath("odd\x1B[31m\nname");
    const Run t = cli({ "train", "--preset", "quick", "--corpus", m_corpus, "--run", odd, "--epochs", "1" });
    QCOMPARE(t.code, 0);
    QVERIFY2(!t.out.contains(QChar(0x1B)) && t.out.contains("odd\\x1B[31m\\x0Aname"), qPrintable(t.out));
    QVERIFY2(!t.err.contains(QChar(0x1B)), qPrintable(t.err));
    // The explanation's words, the compared question and a refused --force word went out raw.
    const Run e
        = cli({ "chat", "--run", m_run, "--once", "how old \x1B[2Jare you", "--compare", "bye\x1B[31mRED\x1B[0m\x07" });
    QCOMPARE(e.code, 0);
    QVERIFY2(!e.out.contains(QChar(0x1B)) && !e.out.contains(QChar(0x07)) && e.out.contains("bye\\x1B[31mRED"),
        qPrintable(e.out));
    const Run f = cli({ "chat", "--run", m_run, "--once", "how old are you", "--force", "0:\x1B[2Jx" });
    QCOMPARE(f.code, 1);
    QVERIFY2(!f.err.contains(QChar(0x1B)) && f.err.contains("\\x1B[2Jx"), qPrintable(f.err));
}

void TestCli::explainRefusesAChangedCorpus()
{
    // The nearest training prompts come from the corpus file: once it changes, they are not what
    // the model learnt from, and chat says so instead of showing them.
    const QString corpus = QString::fromStdString(testutil::writeFile(m_dir, "changing/chat.tsv",
        "good morning\tmorning to you\ndo you sleep\tonly when the loss is flat\nsee you\tbye\n"));
    const QString run = m_dir.filePath("changing-run");
    QVERIFY(
        cli({ "train", "--preset", "quick", "--corpus", corpus, "--run", run, "--epochs", "1", "--val-fraction", "0" })
            .code
        == 0);
    const Run same = cli({ "chat", "--run", run, "--once", "good morning", "--explain" });
    QVERIFY2(same.err.contains("indexed 3 training prompts"), qPrintable(same.err));
    testutil::writeFile(m_dir, "changing/chat.tsv", "totally\tdifferent\nnew\tcontent\n");
    const Run changed = cli({ "chat", "--run", run, "--once", "good morning", "--explain" });
    QCOMPARE(changed.code, 0);
    QVERIFY2(changed.err.contains("has changed since the model trained on it"), qPrintable(changed.err));
    QVERIFY(!changed.out.contains("totally"));
    // The path is kept absolute: resume finds the corpus from any folder.
    QFile cfg(run + "/config.json");
    QVERIFY(cfg.open(QIODevice::ReadOnly));
    QCOMPARE(QJsonDocument::fromJson(cfg.readAll()).object()["corpus"].toObject()["path"].toString(),
        QFileInfo(corpus).absoluteFilePath());
}

void TestCli::corruptRunFilesAndTwoWriters()
{
    // state.json with a negative batch index once crashed resume (SIGSEGV): now an error naming it.
    // A run trained for `epochs`, and its state.json as written.
    auto trained = [&](const QString& name, const char* epochs) {
        const QString dir = m_dir.filePath(name);
        if (cli({ "train", "--preset", "quick", "--corpus", m_corpus, "--run", dir, "--epochs", epochs }).code != 0)
            qFatal("cannot train %s", qPrintable(dir));
        return std::make_pair(dir, testutil::readFile(dir + "/state.json"));
    };
    const auto [run, good] = trained("hurt", "1");
    QJsonObject j = QJsonDocument::fromJson(good).object();
    j["batch_in_epoch"] = -5;
    testutil::writeFile(m_dir, "hurt/state.json", QJsonDocument(j).toJson());
    const Run r = cli({ "train", "--resume", "--run", run, "--epochs", "2" });
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains(run + "/state.json") && r.err.contains("batch_in_epoch"), qPrintable(r.err));
    testutil::writeFile(m_dir, "hurt/state.json", good);
    // A batch index past the epoch's batches silently skipped an epoch ("train loss nan"), and a
    // folder where metrics.csv goes stopped the run only after an epoch's work.
    const auto [two, good2] = trained("hurt-two", "2");
    QJsonObject j2 = QJsonDocument::fromJson(good2).object();
    j2["batch_in_epoch"] = j2["step"].toInt(); // two epochs' worth
    testutil::writeFile(m_dir, "hurt-two/state.json", QJsonDocument(j2).toJson());
    const Run past = cli({ "train", "--resume", "--run", two, "--epochs", "3" });
    QCOMPARE(past.code, 1);
    QVERIFY2(past.err.contains(two + "/state.json") && past.err.contains("'batch_in_epoch' is")
            && past.err.contains("batches"),
        qPrintable(past.err));
    testutil::writeFile(m_dir, "hurt-two/state.json", good2);
    QVERIFY(QFile::remove(two + "/metrics.csv") && QDir(two).mkdir("metrics.csv"));
    const Run folder = cli({ "train", "--resume", "--run", two, "--epochs", "3" });
    QCOMPARE(folder.code, 1);
    QVERIFY2(folder.err.contains(two + "/metrics.csv: is not a regular file") && !folder.out.contains("epoch   3"),
        qPrintable(folder.out + folder.err));
    // A checkpoint overwritten with garbage: an error naming the file.
    const QString ckpt = run + "/" + QJsonDocument::fromJson(good).object()["checkpoint"].toString();
    QFile c(ckpt);
    QVERIFY(c.open(QIODevice::ReadOnly));
    QByteArray bytes = c.readAll();
    c.close();
    testutil::writeFile(m_dir, "hurt/" + QFileInfo(ckpt).fileName(), bytes.left(bytes.size() / 3));
    const Run cut = cli({ "chat", "--run", run, "--once", "hello" });
    QCOMPARE(cut.code, 0); // the older checkpoint kept beside it answers, and that is said
    QVERIFY2(cut.err.contains(ckpt) && cut.err.contains("fell back to ckpt-00000000.pt"), qPrintable(cut.err));
    // The older checkpoint and its state copied in from another run (another vocabulary's
    // fingerprint): not this run's fallback; the newest checkpoint's error stands.
    const QByteArray olderState = testutil::readFile(run + "/ckpt-00000000.json");
    QVERIFY(olderState.contains("\"vocab_fingerprint\": \""));
    QJsonObject foreign = QJsonDocument::fromJson(olderState).object();
    foreign["vocab_fingerprint"] = "0123456789abcdef";
    testutil::writeFile(m_dir, "hurt/ckpt-00000000.json", QJsonDocument(foreign).toJson());
    const Run notOurs = cli({ "chat", "--run", run, "--once", "hello" });
    QCOMPARE(notOurs.code, 1);
    QVERIFY2(notOurs.err.contains(ckpt) && !notOurs.err.contains("fell back"), qPrintable(notOurs.err));
    testutil::writeFile(m_dir, "hurt/ckpt-00000000.json", olderState);
    testutil::writeFile(m_dir, "hurt/ckpt-00000000.pt", "garbage");
    const Run none = cli({ "chat", "--run", run, "--once", "hello" });
    QCOMPARE(none.code, 1);
    QVERIFY2(none.err.contains(ckpt), qPrintable(none.err));
    testutil::writeFile(m_dir, "hurt/" + QFileInfo(ckpt).fileName(), bytes);
    // A state and checkpoints copied in from another run of the same sizes answered through this
    // run's words without a word; vocab.json with two words swapped stands for this run's own.
    const QByteArray vocab = testutil::readFile(run + "/vocab.json");
    QJsonObject v = QJsonDocument::fromJson(vocab).object();
    QJsonArray tokens = v["tokens"].toArray();
    const QJsonValue fourth = tokens[4];
    tokens[4] = tokens[5];
    tokens[5] = fourth;
    v["tokens"] = tokens;
    testutil::writeFile(m_dir, "hurt/vocab.json", QJsonDocument(v).toJson());
    for (const QStringList& args : { QStringList { "chat", "--run", run, "--once", "hello" },
             QStringList { "chat", "--run", run, "--once", "hello", "--weights", "best" },
             QStringList { "train", "--resume", "--run", run, "--epochs", "2" } }) {
        const Run other = cli(args);
        QCOMPARE(other.code, 1);
        QVERIFY2(other.err.contains("was saved with another vocabulary than vocab.json holds"), qPrintable(other.err));
    }
    // With state.json gone, the state read is the newest checkpoint's own, and the error names it.
    const QByteArray state = testutil::readFile(run + "/state.json");
    QVERIFY(QFile::remove(run + "/state.json"));
    const Run withoutState = cli({ "chat", "--run", run, "--once", "hello" });
    QCOMPARE(withoutState.code, 1);
    const QString newestState = ckpt.left(ckpt.size() - 3) + ".json: was saved with another vocabulary";
    QVERIFY2(withoutState.err.contains(newestState), qPrintable(withoutState.err));
    testutil::writeFile(m_dir, "hurt/state.json", state);
    testutil::writeFile(m_dir, "hurt/vocab.json", vocab);
    QCOMPARE(cli({ "chat", "--run", run, "--once", "hello" }).code, 0);

    // Two trains started together on one folder: one trains, the other is refused; the run loads.
    const QString shared = m_dir.filePath("shared");
    QProcess a, b;
    const QStringList args
        = { "train", "--preset", "quick", "--corpus", m_corpus, "--run", shared, "--epochs", "3", "--quiet" };
    a.start(CHATBENCH_CLI, args);
    b.start(CHATBENCH_CLI, args);
    QVERIFY(a.waitForFinished(300000) && b.waitForFinished(300000));
    const QString errs = QString::fromUtf8(a.readAllStandardError() + b.readAllStandardError());
    QCOMPARE(a.exitCode() + b.exitCode(), 1); // exactly one refused
    QVERIFY2(errs.contains("in use by process") || errs.contains("already holds a run"), qPrintable(errs));
    const Run chat = cli({ "chat", "--run", shared, "--once", "good morning" });
    QVERIFY2(chat.code == 0, qPrintable(chat.err));
    // And two resumes of one run: one refused while the other writes.
    QProcess c1, c2;
    const QStringList more = { "train", "--resume", "--run", shared, "--epochs", "150", "--quiet" };
    c1.start(CHATBENCH_CLI, more);
    c2.start(CHATBENCH_CLI, more);
    QVERIFY(c2.waitForFinished(300000) && c1.waitForFinished(300000));
    const QString both = QString::fromUtf8(c1.readAllStandardError() + c2.readAllStandardError());
    QCOMPARE(c1.exitCode() + c2.exitCode(), 1);
    QVERIFY2(both.contains("in use by process"), qPrintable(both));
    // A folder a writer holds while its first files are half made (an import, a start): a second
    // train or import there is told it is in use, not that the folder holds a trained run's files.
    const QString held = m_dir.filePath("held");
    QVERIFY(QDir().mkpath(held));
    testutil::writeFile(m_dir, "held/.lock", "4242\n");
    testutil::writeFile(m_dir, "held/best-00000000.pt", "being written");
    const int holder = ::open(QFile::encodeName(held + "/.lock").constData(), O_RDONLY | O_CLOEXEC);
    QVERIFY(holder >= 0);
    QCOMPARE(::flock(holder, LOCK_EX), 0); // this process holds it, as a writer would
    const QString keras = CHATBENCH_SOURCE_DIR "/tests/fixtures/keras/";
    for (const QStringList& cmd : { QStringList { "train", "--preset", "quick", "--corpus", m_corpus, "--run", held },
             QStringList { "import-keras", keras + "recipe.keras", "--tokenizer", keras + "recipe_tokenizer.json",
                 "--out", held } }) {
        const Run r = cli(cmd);
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains(held + ": in use by process 4242"), qPrintable(r.err));
    }
    // A resume of it too (no config.json yet: not "not a chatbench run folder").
    const Run resumed = cli({ "train", "--resume", "--run", held });
    QCOMPARE(resumed.code, 1);
    QVERIFY2(resumed.err.contains(held + ": in use by process 4242"), qPrintable(resumed.err));
    ::close(holder);
    // Asking whether a folder is in use never waits on what is there: a FIFO as its lock file is
    // refused as before, not opened for reading (which would block until a writer came).
    const QString fifo = m_dir.filePath("fifo-lock");
    QVERIFY(QDir().mkpath(fifo));
    QCOMPARE(::mkfifo(QFile::encodeName(fifo + "/.lock").constData(), 0600), 0);
    const Run onFifo = cli({ "train", "--preset", "quick", "--corpus", m_corpus, "--run", fifo }, {}, 60000);
    QCOMPARE(onFifo.code, 1);
    QVERIFY2(onFifo.err.contains(fifo + "/.lock: is not a regular file"), qPrintable(onFifo.err));
}

// Found trying hostile arguments: `corpus export g.yml --out g.yml` turned the YAML source into
// TSV, and `bench --out RUN/state.json` wrote a report over a run's state, both exiting 0.
void TestCli::outputsNeverOverwriteInputsOrRuns()
{
    const auto read = testutil::readFile;
    const QString source = QString::fromStdString(testutil::writeFile(m_dir, "outs/corpus/chat.yml", kYaml));
    const QString folder = QFileInfo(source).path();
    const QByteArray before = read(source);
    for (const QString& out : { source, folder + "/../corpus/./chat.yml" }) {
        const Run r = cli({ "corpus", "export", source, "--out", out });
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("would overwrite the input"), qPrintable(r.err));
    }
    const Run inFolder = cli({ "corpus", "export", folder, "--out", source });
    QCOMPARE(inFolder.code, 1);
    QVERIFY2(inFolder.err.contains("would overwrite a file of the input folder"), qPrintable(inFolder.err));
    QCOMPARE(read(source), before);
    QCOMPARE(cli({ "corpus", "export", source, "--out", folder + "/pairs.tsv" }).code, 0); // a new file: fine
    // ... unless the folder would read it as one of its own next time (found by an outside pass:
    // TSV in pairs.yml, and the folder then failed to load).
    QVERIFY(QDir(folder).mkpath("deeper"));
    for (const char* name : { "pairs.yml", "deeper/PAIRS.YAML" }) {
        const Run yml = cli({ "corpus", "export", folder, "--out", folder + "/" + name });
        QCOMPARE(yml.code, 1);
        QVERIFY2(yml.err.contains("which reads every .yml and .yaml file in it"), qPrintable(yml.err));
        QVERIFY(!QFile::exists(folder + "/" + name));
    }
    QCOMPARE(cli({ "corpus", "validate", folder, "--strict" }).code, 0);
    // Elsewhere a YAML name is refused too: the file would be TSV that reads as broken YAML.
    const Run yamlElsewhere = cli({ "corpus", "export", source, "--out", m_dir.filePath("outs/pairs.yaml") });
    QCOMPARE(yamlElsewhere.code, 1);
    QVERIFY2(yamlElsewhere.err.contains("is read as a chatterbot YAML corpus"), qPrintable(yamlElsewhere.err));
    QVERIFY(!QFile::exists(m_dir.filePath("outs/pairs.yaml")));

    const QString run = m_dir.filePath("outs/run");
    QCOMPARE(cli({ "train", "--preset", "quick", "--corpus", source, "--run", run, "--epochs", "1" }).code, 0);
    const QByteArray state = read(run + "/state.json");
    const Run bench = cli({ "bench", "--corpus", source, "--preset", "quick", "--batch", "2", "--repeats", "1",
        "--warmup", "0", "--no-epoch", "--out", run + "/state.json" });
    QCOMPARE(bench.code, 1);
    QVERIFY2(bench.err.contains("is in the run folder"), qPrintable(bench.err));
    const Run exported = cli({ "corpus", "export", source, "--out", run + "/pairs.tsv" });
    QCOMPARE(exported.code, 1);
    QVERIFY2(exported.err.contains("is in the run folder"), qPrintable(exported.err));
    QVERIFY(!QFile::exists(run + "/pairs.tsv"));
    QCOMPARE(read(run + "/state.json"), state);
}

void TestCli::aVocabularyOfOneOffWordsIsPointedAtMaxVocab()
{
    // 18 000 pairs of words seen once: the vocabulary is nearly all of the model (found by an
    // outside pass: 180 000 such words trained in 2.3 GB without a word).
    std::string lines;
    for (int i = 0; i < 18000; ++i)
        lines += "p" + std::to_string(i) + "\tr" + std::to_string(i) + "\n";
    const QString corpus
        = QString::fromStdString(testutil::writeFile(m_dir, "oneoff.tsv", QByteArray::fromStdString(lines)));
    const QStringList small = { "--embed", "4", "--hidden", "4", "--epochs", "1", "--batch-size", "500" };
    const Run big = cli(QStringList { "train", "--corpus", corpus, "--run", m_dir.filePath("oneoff") } + small);
    QCOMPARE(big.code, 0);
    QVERIFY2(big.out.contains("the vocabulary of 32404 words holds 100% of the model's")
            && big.out.contains("--max-vocab N keeps the N most frequent"),
        qPrintable(big.out));
    const Run capped = cli(
        QStringList { "train", "--corpus", corpus, "--run", m_dir.filePath("capped"), "--max-vocab", "1000" } + small);
    QCOMPARE(capped.code, 0);
    QVERIFY2(!capped.out.contains("--max-vocab"), qPrintable(capped.out));
}

// Found by an outside pass: a `.lock` link made train write its process id into the link's target
// (any file, as root), and a folder keeping only a run's best weights was trained over.
void TestCli::runFilesAreNeverWrittenThroughLinksNorReplaced()
{
    const auto read = testutil::readFile;
    const QStringList tiny
        = { "--preset", "quick", "--corpus", m_corpus, "--epochs", "1", "--hidden", "8", "--embed", "8" };
    const QString victim = QString::fromStdString(testutil::writeFile(m_dir, "links/victim.txt", "precious\n"));
    QVERIFY(QDir().mkpath(m_dir.filePath("links/run")));
    QVERIFY(QFile::link(victim, m_dir.filePath("links/run/.lock")));
    const Run linked = cli(QStringList { "train", "--run", m_dir.filePath("links/run") } + tiny);
    QCOMPARE(linked.code, 1);
    QVERIFY2(linked.err.contains(".lock: is a symbolic link"), qPrintable(linked.err));
    QCOMPARE(read(victim), QByteArray("precious\n"));
    QVERIFY(QDir().mkpath(m_dir.filePath("links/hard")));
    QCOMPARE(::link(victim.toLocal8Bit().constData(), m_dir.filePath("links/hard/.lock").toLocal8Bit().constData()), 0);
    const Run hard = cli(QStringList { "train", "--run", m_dir.filePath("links/hard") } + tiny);
    QCOMPARE(hard.code, 1);
    QVERIFY2(hard.err.contains("has other names (a hard link)"), qPrintable(hard.err));
    QCOMPARE(read(victim), QByteArray("precious\n"));

    // Only the best weights kept: they chat, and a new train there is refused, not run over them.
    const QString run = m_dir.filePath("links/best");
    QCOMPARE(cli(QStringList { "train", "--run", run } + tiny).code, 0);
    for (const QFileInfo& f : QDir(run).entryInfoList({ "ckpt-*", "state.json" }, QDir::Files))
        QVERIFY(QFile::remove(f.filePath()));
    const QStringList best = QDir(run).entryList({ "best-*.pt" });
    QCOMPARE(best.size(), 1);
    QCOMPARE(cli({ "chat", "--run", run, "--once", "good morning", "--weights", "best" }).code, 0);
    const QByteArray weights = read(run + "/" + best[0]);
    const Run again = cli(QStringList { "train", "--run", run } + tiny);
    QCOMPARE(again.code, 1);
    QVERIFY2(again.err.contains("holds a trained run's files"), qPrintable(again.err));
    QCOMPARE(read(run + "/" + best[0]), weights);
}

// Found by an outside pass: `bench --out FIFO` blocked for good, `bench --out` on a full disk left
// half a report in place of the old one, and `corpus export --out LINK` replaced the link by a file.
void TestCli::outputsGoThroughLinksAndNeverIntoPipes()
{
    const auto read = testutil::readFile;
    const QString real = QString::fromStdString(testutil::writeFile(m_dir, "outlinks/real/out.tsv", "old\n"));
    const QString link = m_dir.filePath("outlinks/link.tsv");
    QVERIFY(QFile::link(real, link));
    const Run exported = cli({ "corpus", "export", m_corpus, "--out", link });
    QVERIFY2(exported.code == 0, qPrintable(exported.err));
    QVERIFY(QFileInfo(link).isSymLink());
    QVERIFY(read(real).startsWith("# prompt<TAB>response\n"));
    QVERIFY(read(real).contains("good morning\tmorning to you too"));

    const QString fifo = m_dir.filePath("outlinks/out.json");
    QCOMPARE(::mkfifo(fifo.toLocal8Bit().constData(), 0600), 0);
    const QStringList quick = { "--corpus", m_corpus, "--preset", "quick", "--batch", "2", "--repeats", "1", "--warmup",
        "0", "--no-epoch" };
    const Run bench = cli(QStringList { "bench", "--out", fifo } + quick, {}, 60000);
    QCOMPARE(bench.code, 1);
    QVERIFY2(bench.err.contains("is not a regular file") && !bench.out.contains("train_step"), qPrintable(bench.err));
    const Run toFifo = cli({ "corpus", "export", m_corpus, "--out", fifo }, {}, 60000);
    QCOMPARE(toFifo.code, 1);
    QVERIFY(QFileInfo(fifo).exists() && !QFileInfo(fifo).isFile()); // still the pipe
    const Run noFolder = cli(QStringList { "bench", "--out", m_dir.filePath("outlinks/none/r.json") } + quick);
    QCOMPARE(noFolder.code, 1);
    QVERIFY2(noFolder.err.contains("does not exist"), qPrintable(noFolder.err));

    // The report is written whole through a temporary file: the old one stays until the new is
    // complete, and no temporary file is left.
    const QString report = QString::fromStdString(testutil::writeFile(m_dir, "outlinks/r.json", "{\"old\": 1}"));
    QCOMPARE(cli(QStringList { "bench", "--out", report } + quick).code, 0);
    QVERIFY(QJsonDocument::fromJson(read(report)).isObject() && !read(report).contains("\"old\""));
    QCOMPARE(QDir(m_dir.filePath("outlinks")).entryList({ ".*tmp-*" }, QDir::Files | QDir::Hidden).size(), 0);
}

// Found by an outside pass: a 3 GB state.json, config.json or Keras tokenizer was read whole and
// ended in "std::bad_alloc" (naming no file), and a line of stdin without a newline grew one
// string until memory ran out, then chat exited 0 without a word.
void TestCli::oversizedInputsAreRefusedByName()
{
    const QString run = m_dir.filePath("huge/run");
    QCOMPARE(cli({ "train", "--preset", "quick", "--corpus", m_corpus, "--run", run, "--epochs", "1", "--hidden", "8",
                     "--embed", "8" })
                 .code,
        0);
    QByteArray endless(5 << 20, 'a'); // 5 MiB and no newline
    const Run chat = cli({ "chat", "--run", run }, "good morning\n" + endless);
    QCOMPARE(chat.code, 1);
    QVERIFY2(
        chat.err.contains("standard input:2: a line of more than 4 MiB is not a chat message"), qPrintable(chat.err));
    QVERIFY(!chat.out.isEmpty()); // the first line was answered
    // Standard input that cannot be read (a folder given as `< dir`) was taken for its end: exit 0
    // without a word. Now an error, status 1.
    {
        QProcess p;
        p.setStandardInputFile(m_dir.path());
        p.start(CHATBENCH_CLI, { "chat", "--run", run });
        QVERIFY(p.waitForFinished(120000));
        QCOMPARE(p.exitCode(), 1);
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(err.contains("error: standard input:1: cannot read it (Is a directory)"), qPrintable(err));
    }
    auto grow = [](const QString& path) { // sparse: 300 MiB of zeros that take no disk
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadWrite) && f.resize(qint64(300) << 20));
    };
    grow(run + "/state.json"); // stands in for by the newest checkpoint's state, as a damaged one is
    const Run state = cli({ "chat", "--run", run, "--once", "good morning" });
    QVERIFY2(state.code == 0, qPrintable(state.err));
    QVERIFY2(state.out.contains("using ckpt-") || state.err.contains("using ckpt-"), qPrintable(state.out + state.err));
    grow(run + "/config.json");
    const Run config = cli({ "chat", "--run", run, "--once", "good morning" });
    QCOMPARE(config.code, 1);
    QVERIFY2(config.err.contains("config.json")
            && config.err.contains("the file is 300 MiB, more than the limit of 256 MiB")
            && !config.err.contains("bad_alloc"),
        qPrintable(config.err));
}

void TestCli::doctor()
{
    qunsetenv("CUBLAS_WORKSPACE_CONFIG"); // the CLI sets it itself
    const Run r = cli({ "doctor" });
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY(r.out.contains("torch        2."));
    QVERIFY(r.out.contains("device       cpu"));
    QVERIFY(r.out.contains("healthy"));
    const Run j = cli({ "doctor", "--json" });
    const QJsonObject o = QJsonDocument::fromJson(j.out.toUtf8()).object();
    QVERIFY(o["cuda_built"].toBool());
    QVERIFY(o["handoff"].toObject()["healthy"].toBool());
    QVERIFY(o["healthy"].toBool());
    // Set at process start, before CUDA can initialise: deterministic cuBLAS needs it then.
    QCOMPARE(o["cublas_workspace_config"].toString(), QString(":4096:8"));
    QVERIFY(r.out.contains("CUBLAS_WORKSPACE_CONFIG :4096:8"));
    // No GPU here: the CPU↔CUDA parity check says it was skipped and why.
    if (!o["cuda_available"].toBool()) {
        QVERIFY(r.out.contains("parity       skipped: no CUDA device available"));
        QVERIFY(o["cpu_cuda_parity"].toObject().contains("skipped"));
    } else {
        QVERIFY2(o["cpu_cuda_parity"].toObject()["passed"].toBool(), qPrintable(j.out));
    }
    // A user's own setting is kept.
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("CUBLAS_WORKSPACE_CONFIG", ":16:8");
    p.setProcessEnvironment(env);
    p.start(CHATBENCH_CLI, { "doctor", "--json" });
    QVERIFY(p.waitForFinished(300000));
    QCOMPARE(QJsonDocument::fromJson(p.readAllStandardOutput()).object()["cublas_workspace_config"].toString(),
        QString(":16:8"));
    // Found by an outside pass: with its temporary folder full, the doctor's error named a file
    // in a folder it had made, and not what chooses that folder (a file-size limit stands in).
    const Run full = shell("ulimit -f 8; exec \"$0\" doctor", {});
    QCOMPARE(full.code, 1);
    QVERIFY2(full.err.contains("chatbench-doctor-")
            && full.err.contains("(the doctor trains a tiny model in a temporary folder; TMPDIR chooses another)"),
        qPrintable(full.err));
}

void TestCli::bench()
{
    const QString out = m_dir.filePath("bench.json");
    const Run r = cli({ "bench", "--corpus", m_corpus, "--preset", "quick", "--batch", "2,4", "--precision",
        "fp32,fp16", "--repeats", "2", "--warmup", "1", "--reply-length", "3", "--race-epochs", "2", "--out", out });
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    for (const char* unit : { "train_step", "reply_latency", "reply_throughput", "epoch" })
        QVERIFY2(r.out.contains(unit), unit);
    QVERIFY(r.out.contains("GEMM ceiling"));
    QVERIFY2(QRegularExpression("race cpu fp32 [0-9]+ thr: 2 epochs").match(r.out).hasMatch(), qPrintable(r.out));
    QVERIFY(r.out.contains("note: cpu fp16: not supported"));
    QFile f(out);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject j = QJsonDocument::fromJson(f.readAll()).object();
    QCOMPARE(j["format"].toString(), QString("chatbench-bench"));
    QCOMPARE(j["schema_version"].toInt(), 1);
    QCOMPARE(j["rows"].toArray().size(), 2 + 3 + 1 + 1);
    QVERIFY(!j["machine"].toObject()["cpu_model"].toString().isEmpty());
    // A report that cannot be written says why, before the timing.
    const Run folder = cli({ "bench", "--corpus", m_corpus, "--preset", "quick", "--batch", "2", "--repeats", "1",
        "--warmup", "0", "--no-epoch", "--out", m_dir.path() });
    QCOMPARE(folder.code, 1);
    QVERIFY2(
        folder.err.contains(m_dir.path() + ": is a folder; give a file name") && !folder.out.contains("train_step"),
        qPrintable(folder.err));
    QVERIFY(cli({ "bench", "--batch", "0" }).code != 0);
    QVERIFY(cli({ "bench", "--precision", "fp8" }).code != 0);
    // Nothing to measure (fp16 needs a GPU) exited 0 and replaced the report with an empty one.
    const QByteArray before = testutil::readFile(out);
    const Run nothing = cli({ "bench", "--corpus", m_corpus, "--preset", "quick", "--device", "cpu", "--precision",
        "fp16", "--no-epoch", "--out", out });
    QCOMPARE(nothing.code, 1);
    QVERIFY2(nothing.err.contains("nothing was measured") && nothing.err.contains("fp16")
            && nothing.err.contains("was not written"),
        qPrintable(nothing.err));
    QCOMPARE(testutil::readFile(out), before);
    // Stopped by SIGTERM once timing has begun: the report holds what was measured and says so,
    // and the exit status is train's for a stop (130), not 0 (found by an outside pass).
    const QString cut = m_dir.filePath("cut.json");
    QProcess p;
    p.start(CHATBENCH_CLI,
        { "bench", "--corpus", m_corpus, "--preset", "quick", "--batch", "2", "--repeats", "1", "--warmup", "0",
            "--no-epoch", "--race-epochs", "100000", "--threads", "1", "--out", cut });
    QVERIFY(p.waitForStarted());
    QThread::sleep(6); // past loading LibTorch and the corpus, into the timing
    p.terminate();
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 130);
    QVERIFY(testutil::readFile(cut).contains("cancelled before the end"));
}

void TestCli::importKeras()
{
    // A model Keras trained (tests/fixtures/keras), imported, diagnosed, chatted with, benchmarked
    // and fine-tuned from the command line.
    const QString fixtures = CHATBENCH_SOURCE_DIR "/tests/fixtures/keras/";
    const QString run = m_dir.filePath("keras-run");
    const Run r = cli({ "import-keras", fixtures + "stacked.keras", "--tokenizer", fixtures + "stacked_tokenizer.json",
        "--out", run, "--prompts", "12" });
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY(r.out.contains("imported into " + run + ": 2 layer(s)"));
    QVERIFY(r.out.contains("unknown words are left out"));
    QVERIFY(r.out.contains("zero-init          1 / 12"));
    const Run c = cli({ "chat", "--run", run, "--once", "will it rain tomorrow", "--checks" });
    QCOMPARE(c.code, 0);
    QVERIFY2(c.out.startsWith("yes expect light rain after noon\n"), qPrintable(c.out));
    QVERIFY(c.out.contains("handoff ok"));
    // A reply that ends at once is said in words (it was an empty line): imported with the first
    // word of that reply as the end word, the same prompt's greedy reply is empty.
    const QString ended = m_dir.filePath("keras-ends-at-once");
    const Run e = cli({ "import-keras", fixtures + "stacked.keras", "--tokenizer", fixtures + "stacked_tokenizer.json",
        "--out", ended, "--end-word", "yes", "--prompts", "0" });
    QVERIFY2(e.code == 0, qPrintable(e.out + e.err));
    const Run empty = cli({ "chat", "--run", ended, "--once", "will it rain tomorrow" });
    QCOMPARE(empty.code, 0);
    QVERIFY2(empty.out.startsWith("(empty reply: the model's first choice was <end>)\n"), qPrintable(empty.out));
    const Run emptyJson = cli({ "chat", "--run", ended, "--once", "will it rain tomorrow", "--json" });
    QCOMPARE(emptyJson.code, 0);
    const QJsonObject emptyReply = QJsonDocument::fromJson(emptyJson.out.toUtf8()).object();
    QVERIFY(emptyReply.contains("reply"));
    QCOMPARE(emptyReply["reply"].toString(), QString()); // the JSON keeps the reply as it is
    // The same folder again: refused, the first import intact.
    const Run again = cli({ "import-keras", fixtures + "stacked.keras", "--tokenizer",
        fixtures + "stacked_tokenizer.json", "--out", run, "--prompts", "0" });
    QCOMPARE(again.code, 1);
    QVERIFY(again.err.contains("already holds a run"));
    // Errors name the file.
    const Run bad = cli({ "import-keras", fixtures + "stacked_expected.json", "--tokenizer",
        fixtures + "stacked_tokenizer.json", "--out", m_dir.filePath("never-keras"), "--prompts", "0" });
    QCOMPARE(bad.code, 1);
    QVERIFY2(bad.err.contains("stacked_expected.json") && bad.err.contains("neither"), qPrintable(bad.err));
    const Run word
        = cli({ "import-keras", fixtures + "stacked.keras", "--tokenizer", fixtures + "stacked_tokenizer.json", "--out",
            m_dir.filePath("never-keras"), "--start-word", "sos", "--prompts", "0" });
    QCOMPARE(word.code, 1);
    QVERIFY2(word.err.contains("'sos'"), qPrintable(word.err));
    QVERIFY(!QDir(m_dir.filePath("never-keras")).exists());
    // The oov word as the end word gave replies that never ended; as the start word, unknown words
    // a zero row instead of Keras' own (found by an outside pass).
    for (const char* which : { "--end-word", "--start-word" }) {
        const Run oov = cli({ "import-keras", fixtures + "recipe.h5", "--tokenizer", fixtures + "recipe_tokenizer.json",
            "--out", m_dir.filePath("never-keras"), which, "<OOV>", "--prompts", "0" });
        QCOMPARE(oov.code, 1);
        QVERIFY2(oov.err.contains("recipe_tokenizer.json") && oov.err.contains("is the tokenizer's oov_token"),
            qPrintable(oov.err));
        QVERIFY(!QDir(m_dir.filePath("never-keras")).exists());
    }
    // A mistyped model is named before the diagnosis corpus is read (found by an outside pass: a
    // bad corpus was reported first, and a large one loaded for nothing).
    const Run typo
        = cli({ "import-keras", fixtures + "stacked.kerass", "--tokenizer", fixtures + "stacked_tokenizer.json",
            "--out", m_dir.filePath("never-keras"), "--corpus", m_dir.filePath("no-such-corpus.yml") });
    QCOMPARE(typo.code, 1);
    QVERIFY2(typo.err.contains("stacked.kerass") && typo.err.contains("no such model file")
            && !typo.err.contains("no-such-corpus"),
        qPrintable(typo.err));
    // Benchmarked at its sizes, and fine-tuned on a corpus.
    const Run b = cli({ "bench", "--run", run, "--corpus", m_corpus, "--batch", "2", "--repeats", "1", "--warmup", "0",
        "--no-epoch", "--out", "" });
    QVERIFY2(b.code == 0, qPrintable(b.out + b.err));
    QVERIFY(b.out.contains("(E=16, H=16, layers 2"));
    QVERIFY2(b.out.contains("sizes from the run " + run + " (E=16, H=16, layers 2)"), qPrintable(b.out));
    const Run needCorpus = cli({ "train", "--resume", "--run", run });
    QCOMPARE(needCorpus.code, 1);
    QVERIFY(needCorpus.err.contains("give the corpus"));
    const Run ft = cli({ "train", "--resume", "--run", run, "--corpus", m_corpus, "--epochs", "2" });
    QVERIFY2(ft.code == 0, qPrintable(ft.out + ft.err));
    QVERIFY(ft.out.contains("fine-tuning on"));
    QVERIFY(ft.out.contains("finished after 2 epoch(s)"));
}

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
