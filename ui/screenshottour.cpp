#include "screenshottour.h"

#include "chatview.h"
#include "compareview.h"
#include "corpusview.h"
#include "enginecontroller.h"
#include "explainviews.h"
#include "guidedtour.h"
#include "handoffview.h"
#include "liveplot.h"
#include "mainwindow.h"
#include "trainview.h"

#include <QAbstractButton>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QEventLoop>
#include <QFile>
#include <QLineEdit>
#include <QListWidget>
#include <QMessageBox>
#include <QPushButton>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTimer>
#include <QToolButton>

#include <cstdio>

namespace {

// Waits for `signal` (or the timeout); returns whether it came.
template <typename Sender, typename Signal>
bool waitFor(Sender* sender, Signal signal, int timeoutMs, std::function<bool()> until = {})
{
    QEventLoop loop;
    QTimer timer;
    timer.setSingleShot(true);
    bool got = false;
    QObject::connect(&timer, &QTimer::timeout, &loop, &QEventLoop::quit);
    auto c = QObject::connect(sender, signal, &loop, [&] {
        if (!until || until()) {
            got = true;
            loop.quit();
        }
    });
    timer.start(timeoutMs);
    loop.exec();
    QObject::disconnect(c);
    return got;
}

void settle(int ms)
{
    QEventLoop loop;
    QTimer::singleShot(ms, &loop, &QEventLoop::quit);
    loop.exec();
}

// Waits (processing events) until `done` holds or the timeout passes; returns whether it held.
bool waitUntil(const std::function<bool()>& done, int timeoutMs)
{
    for (int waited = 0; !done(); waited += 50) {
        if (waited >= timeoutMs)
            return false;
        settle(50);
    }
    return true;
}

} // namespace

ScreenshotTour::ScreenshotTour(MainWindow* window, const QString& outDir, const QStringList& reports, QObject* parent)
    : QObject(parent)
    , m_window(window)
    , m_dir(outDir)
    , m_reports(reports)
{
    QDir().mkpath(m_dir);
}

void ScreenshotTour::shot(const QString& name, QWidget* widget)
{
    settle(300); // let queued replots and layouts land
    const QString path = QDir(m_dir).filePath(name + ".png");
    (widget ? widget : m_window)->grab().save(path);
    std::printf("screenshot %s\n", qPrintable(path));
    std::fflush(stdout);
}

bool ScreenshotTour::shotReport(const QString& objectName, const QString& name)
{
    auto* box = m_window->findChild<QMessageBox*>(objectName);
    if (!box)
        return fail(objectName + " did not open");
    for (QAbstractButton* b : box->buttons())
        if (box->buttonRole(b) == QMessageBox::ActionRole)
            b->click(); // "Show Details..."
    shot(name, box);
    box->close();
    return true;
}

bool ScreenshotTour::fail(const QString& what)
{
    std::fprintf(stderr, "screenshot tour: %s\n", qPrintable(what));
    return false;
}

int ScreenshotTour::run()
{
    EngineController* engine = m_window->engine();
    auto* corpus = m_window->corpusView();
    auto* train = m_window->trainView();
    auto* chat = m_window->chatView();
    auto* tabs = m_window->tabs();
    bool ok = true;

    // 1. The bundled corpus, loaded at start.
    tabs->setCurrentWidget(corpus);
    if (!corpus->isLoaded() && !waitFor(engine, &EngineController::corpusLoaded, 30000))
        return fail("the corpus did not load"), 1;
    shot("01-corpus");

    // 2. Train: live curves part way, then finished.
    tabs->setCurrentWidget(train);
    if (!waitFor(engine, &EngineController::devicesReady, 30000, [&] { return true; }) && engine->devices().empty())
        ok = fail("devices were not probed");
    chatbench::TrainConfig cfg = chatbench::preset("quick");
    cfg.epochs = 80;
    cfg.seed = 7;
    train->setConfig(cfg);
    train->startTraining();
    int epochs = 0;
    ok = (waitFor(engine, &EngineController::epochDone, 120000, [&] { return ++epochs >= 25; }) || fail("no epochs"))
        && ok;
    shot("02-training-live");
    ok = (waitFor(engine, &EngineController::trainingFinished, 300000) || fail("training did not finish")) && ok;
    shot("03-trained");
    const QString trainedRun = train->currentRun();

    // 3. Chat, with the handoff view of the last reply.
    tabs->setCurrentWidget(chat);
    for (const QString& q :
        { QString("hello"), QString("what does the forget gate do?"), QString("how do i resume training?") }) {
        chat->ask(q);
        ok = waitFor(engine, &EngineController::replyReady, 30000) && ok;
    }
    auto* why = chat->handoffView();
    ok = (waitUntil([&] { return !why->occlusionBars().empty(); }, 30000) || fail("no occlusion bars")) && ok;
    shot("04-chat-handoff");
    why->helpButton()->setChecked(true);
    shot("04b-handoff-help");
    chat->handoffView()->helpButton()->setChecked(false);
    chat->handoffView()->tabs()->setCurrentIndex(1);
    shot("05-norms-gates");
    chat->handoffView()->tabs()->setCurrentIndex(2);
    shot("06-topk");

    // 3b. Why this reply: a what-if branch at step 1 and one at step 3, the nearest training
    // prompts, two questions side by side, and the tree of a beam search.
    why->tabs()->setCurrentWidget(why->whatIfView());
    for (const int step : { 1, 3 }) {
        why->whatIfView()->setStep(step);
        const auto buttons = why->whatIfView()->candidateButtons();
        for (QPushButton* b : buttons)
            if (b->isEnabled()) {
                const int before = why->whatIfView()->branches();
                b->click();
                ok = (waitUntil([&] { return why->whatIfView()->branches() > before; }, 30000) || fail("no branch"))
                    && ok;
                break;
            }
    }
    shot("06b-what-if");
    why->tabs()->setCurrentWidget(why->neighboursView()); // opening the tab searches
    ok = (waitUntil([&] { return why->neighboursView()->table()->rowCount() > 0; }, 60000) || fail("no neighbours"))
        && ok;
    shot("06c-nearest-prompts");
    why->tabs()->setCurrentWidget(why->questionsView());
    why->questionsView()->first()->setCurrentText("hello");
    why->questionsView()->second()->setCurrentText("what does the forget gate do?");
    why->questionsView()->compare();
    ok = (waitFor(engine, &EngineController::compared, 30000) || fail("no comparison")) && ok;
    shot("06d-two-questions");
    chat->methodBox()->setCurrentText("beam");
    chat->ask("what is an lstm?");
    ok = waitFor(engine, &EngineController::replyReady, 30000) && ok;
    why->tabs()->setCurrentWidget(why->beamTreeView());
    for (const auto& node : why->beamTreeView()->tree()) // a node on the reply's path, for its state
        if (node.chosen && node.step == 3)
            why->beamTreeView()->selectNode(static_cast<int>(&node - why->beamTreeView()->tree().data()));
    shot("06e-beam-tree");
    chat->methodBox()->setCurrentText("greedy");
    why->tabs()->setCurrentIndex(0);

    // 4. The diversity probe, then the seed's bug: break the handoff and probe again.
    chat->runProbe();
    ok = waitFor(engine, &EngineController::probeDone, 60000) && ok;
    chat->breakSwitch()->setChecked(true);
    chat->ask("what is an lstm?");
    ok = waitFor(engine, &EngineController::replyReady, 30000) && ok;
    chat->runProbe();
    ok = waitFor(engine, &EngineController::probeDone, 60000) && ok;
    shot("07-broken-handoff");
    chat->breakSwitch()->setChecked(false);

    // 4b. The weights kept at the best validation loss, chosen in the chat pane.
    engine->loadRun(trainedRun, /*best=*/true);
    ok = waitFor(engine, &EngineController::runLoaded, 30000) && ok;
    chat->ask("hello");
    ok = waitFor(engine, &EngineController::replyReady, 30000) && ok;
    shot("07b-best-weights");

    // 5. A bad corpus: the error names file and line; the window stays usable.
    const QString original = corpus->currentPath();
    QTemporaryDir tmp;
    const QString bad = tmp.filePath("broken.yml");
    QFile f(bad);
    if (f.open(QIODevice::WriteOnly))
        f.write("categories:\n- demo\nconversations:\n- - Hello\n  - [an unclosed list\n- - Bye\n  - See you\n");
    f.close();
    tabs->setCurrentWidget(corpus);
    corpus->load(bad);
    ok = waitFor(engine, &EngineController::failed, 30000) && ok;
    shot("08-corpus-error");

    // 5b. A corpus with one malformed record among good ones (a plain text where a list of turns
    // was meant, as in the published chatterbot corpus): the rest loads, the record is listed
    // with file:line, and a click shows the source there.
    QDir(tmp.path()).mkdir("quiz");
    QFile good(tmp.filePath("quiz/greetings.yml")), quiz(tmp.filePath("quiz/trivia.yml"));
    if (good.open(QIODevice::WriteOnly))
        good.write(
            "conversations:\n- - Hello\n  - Hi there\n- - How are you?\n  - Fine, thanks.\n  - Glad to hear it.\n");
    good.close();
    if (quiz.open(QIODevice::WriteOnly))
        quiz.write("categories:\n- trivia\nconversations:\n- - Which planet is known as the red planet?\n  - Mars\n"
                   "- How many legs does a spider have?\n  - '8'\n- - What is the largest ocean?\n  - The Pacific\n");
    quiz.close();
    corpus->load(tmp.filePath("quiz"));
    ok = waitFor(engine, &EngineController::corpusLoaded, 30000) && ok;
    corpus->warningList()->setCurrentRow(0);
    shot("08b-corpus-skipped");

    // 6. Compare: benchmark this machine (fp32 and bf16, a race) beside imported reports.
    corpus->load(original);
    ok = waitFor(engine, &EngineController::corpusLoaded, 30000) && ok;
    auto* compare = m_window->compareView();
    tabs->setCurrentWidget(compare);
    for (const QString& r : m_reports)
        ok = compare->importReport(r) && ok;
    compare->setBatchSizes("1,16,64");
    compare->setRepeats(3);
    compare->setRaceEpochs(15);
    compare->findChild<QCheckBox*>("bf16")->setChecked(true);
    compare->runLocal();
    ok = waitFor(engine, &EngineController::benchFinished, 600000) && ok;
    shot("09-compare");

    // 6b. CPU against GPU: the reports a GPU machine's check wrote into bench/reports (its CPU
    // and its GPU on one workload), alone in the charts.
    const QDir saved(compare->reportsDir());
    const QStringList gpuReports = saved.entryList({ "gpu-*.json" }, QDir::Files, QDir::Name);
    if (!gpuReports.isEmpty()) {
        auto* remove = compare->findChild<QPushButton*>("removeReport");
        while (remove && compare->reportList()->count() > 0) {
            compare->reportList()->setCurrentRow(0);
            remove->click();
        }
        for (const QString& f : gpuReports)
            ok = compare->importReport(saved.filePath(f)) && ok;
        settle(300);
        shot("09b-compare-gpu");
    }

    // 7. The environment doctor (Help menu), the same engine function as `chatbench-cli doctor`.
    engine->runDoctor();
    ok = waitFor(engine, &EngineController::doctorDone, 120000) && ok;
    settle(300);
    ok = shotReport("doctorReport", "10-doctor") && ok;

    // 8. A Keras model trained elsewhere (the test fixture), imported and chatted with.
    const QString fixtures = QString(CHATBENCH_SOURCE_DIR) + "/tests/fixtures/keras/";
    m_window->importKerasFiles(
        fixtures + "recipe.keras", fixtures + "recipe_tokenizer.json", "start", "end", tmp.filePath("weather-keras"));
    ok = waitFor(engine, &EngineController::kerasImported, 60000) && ok;
    ok = waitFor(engine, &EngineController::runLoaded, 30000) && ok;
    settle(300);
    ok = shotReport("kerasImportReport", "11-keras-import") && ok;
    chat->ask("will it rain tomorrow");
    ok = waitFor(engine, &EngineController::replyReady, 30000) && ok;
    shot("12-keras-chat");

    // 9. Help → Guided tour, on its Chat page.
    m_window->showGuidedTour();
    m_window->guidedTour()->showPage(2);
    settle(200);
    shot("13-guided-tour", m_window->guidedTour());
    m_window->guidedTour()->close();

    // 10. Every tab at smaller window sizes: the forms scroll, nothing is cut.
    train->showRunCurves(trainedRun);
    m_window->statusBar()->clearMessage();
    for (const QSize size : { QSize(1280, 800), QSize(1024, 700) }) {
        m_window->resize(size);
        for (int i = 0; i < tabs->count(); ++i) {
            tabs->setCurrentIndex(i);
            shot(QString("size-%1x%2-%3-%4")
                     .arg(size.width())
                     .arg(size.height())
                     .arg(i + 1)
                     .arg(tabs->tabText(i).remove('&').toLower()));
        }
    }
    return ok ? 0 : 1;
}
