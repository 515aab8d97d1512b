#include "trainview.h"

#include "enginecontroller.h"

#include "chatbench/runs.h"
#include "liveplot.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardItemModel>
#include <QThread>
#include <QVBoxLayout>

#include <cmath>

using namespace chatbench;

namespace {

QString duration(double s)
{
    return QString::fromStdString(formatDuration(s));
}

QSpinBox* spin(int lo, int hi, const QString& tip)
{
    auto* s = new QSpinBox;
    s->setRange(lo, hi);
    s->setToolTip(tip);
    return s;
}

QDoubleSpinBox* dspin(double lo, double hi, int decimals, double step, const QString& tip)
{
    auto* s = new QDoubleSpinBox;
    s->setRange(lo, hi);
    s->setDecimals(decimals);
    s->setSingleStep(step);
    s->setToolTip(tip);
    return s;
}

} // namespace

TrainView::TrainView(EngineController* engine, QWidget* parent)
    : QWidget(parent)
    , m_engine(engine)
{
    // Hyper-parameters.
    auto* form = new QFormLayout;
    m_preset = new QComboBox;
    for (const std::string& name : presetNames())
        m_preset->addItem(QString::fromStdString(name + " — " + presetDescription(name)), QString::fromStdString(name));
    m_preset->setToolTip(tr("Starting values for every field below: seed (the Keras recipe), quick, large"));
    form->addRow(tr("Preset"), m_preset);
    form->addRow(tr("Epochs"), m_epochs = spin(1, 100000, tr("Passes over the training pairs")));
    form->addRow(tr("Batch size"), m_batch = spin(1, 65536, tr("Pairs per optimizer step")));
    form->addRow(tr("Learning rate"), m_lr = dspin(0.00001, 10, 5, 0.0005, tr("Optimizer step size")));
    m_optimizer = new QComboBox;
    for (const std::string& name : optimizerNames())
        m_optimizer->addItem(QString::fromStdString(name));
    m_optimizer->setToolTip(tr("The update rule: Adam, RMSprop (the Keras recipe's) or SGD"));
    form->addRow(tr("Optimizer"), m_optimizer);
    form->addRow(tr("Embedding"), m_embed = spin(1, 8192, tr("Embedding width")));
    form->addRow(tr("LSTM units"), m_hidden = spin(1, 8192, tr("Hidden size H of every LSTM layer")));
    form->addRow(tr("Layers"), m_layers = spin(1, 8, tr("Stacked LSTM layers in encoder and decoder")));
    form->addRow(tr("Dropout"), m_dropout = dspin(0, 0.95, 2, 0.05, tr("Between layers and on embeddings")));
    form->addRow(tr("Attention"), m_attention = new QCheckBox(tr("Luong (general)")));
    m_attention->setToolTip(tr("Let each decoder step look back at every encoder step (not in the seed recipe)"));
    form->addRow(tr("Embeddings"), m_shared = new QCheckBox(tr("shared by encoder and decoder")));
    m_shared->setToolTip(tr("One embedding table for both sides, as in the Keras recipe"));
    form->addRow(
        tr("Teacher forcing"), m_teacher = dspin(0, 1, 2, 0.05, tr("Probability of feeding the true previous token")));
    form->addRow(tr("Gradient clip"), m_clip = dspin(0, 1000, 2, 0.5, tr("Gradient-norm clipping; 0 = off")));
    form->addRow(tr("Early stop"), m_patience = spin(0, 10000, tr("Epochs without a better validation loss; 0 = off")));
    form->addRow(tr("Validation"), m_valFraction = dspin(0, 0.9, 2, 0.05, tr("Fraction of pairs held out")));
    form->addRow(tr("Seed"), m_seed = spin(0, 2147483647, tr("Random seed: same seed, same run")));
    auto* hyper = new QGroupBox(tr("Model and training"));
    hyper->setLayout(form);

    // Device selector.
    auto* dev = new QFormLayout;
    m_device = new QComboBox;
    m_device->setToolTip(tr("Where training runs"));
    dev->addRow(tr("Device"), m_device);
    m_threads = spin(1, std::max(1, QThread::idealThreadCount()), tr("CPU threads for training"));
    m_threads->setValue(std::max(1, QThread::idealThreadCount()));
    dev->addRow(tr("CPU threads"), m_threads);
    m_precision = new QComboBox;
    for (const std::string& name : precisionNames())
        m_precision->addItem(QString::fromStdString(name), QString::fromStdString(name));
    m_precision->setToolTip(tr("Number format of the training maths: fp32, or bf16/fp16 mixed precision"));
    dev->addRow(tr("Precision"), m_precision);
    m_tf32 = new QCheckBox(tr("TF32 tensor cores"));
    m_tf32->setObjectName("tf32");
    m_tf32->setToolTip(tr("CUDA, fp32 only: let the matmuls and cuDNN's LSTM use TF32 tensor cores (10-bit "
                          "mantissa, faster). Off: IEEE fp32 everywhere"));
    dev->addRow(QString(), m_tf32);
    m_deviceNote = new QLabel(tr("probing devices…"));
    m_deviceNote->setWordWrap(true);
    m_deviceNote->setStyleSheet("color: #666;");
    dev->addRow(m_deviceNote);
    auto* devBox = new QGroupBox(tr("Device"));
    devBox->setLayout(dev);

    // Actions and progress.
    m_train = new QPushButton(tr("Train"));
    m_train->setToolTip(tr("Train a new run on the loaded corpus (Ctrl+T)"));
    m_train->setShortcut(QKeySequence("Ctrl+T"));
    m_stop = new QPushButton(tr("Stop"));
    m_stop->setToolTip(tr("Stop after the current batch and save a checkpoint (Ctrl+.)"));
    m_stop->setShortcut(QKeySequence("Ctrl+."));
    m_resume = new QPushButton(tr("Resume"));
    m_resume->setToolTip(tr("Continue the selected run from its last checkpoint, to the epochs and on the device and "
                            "threads set here; the rest of its settings are the run's own (Ctrl+R)"));
    m_resume->setShortcut(QKeySequence("Ctrl+R"));
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_train);
    buttons->addWidget(m_stop);
    buttons->addWidget(m_resume);
    m_progress = new QProgressBar;
    m_progress->setRange(0, 1);
    m_progress->setValue(0);
    m_eta = new QLabel(tr("idle"));
    m_eta->setWordWrap(true); // the summary names steps, time, device and losses

    m_runs = new QListWidget;
    m_runs->setToolTip(tr("Runs in the runs folder: tick to overlay their curves, double-click to open for chat"));
    auto* runsBox = new QGroupBox(tr("Run history"));
    auto* runsLayout = new QVBoxLayout(runsBox);
    runsLayout->addWidget(m_runs);

    // The form scrolls when the window is short rather than squeezing its fields.
    auto* hyperScroll = new QScrollArea;
    hyperScroll->setWidget(hyper);
    hyperScroll->setWidgetResizable(true);
    hyperScroll->setFrameShape(QFrame::NoFrame);
    hyperScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    hyperScroll->setMinimumHeight(160);
    hyperScroll->setObjectName("trainForm");
    auto* left = new QVBoxLayout;
    left->addWidget(hyperScroll, 3);
    left->addWidget(devBox);
    left->addLayout(buttons);
    left->addWidget(m_progress);
    left->addWidget(m_eta);
    left->addWidget(runsBox, 2);
    auto* leftWidget = new QWidget;
    leftWidget->setLayout(left);
    leftWidget->setMaximumWidth(380);

    m_plot = new LivePlot;
    auto* exportBar = new QHBoxLayout;
    exportBar->addStretch();
    for (const QString& kind : { QString("PNG"), QString("PDF"), QString("CSV") }) {
        auto* b = new QPushButton(tr("Export %1").arg(kind));
        b->setToolTip(kind == "CSV" ? tr("Save every step and epoch value shown as a CSV file")
                                    : tr("Save the loss chart as a %1 file").arg(kind));
        exportBar->addWidget(b);
        connect(b, &QPushButton::clicked, this, [this, kind] {
            const QString path = QFileDialog::getSaveFileName(
                this, tr("Export curves"), "curves." + kind.toLower(), kind + " (*." + kind.toLower() + ")");
            if (path.isEmpty())
                return;
            QString why;
            const bool ok = kind == "CSV" ? m_plot->exportCsv(path, &why) : m_plot->exportImage(path, &why);
            Q_EMIT status(ok ? tr("exported %1").arg(path) : why);
        });
    }
    auto* right = new QVBoxLayout;
    right->addWidget(m_plot, 1);
    right->addLayout(exportBar);
    auto* rightWidget = new QWidget;
    rightWidget->setLayout(right);

    auto* layout = new QHBoxLayout(this);
    layout->addWidget(leftWidget);
    layout->addWidget(rightWidget, 1);

    connect(
        m_preset, &QComboBox::currentIndexChanged, this, [this] { applyPreset(m_preset->currentData().toString()); });
    connect(m_device, &QComboBox::currentIndexChanged, this, &TrainView::updatePrecisions);
    connect(m_precision, &QComboBox::currentIndexChanged, this, &TrainView::updateTf32);
    connect(m_train, &QPushButton::clicked, this, &TrainView::startTraining);
    connect(m_stop, &QPushButton::clicked, this, &TrainView::stopTraining);
    connect(m_resume, &QPushButton::clicked, this, &TrainView::resumeTraining);
    connect(m_engine, &EngineController::devicesReady, this, &TrainView::fillDevices);
    connect(m_engine, &EngineController::corpusLoaded, this, [this] {
        m_haveCorpus = true;
        setRunning(m_running);
    });
    // A run opened for chat shows its whole history (not while another one trains).
    connect(m_engine, &EngineController::runLoaded, this, [this](const RunSummary& r) {
        if (!m_engine->isTraining())
            showRunCurves(r.runDir);
    });
    connect(m_engine, &EngineController::trainingStarted, this, [this](const QString& dir, const TrainConfig&, qint64) {
        setCurrentRun(dir);
        refreshRunHistory();
    });
    // The tokenizer options set in the Corpus tab are the ones training uses.
    connect(m_engine, &EngineController::corpusLoaded, this,
        [this](const CorpusSummary& s) { m_base.tokenizer = s.request.tokenizer; });
    connect(m_engine, &EngineController::stepDone, m_plot, &LivePlot::addStep);
    connect(m_engine, &EngineController::epochDone, m_plot, &LivePlot::addEpoch);
    connect(m_engine, &EngineController::progress, this, [this](const TrainProgress& p) {
        m_progress->setRange(0, static_cast<int>(std::min<int64_t>(p.totalSteps, INT32_MAX)));
        m_progress->setValue(static_cast<int>(std::min<int64_t>(p.step, INT32_MAX)));
        m_plot->setStepsPerEpoch(static_cast<double>(p.totalSteps) / std::max(1, p.epochs));
        m_eta->setText(tr("epoch %1/%2 · step %3/%4 · elapsed %5 · ETA %6")
                           .arg(p.epoch + 1)
                           .arg(p.epochs)
                           .arg(p.step)
                           .arg(p.totalSteps)
                           .arg(duration(p.elapsedSeconds), duration(p.etaSeconds)));
    });
    // A failed training ends with an empty result ("stopped after 0 epoch(s)" although epochs
    // were saved): its line says the failure instead, which the status bar shows only a while.
    connect(m_engine, &EngineController::failed, this, [this](const QString& message, EngineController::Job job) {
        if (job == EngineController::Job::Training)
            m_failure = message;
    });
    connect(m_engine, &EngineController::trainingFinished, this, [this](const TrainResult& r, const QString& dir) {
        setRunning(false);
        if (!dir.isEmpty() && !r.runDir.empty())
            m_currentRun = dir; // the run folder was moved while training: Resume goes to where it is
        m_eta->setText(m_failure.isEmpty() ? QString::fromStdString(describe(r)) : tr("failed: %1").arg(m_failure));
        m_eta->setToolTip(m_failure);
        m_failure.clear();
        refreshRunHistory();
    });
    connect(m_runs, &QListWidget::itemChanged, this, [this](QListWidgetItem* item) {
        const QString dir = item->data(Qt::UserRole).toString();
        if (item->checkState() == Qt::Checked) {
            const auto history = readRunHistory(dir.toStdString());
            m_plot->setOverlay(item->text(), history);
        } else {
            m_plot->setOverlay(item->text(), {});
        }
    });
    connect(m_runs, &QListWidget::currentItemChanged, this, [this](QListWidgetItem* item) {
        if (item && !m_engine->isTraining())
            m_currentRun = item->data(Qt::UserRole).toString();
        m_resume->setEnabled(!m_engine->isTraining() && !m_currentRun.isEmpty());
    });
    connect(m_runs, &QListWidget::itemDoubleClicked, this, [this](QListWidgetItem* item) {
        m_currentRun = item->data(Qt::UserRole).toString();
        m_engine->loadRun(m_currentRun);
    });

    m_preset->setCurrentIndex(1);
    applyPreset("quick");
    setRunning(false);
}

void TrainView::applyPreset(const QString& name)
{
    TrainConfig c = preset(name.toStdString());
    c.device = config().device;
    c.precision = config().precision;
    setConfig(c);
}

TrainConfig TrainView::config() const
{
    TrainConfig c = m_base;
    c.preset = m_preset->currentData().toString().toStdString();
    c.epochs = m_epochs->value();
    c.batchSize = m_batch->value();
    c.learningRate = m_lr->value();
    c.optimizer = *parseOptimizer(m_optimizer->currentText().toStdString());
    c.model.embedDim = m_embed->value();
    c.model.hidden = m_hidden->value();
    c.model.layers = m_layers->value();
    c.model.dropout = m_dropout->value();
    c.model.attention = m_attention->isChecked();
    c.model.sharedEmbedding = m_shared->isChecked();
    c.teacherForcing = m_teacher->value();
    c.clipNorm = m_clip->value();
    c.patience = m_patience->value();
    c.validationFraction = m_valFraction->value();
    c.seed = static_cast<uint64_t>(m_seed->value());
    c.device = m_device->currentData().toString().isEmpty() ? "cpu" : m_device->currentData().toString().toStdString();
    c.threads = m_threads->value();
    c.precision = parsePrecision(m_precision->currentData().toString().toStdString()).value_or(Precision::FP32);
    c.tf32 = m_tf32->isChecked() && c.precision == Precision::FP32 && c.device.rfind("cuda", 0) == 0;
    return c;
}

void TrainView::setConfig(const TrainConfig& c)
{
    m_base = c;
    const int presetIndex = m_preset->findData(QString::fromStdString(c.preset));
    if (presetIndex >= 0 && presetIndex != m_preset->currentIndex()) {
        const QSignalBlocker block(m_preset);
        m_preset->setCurrentIndex(presetIndex);
    }
    m_epochs->setValue(c.epochs);
    m_batch->setValue(c.batchSize);
    m_lr->setValue(c.learningRate);
    m_optimizer->setCurrentText(QString::fromStdString(optimizerName(c.optimizer)));
    m_embed->setValue(c.model.embedDim);
    m_hidden->setValue(c.model.hidden);
    m_layers->setValue(c.model.layers);
    m_dropout->setValue(c.model.dropout);
    m_attention->setChecked(c.model.attention);
    m_shared->setChecked(c.model.sharedEmbedding);
    m_teacher->setValue(c.teacherForcing);
    m_clip->setValue(c.clipNorm);
    m_patience->setValue(c.patience);
    m_valFraction->setValue(c.validationFraction);
    m_seed->setValue(static_cast<int>(c.seed));
    const int d = m_device->findData(QString::fromStdString(c.device));
    if (d >= 0)
        m_device->setCurrentIndex(d);
    else
        m_wantedDevice = QString::fromStdString(c.device); // devices not probed yet: chosen when they are
    if (c.threads > 0)
        m_threads->setValue(c.threads);
    const int p = m_precision->findData(QString::fromStdString(precisionName(c.precision)));
    if (p >= 0 && m_precision->model()->flags(m_precision->model()->index(p, 0)) & Qt::ItemIsEnabled)
        m_precision->setCurrentIndex(p);
    m_tf32->setChecked(c.tf32);
}

void TrainView::fillDevices()
{
    const QString wanted = m_device->currentData().toString();
    const QSignalBlocker block(m_device);
    m_device->clear();
    auto* model = qobject_cast<QStandardItemModel*>(m_device->model());
    bool anyCuda = false;
    for (const auto& d : m_engine->devices()) {
        const double gib = static_cast<double>(d.memoryBytes) / (1 << 30);
        if (d.id == "cpu") {
            m_device->addItem(tr("CPU — %1 (%2 threads, %3 GiB)")
                                  .arg(QString::fromStdString(d.name))
                                  .arg(d.threads)
                                  .arg(gib, 0, 'f', 0),
                "cpu");
        } else {
            anyCuda = true;
            m_device->addItem(tr("%1 — %2 (%3 GiB)")
                                  .arg(QString::fromStdString(d.id), QString::fromStdString(d.name))
                                  .arg(gib, 0, 'f', 1),
                QString::fromStdString(d.id));
        }
    }
    if (!anyCuda) {
        m_device->addItem(tr("CUDA GPU — none available"), QString());
        auto* item = model->item(m_device->count() - 1);
        item->setEnabled(false);
        item->setToolTip(tr("This build can use CUDA, but no CUDA device or driver was found on this machine."));
    }
    // The device asked for (settings, or the choice before a re-probe) if it is here; else the CPU
    // — never the greyed "none available" entry.
    const QString ask = !m_wantedDevice.isEmpty() ? m_wantedDevice : wanted;
    const int i = ask.isEmpty() ? -1 : m_device->findData(ask);
    m_device->setCurrentIndex(i >= 0 ? i : std::max(0, m_device->findData(QStringLiteral("cpu"))));
    m_wantedDevice.clear();
    m_deviceNote->setText(anyCuda ? tr("CUDA devices found: pick one above.")
                                  : tr("No CUDA GPU on this machine: training runs on the CPU. CUDA entries appear "
                                       "here when a GPU and driver are present."));
    updatePrecisions();
}

void TrainView::updatePrecisions()
{
    const QString id = m_device->currentData().toString();
    auto* model = qobject_cast<QStandardItemModel*>(m_precision->model());
    QStringList reasons;
    for (const auto& d : m_engine->devices()) {
        if (QString::fromStdString(d.id) != id)
            continue;
        for (const auto& s : d.precisions) {
            const int row = m_precision->findData(QString::fromStdString(precisionName(s.precision)));
            auto* item = model->item(row);
            item->setEnabled(s.supported);
            item->setToolTip(s.supported ? tr("supported on %1").arg(id)
                        + (s.reason.empty() ? QString() : ": " + QString::fromStdString(s.reason))
                                         : QString::fromStdString(s.reason));
            if (!s.supported)
                reasons << QString::fromStdString(precisionName(s.precision) + ": " + s.reason);
        }
    }
    if (!(model->item(m_precision->currentIndex())->flags() & Qt::ItemIsEnabled))
        m_precision->setCurrentIndex(0);
    m_threads->setEnabled(id == "cpu");
    updateTf32();
    if (!reasons.isEmpty())
        m_precision->setToolTip(tr("Not available here — %1").arg(reasons.join("; ")));
}

void TrainView::updateTf32()
{
    m_tf32->setEnabled(!m_running && m_device->currentData().toString().startsWith("cuda")
        && m_precision->currentData().toString() == "fp32");
}

QString TrainView::progressText() const
{
    return m_eta->text();
}

void TrainView::setRunsDir(const QString& dir)
{
    m_runsDir = dir;
    QDir().mkpath(dir);
    refreshRunHistory();
}

void TrainView::setCurrentRun(const QString& dir)
{
    m_currentRun = dir;
    for (int i = 0; i < m_runs->count(); ++i)
        if (m_runs->item(i)->data(Qt::UserRole).toString() == dir)
            m_runs->setCurrentRow(i);
}

void TrainView::refreshRunHistory()
{
    QSet<QString> checked;
    for (int i = 0; i < m_runs->count(); ++i)
        if (m_runs->item(i)->checkState() == Qt::Checked)
            checked << m_runs->item(i)->data(Qt::UserRole).toString();
    const QSignalBlocker block(m_runs);
    m_runs->clear();
    for (const RunInfo& run : listRuns(m_runsDir.toStdString())) {
        const QString path = QString::fromStdString(run.dir);
        auto* item = new QListWidgetItem(QString::fromStdString(run.name), m_runs);
        item->setData(Qt::UserRole, path);
        item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
        item->setCheckState(checked.contains(path) ? Qt::Checked : Qt::Unchecked);
        if (path == m_currentRun)
            m_runs->setCurrentItem(item);
    }
    m_resume->setEnabled(!m_engine->isTraining() && !m_currentRun.isEmpty());
}

void TrainView::setRunning(bool running)
{
    m_running = running;
    m_train->setEnabled(!running && m_haveCorpus);
    m_train->setToolTip(m_haveCorpus ? tr("Train a new run on the loaded corpus (Ctrl+T)")
                                     : tr("Load a corpus first (Corpus tab, Ctrl+O)"));
    m_stop->setEnabled(running);
    m_resume->setEnabled(!running && !m_currentRun.isEmpty());
    // The form describes the run being trained: locked until it stops.
    for (QWidget* w : std::initializer_list<QWidget*> { m_preset, m_epochs, m_batch, m_lr, m_optimizer, m_embed,
             m_hidden, m_layers, m_dropout, m_attention, m_shared, m_teacher, m_clip, m_patience, m_valFraction, m_seed,
             m_device, m_threads, m_precision, m_tf32 })
        w->setEnabled(!running);
    if (!running)
        updatePrecisions(); // the threads box is for the CPU only
}

void TrainView::startTraining()
{
    if (m_engine->isTraining())
        return;
    if (!m_haveCorpus) {
        Q_EMIT status(tr("Load a corpus before training (Corpus tab, Ctrl+O)."));
        return;
    }
    if (m_engine->isLoadingCorpus()) { // it would train on the corpus and tokenizer of before
        Q_EMIT status(tr("The corpus is still loading: click Train once it is loaded."));
        return;
    }
    TrainConfig cfg = config();
    try {
        validate(cfg);
    } catch (const std::exception& e) {
        Q_EMIT status(QString::fromStdString(e.what()));
        return;
    }
    const QString dir = QString::fromStdString(newRunDir(m_runsDir.toStdString(), cfg.preset));
    m_plot->clear();
    m_eta->setText(tr("starting…"));
    setRunning(true);
    m_engine->startTraining(cfg, dir);
}

void TrainView::stopTraining()
{
    m_eta->setText(tr("stopping after this batch…"));
    m_engine->stop();
}

void TrainView::showRunCurves(const QString& runDir)
{
    m_plot->clear();
    const std::string dir = runDir.toStdString();
    const auto steps = readRunSteps(dir);
    const auto epochs = readRunHistory(dir);
    if (!epochs.empty() && epochs.front().step > 0)
        m_plot->setStepsPerEpoch(static_cast<double>(epochs.front().step));
    for (const auto& m : steps)
        m_plot->addStep(m);
    for (const auto& m : epochs)
        m_plot->addEpoch(m);
}

void TrainView::resumeTraining()
{
    if (m_engine->isTraining() || m_currentRun.isEmpty())
        return;
    showRunCurves(m_currentRun); // the whole run so far; the resumed steps continue it
    setRunning(true);
    m_eta->setText(tr("resuming %1…").arg(QFileInfo(m_currentRun).fileName()));
    // Where it runs is what the device box shows (as for Train); what fixes the run's course stays.
    const TrainConfig form = config();
    ResumeChanges changes;
    changes.epochs = m_epochs->value();
    changes.device = form.device;
    changes.threads = form.threads;
    changes.tf32 = form.tf32;
    m_engine->resume(m_currentRun, changes);
}
