#include "mainwindow.h"

#include "chatbench/config.h"
#include "chatbench/error.h"
#include "chatbench/runs.h"
#include "chatview.h"
#include "compareview.h"
#include "corpusview.h"
#include "enginecontroller.h"
#include "handoffview.h"
#include "liveplot.h"
#include "trainview.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QFileDialog>
#include <QFontDatabase>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
#include <QTextEdit>

using namespace chatbench;

MainWindow::MainWindow(const QString& runsDir, QWidget* parent)
    : QMainWindow(parent)
{
    setWindowTitle(tr("chatbench — LSTM chatbot workbench"));
    setWindowIcon(QIcon(":/chatbench.svg"));
    m_engine = new EngineController(this);
    m_corpus = new CorpusView(m_engine);
    m_train = new TrainView(m_engine);
    m_chat = new ChatView(m_engine);
    m_compare = new CompareView(m_engine);
    m_tabs = new QTabWidget;
    m_tabs->addTab(m_corpus, tr("&Corpus"));
    m_tabs->addTab(m_train, tr("&Train"));
    m_tabs->addTab(m_chat, tr("C&hat"));
    m_tabs->addTab(m_compare, tr("C&ompare"));
    setCentralWidget(m_tabs);

    QSettings settings;
    QString runs = runsDir;
    if (runs.isEmpty())
        runs = settings
                   .value("runsDir", QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation) + "/runs")
                   .toString();
    m_train->setRunsDir(runs);
    if (settings.contains("trainConfig")) {
        try {
            m_train->setConfig(trainConfigFromJson(settings.value("trainConfig").toString().toStdString(), "settings"));
        } catch (const Error&) {
            // stale or hand-edited settings: keep the preset's values
        }
    }

    auto* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("Open &corpus file…"), QKeySequence::Open, m_corpus, &CorpusView::openFile);
    file->addAction(tr("Open corpus &folder…"), QKeySequence("Ctrl+Shift+O"), m_corpus, &CorpusView::openFolder);
    file->addAction(tr("Open &run…"), QKeySequence("Ctrl+L"), this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a run folder"), m_train->runsDir());
        if (!dir.isEmpty()) {
            m_train->setCurrentRun(dir);
            m_engine->loadRun(dir);
        }
    });
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
    auto* run = menuBar()->addMenu(tr("&Run"));
    run->addAction(tr("&Train"), QKeySequence("Ctrl+T"), m_train, &TrainView::startTraining);
    run->addAction(tr("&Stop"), QKeySequence("Ctrl+."), m_train, &TrainView::stopTraining);
    run->addAction(tr("&Resume"), QKeySequence("Ctrl+R"), m_train, &TrainView::resumeTraining);
    auto* view = menuBar()->addMenu(tr("&View"));
    for (int i = 0; i < m_tabs->count(); ++i)
        view->addAction(m_tabs->tabText(i).remove('&'), QKeySequence(QString("Alt+%1").arg(i + 1)), this,
            [this, i] { m_tabs->setCurrentIndex(i); });
    // The buttons carry the same shortcuts for their tooltips; the menu owns them.
    m_train->trainButton()->setShortcut({});
    m_train->stopButton()->setShortcut({});
    m_train->resumeButton()->setShortcut({});
    auto* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("Environment &doctor"), this, [this] {
        statusBar()->showMessage(tr("doctor: checking versions, devices and the handoff on a tiny model…"));
        m_engine->runDoctor();
    });
    help->addAction(tr("&About chatbench"), this, [this] {
        QMessageBox::about(this, tr("About chatbench"),
            tr("<b>chatbench</b> trains LSTM sequence-to-sequence chatbots and shows, for every reply, how the "
               "encoder's final (h, c) is handed to the decoder and carried step to step."));
    });

    connect(m_engine, &EngineController::doctorDone, this, [this](const DoctorReport& d) {
        statusBar()->showMessage(d.healthy ? tr("doctor: healthy") : tr("doctor: PROBLEM — see the report"), 8000);
        auto* box
            = new QMessageBox(d.healthy ? QMessageBox::Information : QMessageBox::Warning, tr("Environment doctor"),
                d.healthy ? tr("Healthy: the handoff checks pass and catch the zero-state bug.")
                          : tr("Problem: the handoff checks did not behave as expected."),
                QMessageBox::Close, this);
        box->setDetailedText(QString::fromStdString(describe(d)));
        if (auto* text = box->findChild<QTextEdit*>()) { // the report is a table: keep its columns
            text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
            text->setLineWrapMode(QTextEdit::NoWrap);
            text->setMinimumSize(900, 340);
        }
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->setObjectName("doctorReport");
        box->open(); // not modal to the event loop: training and chat go on
    });

    m_statusDevice = new QLabel;
    statusBar()->addPermanentWidget(m_statusDevice);

    connect(m_engine, &EngineController::failed, this, [this](const QString& message, EngineController::Job job) {
        if (job == EngineController::Job::Corpus)
            m_corpus->showError(message);
        showError(message);
    });
    connect(m_engine, &EngineController::log, this, [this](const QString& m) { statusBar()->showMessage(m, 8000); });
    connect(m_train, &TrainView::status, this, [this](const QString& m) { statusBar()->showMessage(m, 8000); });
    connect(m_compare, &CompareView::status, this, [this](const QString& m) { statusBar()->showMessage(m, 8000); });
    connect(m_engine, &EngineController::devicesReady, this, [this] {
        const auto& d = m_engine->devices();
        m_statusDevice->setText(
            d.size() > 1 ? tr("%1 CUDA device(s)").arg(d.size() - 1) : tr("CPU only (no CUDA device)"));
    });
    connect(m_corpus, &CorpusView::loaded, this, [this](const QString& path, int pairs) {
        statusBar()->showMessage(tr("loaded %1 pairs from %2").arg(pairs).arg(path), 8000);
        QSettings().setValue("lastCorpus", path);
    });
    connect(m_engine, &EngineController::corpusLoaded, this, [this](const CorpusSummary& s) {
        QStringList questions;
        for (size_t i = 0; s.data && i < s.data->size() && questions.size() < 20;
             i += std::max<size_t>(1, s.data->size() / 20))
            questions << QString::fromStdString((*s.data)[i].prompt);
        m_chat->setProbeQuestions(questions);
    });
    connect(m_engine, &EngineController::trainingStarted, this,
        [this](const QString& dir) { QSettings().setValue("lastRun", dir); });
    connect(m_engine, &EngineController::runLoaded, this, [this](const RunSummary& r) {
        QSettings().setValue("lastRun", r.runDir);
        statusBar()->showMessage(tr("opened run %1").arg(r.runDir), 8000);
    });

    resize(1360, 860);
    if (settings.contains("geometry"))
        restoreGeometry(settings.value("geometry").toByteArray());
    if (settings.contains("windowState"))
        restoreState(settings.value("windowState").toByteArray());
    m_tabs->setCurrentIndex(settings.value("tab", 0).toInt());
}

MainWindow::~MainWindow() = default;

void MainWindow::restore(const QString& fallbackCorpus)
{
    QSettings settings;
    QString corpus = settings.value("lastCorpus").toString();
    if (corpus.isEmpty() || !QFileInfo::exists(corpus))
        corpus = fallbackCorpus;
    if (!corpus.isEmpty())
        m_corpus->load(corpus);
    const QString run = settings.value("lastRun").toString();
    if (!run.isEmpty() && chatbench::isRun(run.toStdString())) {
        m_train->setCurrentRun(run);
        m_engine->loadRun(run);
    }
}

void MainWindow::showError(const QString& message)
{
    m_lastError = message;
    statusBar()->showMessage(tr("Error: %1").arg(message), 15000);
}

void MainWindow::saveSettings()
{
    QSettings settings;
    settings.setValue("geometry", saveGeometry());
    settings.setValue("windowState", saveState());
    settings.setValue("tab", m_tabs->currentIndex());
    settings.setValue("runsDir", m_train->runsDir());
    settings.setValue("trainConfig", QString::fromStdString(toJson(m_train->config())));
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    if (m_engine->isTraining()) {
        // Stop after the current batch; the engine writes a checkpoint, so Resume picks it up.
        m_engine->stop();
        statusBar()->showMessage(tr("stopping training and saving a checkpoint…"));
    }
    saveSettings();
    event->accept();
}
