// Killed writers: `train` killed with SIGKILL at random moments, most of them inside a checkpoint
// save (one every step), 100 times. After every kill the run must load — the last good checkpoint
// — and the next writer must leave no temporary file of the dead one behind.

#include "chatbench/chatbot.h"
#include "chatbench/runs.h"
#include "testutil.h"

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>

using namespace chatbench;

class TestCrash : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void killDuringSavesLeavesALoadableRun();
};

void TestCrash::killDuringSavesLeavesALoadableRun()
{
    QTemporaryDir dir;
    const QString run = dir.filePath("run");
    const QString corpus = CHATBENCH_DATASETS_DIR "/chatbench";
    QProcess first;
    // A checkpoint after every step (config.json keeps it for every resume below).
    first.start(CHATBENCH_CLI,
        { "train", "--preset", "quick", "--corpus", corpus, "--run", run, "--epochs", "1", "--checkpoint-every", "1" });
    QVERIFY(first.waitForFinished(300000));
    QCOMPARE(first.exitCode(), 0);
    int64_t lastStep = Chatbot::load(run.toStdString()).step();
    // The process holding the run's lock writes its id into the lock file.
    auto lockedBy = [&](qint64 pid) {
        QFile f(run + "/.lock");
        return f.open(QIODevice::ReadOnly) && f.readAll().trimmed().toLongLong() == pid;
    };
    QRandomGenerator rng(20261130);
    int killedInSave = 0;
    const int rounds = 100;
    for (int i = 0; i < rounds; ++i) {
        QProcess p;
        p.start(CHATBENCH_CLI, { "train", "--resume", "--run", run, "--epochs", "100000", "--quiet" });
        QVERIFY(p.waitForStarted());
        // Once it holds the run's lock (start-up takes from half a second to several on a busy
        // machine) the process does little but save checkpoints: kill it a random moment later.
        QTRY_VERIFY_WITH_TIMEOUT(lockedBy(p.processId()), 120000);
        QTest::qWait(static_cast<int>(rng.bounded(0, 700)));
        const bool running = p.state() == QProcess::Running;
        ::kill(static_cast<pid_t>(p.processId()), SIGKILL);
        QVERIFY(p.waitForFinished(30000));
        QVERIFY2(running, qPrintable(QString::fromUtf8(p.readAllStandardError()))); // it was killed, not done
        for (const QString& f : QDir(run).entryList(QDir::Hidden | QDir::Files))
            killedInSave += f.contains(".tmp-") ? 1 : 0;
        // The run loads, at a step no earlier than before (never lost work that was saved).
        const Chatbot bot = Chatbot::load(run.toStdString());
        QVERIFY2(
            bot.step() >= lastStep, qPrintable(QString("round %1: step %2 < %3").arg(i).arg(bot.step()).arg(lastStep)));
        lastStep = bot.step();
        QVERIFY(!bot.reply("hello").text.empty());
    }
    qInfo("%d rounds, %d of them killed with a save's temporary file on disk; last step %lld", rounds, killedInSave,
        static_cast<long long>(lastStep));
    QVERIFY(killedInSave > 0); // the kills did land inside saves
    // The next writer cleans up after the dead ones.
    QProcess last;
    last.start(CHATBENCH_CLI, { "train", "--resume", "--run", run, "--epochs", "100000", "--quiet" });
    QVERIFY(last.waitForStarted());
    QTRY_VERIFY_WITH_TIMEOUT(lockedBy(last.processId()), 120000);
    QTRY_VERIFY_WITH_TIMEOUT(Chatbot::load(run.toStdString()).step() > lastStep, 120000); // it trains
    last.terminate(); // SIGTERM: stops after the current step with a checkpoint
    QVERIFY(last.waitForFinished(60000));
    QCOMPARE(last.exitCode(), 130);
    for (const QString& f : QDir(run).entryList(QDir::Hidden | QDir::Files))
        QVERIFY2(!f.contains(".tmp-"), qPrintable(f));
    QVERIFY(Chatbot::load(run.toStdString()).step() >= lastStep);
}

QTEST_GUILESS_MAIN(TestCrash)
#include "tst_crash.moc"
