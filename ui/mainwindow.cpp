#include "mainwindow.h"

#include "chatbench/config.h"
#include "chatbench/error.h"
#include "chatbench/runs.h"
#include "chatview.h"
#include "compareview.h"
#include "corpusview.h"
#include "enginecontroller.h"
#include "guidedtour.h"
#include "handoffview.h"
#include "liveplot.h"
#include "trainview.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>

#include <memory>
#include <QPushButton>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
#include <QTextEdit>
#include <QVBoxLayout>

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
    m_runsGiven = !runsDir.isEmpty();
    if (runs.isEmpty())
        runs = settings
                   .value("runsDir", QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation) + "/runs")
                   .toString();
    m_train->setRunsDir(runs);
    // The project's saved reports (CPU and GPU machines, the peers) are listed in Compare.
    if (QDir(CHATBENCH_SOURCE_DIR "/bench/reports").exists())
        m_compare->setReportsDir(QDir::cleanPath(CHATBENCH_SOURCE_DIR "/bench/reports"));
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
    auto* importAction
        = file->addAction(tr("&Import Keras model…"), QKeySequence("Ctrl+I"), this, &MainWindow::importKeras);
    importAction->setEnabled(EngineController::canImportKeras());
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
    help->addAction(tr("&Guided tour"), QKeySequence(Qt::Key_F1), this, &MainWindow::showGuidedTour);
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

    connect(m_engine, &EngineController::kerasImported, this, [this](const QString& runDir, const QString& report) {
        m_lastImport.clear(); // done: the next import starts from an empty form
        // Chat with it at once: the run loads like any other, and it is in the Train tab's history
        // (the run before stayed selected there, its curves' note over empty axes).
        m_train->refreshRunHistory();
        m_train->setCurrentRun(runDir);
        m_engine->loadRun(runDir);
        m_tabs->setCurrentWidget(m_chat);
        statusBar()->showMessage(tr("imported the Keras model into %1").arg(runDir), 8000);
        auto* box = new QMessageBox(QMessageBox::Information, tr("Keras model imported"),
            tr("Imported into %1. Chat with it on the Chat tab; fine-tune it with Run → Resume on a corpus.\n\n%2")
                .arg(runDir, report.section("\n\n", 1).section("\n", -2, -2)),
            QMessageBox::Close, this);
        box->setDetailedText(report);
        if (auto* text = box->findChild<QTextEdit*>()) { // short table lines, long notes: wrap
            text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
            text->setMinimumSize(900, 300);
        }
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->setObjectName("kerasImportReport");
        box->open();
    });

    m_statusDevice = new QLabel;
    statusBar()->addPermanentWidget(m_statusDevice);

    connect(m_engine, &EngineController::failed, this, [this](const QString& message, EngineController::Job job) {
        if (job == EngineController::Job::Corpus)
            m_corpus->showError(message);
        showError(message);
        if (job == EngineController::Job::Import) { // in the status bar only, it was gone in 15 s
            auto* box = new QMessageBox(QMessageBox::Warning, tr("Keras model not imported"),
                tr("%1\n\nFile → Import Keras model… opens the form again with what was given.").arg(message),
                QMessageBox::Close, this);
            box->setAttribute(Qt::WA_DeleteOnClose);
            box->setObjectName("kerasImportError");
            box->open();
        }
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
        statusBar()->showMessage(
            tr("opened run %1%2%3")
                .arg(QFileInfo(r.runDir).fileName(), r.bestLoaded ? tr(" (best weights)") : QString(),
                    r.note.isEmpty() ? QString() : tr("; note: %1").arg(r.note)),
            r.note.isEmpty() ? 8000 : 30000);
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
    bool reopen = false;
    try {
        reopen = !run.isEmpty() && chatbench::isRun(run.toStdString());
    } catch (const chatbench::Error&) {
        reopen = true; // a folder that cannot be listed: opening it says so where the window says errors
    }
    if (reopen) {
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
    if (!m_runsGiven)
        settings.setValue("runsDir", m_train->runsDir());
    settings.setValue("trainConfig", QString::fromStdString(toJson(m_train->config())));
}

void MainWindow::showGuidedTour()
{
    if (!m_tour)
        m_tour = new GuidedTour(m_tabs, this);
    m_tour->showPage(0);
    m_tour->show();
    m_tour->raise();
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

void MainWindow::importKeras()
{
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Import a Keras model"));
    auto* form = new QFormLayout;
    auto pathRow = [&](QLineEdit* edit, const QString& caption, const QString& filter, bool folder) {
        auto* row = new QHBoxLayout;
        auto* browse = new QPushButton(tr("Browse…"));
        row->addWidget(edit, 1);
        row->addWidget(browse);
        connect(browse, &QPushButton::clicked, &dialog, [&dialog, edit, caption, filter, folder] {
            const QString p = folder ? QFileDialog::getSaveFileName(&dialog, caption, edit->text())
                                     : QFileDialog::getOpenFileName(&dialog, caption, edit->text(), filter);
            if (!p.isEmpty())
                edit->setText(p);
        });
        return row;
    };
    // What was given last time (an import that failed is corrected, not typed again).
    const QStringList last = m_lastImport.size() == 5 ? m_lastImport : QStringList { "", "", "start", "end", "" };
    auto* model = new QLineEdit(last[0]);
    model->setPlaceholderText(tr("chatbot.keras or chatbot.h5"));
    auto* tokenizer = new QLineEdit(last[1]);
    tokenizer->setPlaceholderText(tr("tokenizer.json (tokenizer.to_json())"));
    auto* start = new QLineEdit(last[2]);
    auto* end = new QLineEdit(last[3]);
    start->setToolTip(
        tr("The word the recipe starts replies with, as the Keras tokenizer keeps it ('<START>' is 'start')"));
    end->setToolTip(tr("The word the recipe ends replies with"));
    auto* run = new QLineEdit(last[4]);
    form->addRow(
        tr("Model"), pathRow(model, tr("Keras model"), tr("Keras models (*.keras *.h5 *.hdf5);;All files (*)"), false));
    form->addRow(
        tr("Tokenizer"), pathRow(tokenizer, tr("Keras tokenizer JSON"), tr("JSON (*.json);;All files (*)"), false));
    form->addRow(tr("Start word"), start);
    form->addRow(tr("End word"), end);
    form->addRow(tr("Run folder"), pathRow(run, tr("New run folder"), QString(), true));
    // The run folder follows the model's name until the user writes one of their own (every
    // keystroke in the model's field replaced it).
    auto runEdited = std::make_shared<bool>(!last[4].isEmpty());
    connect(run, &QLineEdit::textEdited, &dialog, [runEdited] { *runEdited = true; });
    connect(model, &QLineEdit::textChanged, &dialog, [this, run, runEdited](const QString& m) {
        if (!m.isEmpty() && !*runEdited)
            run->setText(QDir(m_train->runsDir()).filePath(QFileInfo(m).completeBaseName() + "-keras"));
    });
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    auto* layout = new QVBoxLayout(&dialog);
    auto* note = new QLabel(tr("The recipe's model: Embedding → LSTM encoder, Embedding → LSTM decoder started from "
                               "the encoder's states, Dense softmax. The diagnosis asks the loaded corpus' prompts."));
    note->setWordWrap(true);
    layout->addWidget(note);
    layout->addLayout(form);
    layout->addWidget(buttons);
    dialog.resize(640, dialog.sizeHint().height());
    if (dialog.exec() != QDialog::Accepted)
        return;
    m_lastImport = { model->text(), tokenizer->text(), start->text(), end->text(), run->text() };
    importKerasFiles(model->text(), tokenizer->text(), start->text(), end->text(), run->text());
}

void MainWindow::importKerasFiles(const QString& model, const QString& tokenizer, const QString& startWord,
    const QString& endWord, const QString& runDir)
{
    if (model.isEmpty() || tokenizer.isEmpty() || runDir.isEmpty()) {
        showError(tr("Give the model file, the tokenizer JSON and a new run folder."));
        return;
    }
    statusBar()->showMessage(tr("importing %1…").arg(model));
    m_engine->importKeras(model, tokenizer, startWord, endWord, runDir);
}
