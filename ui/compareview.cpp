#include "compareview.h"

#include "chatbench/error.h"
#include "enginecontroller.h"
#include "exportfile.h"
#include "shown.h"
#include "plotaxes.h"
#include "qcp.h"

#include <QBuffer>
#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDirIterator>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPainter>
#include <QPdfWriter>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <map>

using namespace chatbench;

namespace {

const QColor kPalette[] = { QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44), QColor(214, 39, 40),
    QColor(148, 103, 189), QColor(140, 86, 75), QColor(227, 119, 194), QColor(127, 127, 127) };

QColor colour(int i)
{
    return kPalette[i % 8];
}

QCustomPlot* makeChart(const QString& title, const QString& x, const QString& y)
{
    auto* p = new QCustomPlot;
    p->setMinimumSize(320, 300); // below this the legend leaves no room for the data: the charts scroll
    p->plotLayout()->insertRow(0);
    auto* t = new QCPTextElement(p, title, QFont(p->font().family(), 9, QFont::Bold));
    p->plotLayout()->addElement(0, 0, t);
    p->xAxis->setLabel(x);
    p->yAxis->setLabel(y);
    p->legend->setFont(QFont(p->font().family(), 7));
    plotaxes::legendAbove(p, 2, 200);
    p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    return p;
}

// A report's label as lists, legends and notes show it (a U+202E in one label reversed the text
// after it, another report's label included; a 4 KiB label pushed the charts out of view).
QString shownLabel(const std::string& label)
{
    return shownText(label, 80);
}

QString groupName(const QString& workload, const CompareView::Source& s, const BenchRow& r)
{
    QString g = QString("%1 %2").arg(
        QString::fromStdString(r.device), QString::fromStdString(benchPrecisionName(r.precision)));
    if (r.threads > 0 && r.device == "cpu")
        g += QString(" %1t").arg(r.threads);
    return workload + " · " + s.label + " · " + g;
}

QList<int> parseInts(const QString& text, bool* ok)
{
    QList<int> out;
    *ok = true;
    for (const QString& part : text.split(',', Qt::SkipEmptyParts)) {
        bool good = false;
        const int v = part.trimmed().toInt(&good);
        if (!good || v < 0) {
            *ok = false;
            return {};
        }
        out << v;
    }
    return out;
}

} // namespace

CompareView::CompareView(EngineController* engine, QWidget* parent)
    : QWidget(parent)
    , m_engine(engine)
{
    // What to run here.
    auto* runBox = new QGroupBox(tr("Benchmark this machine"));
    auto* form = new QFormLayout(runBox);
    m_deviceArea = new QWidget;
    new QVBoxLayout(m_deviceArea);
    m_deviceArea->layout()->setContentsMargins(0, 0, 0, 0);
    form->addRow(tr("Devices"), m_deviceArea);
    auto* precisions = new QHBoxLayout;
    for (const std::string& name : benchPrecisionNames()) {
        const QString p = QString::fromStdString(name);
        auto* b = new QCheckBox(p);
        b->setObjectName(p);
        b->setChecked(name == benchPrecisionName(BenchPrecision::FP32));
        b->setToolTip(
            name == "tf32" ? tr("Time in TF32 (CUDA only: fp32 storage, tensor-core maths)") : tr("Time in %1").arg(p));
        m_precisionBoxes << b;
        precisions->addWidget(b);
    }
    form->addRow(tr("Precision"), precisions);
    m_preset = new QComboBox;
    for (const auto& name : presetNames())
        m_preset->addItem(QString::fromStdString(name));
    m_preset->setToolTip(tr("The preset's model sizes, or those of the run open for chat (an imported Keras model, "
                            "say)"));
    form->addRow(tr("Model"), m_preset);
    m_batches = new QLineEdit("1,16,64");
    m_batches->setToolTip(tr("Batch sizes, comma-separated"));
    form->addRow(tr("Batch sizes"), m_batches);
    m_threads = new QLineEdit("0");
    m_threads->setToolTip(tr("CPU thread counts to sweep, comma-separated; 0 = the default"));
    form->addRow(tr("CPU threads"), m_threads);
    m_repeats = new QSpinBox;
    m_repeats->setRange(1, 100);
    m_repeats->setValue(5);
    m_repeats->setToolTip(tr("Timed repetitions per measurement: the charts show their median and p10–p90"));
    form->addRow(tr("Repetitions"), m_repeats);
    m_raceEpochs = new QSpinBox;
    m_raceEpochs->setRange(0, 1000);
    m_raceEpochs->setValue(10);
    m_raceEpochs->setToolTip(tr("Train the same configuration this many epochs on each device (0: no race)"));
    form->addRow(tr("Race epochs"), m_raceEpochs);
    m_run = new QPushButton(tr("Run benchmark"));
    m_run->setToolTip(tr("Time training and replies on the ticked devices and precisions, in the background"));
    m_cancel = new QPushButton(tr("Cancel"));
    m_cancel->setToolTip(tr("Stop the benchmark after the current measurement"));
    m_cancel->setEnabled(false);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_run);
    buttons->addWidget(m_cancel);
    form->addRow(buttons);
    m_progress = new QProgressBar;
    m_progress->setRange(0, 1);
    m_progress->setValue(0);
    form->addRow(m_progress);
    m_progressLabel = new QLabel(tr("idle"));
    m_progressLabel->setWordWrap(true);
    form->addRow(m_progressLabel);

    auto* reportsBox = new QGroupBox(tr("Reports"));
    auto* reportsLayout = new QVBoxLayout(reportsBox);
    reportsLayout->addWidget(new QLabel(tr("Compared:")));
    m_reports = new QListWidget;
    m_reports->setToolTip(tr("The reports in the charts; select one to export or remove it"));
    m_reports->setMinimumHeight(48); // three rows: the lists give way first in a short window
    reportsLayout->addWidget(m_reports, 1);
    auto* savedLabel = new QLabel(tr("Saved in the project (double-click to add):"));
    reportsLayout->addWidget(savedLabel);
    m_saved = new QListWidget;
    m_saved->setObjectName("savedReports");
    m_saved->setToolTip(tr("Reports saved in bench/reports, from this and other machines"));
    m_saved->setMinimumHeight(48);
    reportsLayout->addWidget(m_saved, 1);
    auto* importButton = new QPushButton(tr("Import…"));
    importButton->setToolTip(tr("Add a report file made by `chatbench-cli bench --out` on any machine"));
    auto* exportButton = new QPushButton(tr("Export…"));
    exportButton->setToolTip(tr("Save the selected report (or the last local one) as JSON"));
    auto* removeButton = new QPushButton(tr("Remove"));
    removeButton->setObjectName("removeReport");
    removeButton->setToolTip(tr("Take the selected report out of the charts"));
    auto* reportButtons = new QHBoxLayout;
    reportButtons->addWidget(importButton);
    reportButtons->addWidget(exportButton);
    reportButtons->addWidget(removeButton);
    reportsLayout->addLayout(reportButtons);
    auto* chartsPng = new QPushButton(tr("Charts → PNG"));
    chartsPng->setToolTip(tr("Save the four charts as one PNG image"));
    auto* chartsPdf = new QPushButton(tr("Charts → PDF"));
    chartsPdf->setToolTip(tr("Save the four charts as a PDF page"));
    auto* chartButtons = new QHBoxLayout;
    chartButtons->addWidget(chartsPng);
    chartButtons->addWidget(chartsPdf);
    reportsLayout->addLayout(chartButtons);

    m_error = new QLabel;
    m_error->setWordWrap(true);
    m_error->setStyleSheet(
        "QLabel { background: #fde2e1; color: #8a1c13; border: 1px solid #e8a39d; padding: 6px; border-radius: 4px; }");
    m_error->hide();

    auto* left = new QVBoxLayout;
    left->addWidget(runBox);
    left->addWidget(m_error);
    left->addWidget(reportsBox, 1);
    auto* leftWidget = new QWidget;
    leftWidget->setLayout(left);
    leftWidget->setMaximumWidth(340);

    // Short titles (they do not wrap); the whole story in the tooltips.
    m_epoch = makeChart(tr("Epoch time"), QString(), tr("seconds per epoch"));
    m_epoch->setToolTip(tr("Median time of one training epoch, with p10–p90 whiskers; × is the speed-up against the "
                           "slowest bar of the same workload and batch"));
    m_throughput = makeChart(tr("Training throughput"), tr("batch size"), tr("tokens/s (train step)"));
    m_throughput->setToolTip(tr("Target tokens per second of one training step, against the batch size"));
    m_throughput->xAxis->setScaleType(QCPAxis::stLogarithmic);
    QSharedPointer<QCPAxisTickerLog> log2(new QCPAxisTickerLog);
    log2->setLogBase(2);
    m_throughput->xAxis->setTicker(log2);
    m_latency = makeChart(
        tr("Replies: latency vs throughput"), tr("batch-1 reply latency (ms)"), tr("best reply throughput (tokens/s)"));
    m_latency->setToolTip(tr("Real time: how long one reply takes alone (left is better) against the most reply "
                             "tokens per second in a batch (up is better)"));
    m_race = makeChart(tr("Race: loss against time"), tr("wall-clock seconds"), tr("training loss"));
    m_race->setToolTip(tr("The same configuration trained on each device: who gets to a low loss first"));
    m_workloads = new QLabel;
    m_workloads->setObjectName("workloadNote");
    m_workloads->setWordWrap(true);
    m_workloads->setTextFormat(Qt::RichText);
    QFont small = m_workloads->font();
    small.setPointSizeF(small.pointSizeF() * 0.9);
    m_workloads->setFont(small);
    m_workloads->hide();
    m_charts = new QWidget;
    auto* grid = new QGridLayout(m_charts);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->addWidget(m_workloads, 0, 0, 1, 2);
    grid->addWidget(m_epoch, 1, 0);
    grid->addWidget(m_throughput, 1, 1);
    grid->addWidget(m_latency, 2, 0);
    grid->addWidget(m_race, 2, 1);
    grid->setRowStretch(1, 1);
    grid->setRowStretch(2, 1);

    m_table = new QTableWidget;
    m_table->setColumnCount(13);
    m_table->setHorizontalHeaderLabels(
        { tr("report"), tr("workload"), tr("device"), tr("prec"), tr("threads"), tr("batch"), tr("unit"),
            tr("median ms"), tr("tokens/s"), tr("GFLOP/s"), tr("% GEMM"), tr("peak MiB"), tr("energy J") });
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->verticalHeader()->hide();
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setSortingEnabled(true);

    auto* chartsScroll = new QScrollArea;
    chartsScroll->setWidget(m_charts);
    chartsScroll->setWidgetResizable(true);
    chartsScroll->setFrameShape(QFrame::NoFrame);
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(chartsScroll);
    split->addWidget(m_table);
    split->setStretchFactor(0, 4);
    split->setStretchFactor(1, 1);

    auto* layout = new QHBoxLayout(this);
    layout->addWidget(leftWidget);
    layout->addWidget(split, 1);

    connect(m_run, &QPushButton::clicked, this, &CompareView::runLocal);
    connect(m_cancel, &QPushButton::clicked, m_engine, &EngineController::stop);
    connect(importButton, &QPushButton::clicked, this, [this] {
        const QStringList files
            = QFileDialog::getOpenFileNames(this, tr("Import benchmark reports"), m_reportsDir, tr("Reports (*.json)"));
        for (const QString& f : files)
            importReport(f);
    });
    connect(exportButton, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getSaveFileName(
            this, tr("Export the selected report"), "bench-report.json", tr("Reports (*.json)"));
        QString why;
        if (!path.isEmpty())
            Q_EMIT status(exportReport(path, &why) ? tr("report written to %1").arg(path) : why);
    });
    connect(removeButton, &QPushButton::clicked, this, [this] {
        const int row = m_reports->currentRow();
        if (row >= 0 && row < m_sources.size()) {
            m_sources.removeAt(row);
            refresh();
        }
    });
    for (const QString& kind : { QString("png"), QString("pdf") }) {
        connect(kind == "png" ? chartsPng : chartsPdf, &QPushButton::clicked, this, [this, kind] {
            const QString path = QFileDialog::getSaveFileName(
                this, tr("Export charts"), "compare." + kind, kind.toUpper() + " (*." + kind + ")");
            QString why;
            if (!path.isEmpty())
                Q_EMIT status(exportCharts(path, &why) ? tr("charts written to %1").arg(path) : why);
        });
    }
    connect(m_saved, &QListWidget::itemDoubleClicked, this,
        [this](QListWidgetItem* item) { importReport(item->data(Qt::UserRole).toString()); });
    connect(m_engine, &EngineController::devicesReady, this, &CompareView::fillDevices);
    // The run open for chat can be timed at its own sizes (the timings depend on sizes, not weights).
    connect(m_engine, &EngineController::runLoaded, this, [this](const RunSummary& r) {
        const ModelConfig& m = r.config.model;
        const QString label = tr("open run: %1 (E=%2, H=%3, %4 layer(s))")
                                  .arg(QFileInfo(r.runDir).fileName())
                                  .arg(m.embedDim)
                                  .arg(m.hidden)
                                  .arg(m.layers);
        const QVariantList sizes { m.embedDim, m.hidden, m.layers };
        const int at = m_preset->findData(QStringLiteral("run"), Qt::UserRole + 1);
        if (at >= 0) {
            m_preset->setItemText(at, label);
            m_preset->setItemData(at, sizes);
        } else {
            m_preset->addItem(label, sizes);
            m_preset->setItemData(m_preset->count() - 1, QStringLiteral("run"), Qt::UserRole + 1);
        }
    });
    connect(m_engine, &EngineController::benchProgress, this, [this](const QString& what, int done, int total) {
        m_progress->setRange(0, std::max(1, total));
        m_progress->setValue(done);
        m_progressLabel->setText(tr("%1 (%2/%3)").arg(what).arg(done).arg(total));
    });
    connect(m_engine, &EngineController::benchFinished, this, [this](const BenchReport& r) {
        m_run->setEnabled(true);
        m_cancel->setEnabled(false);
        if (r.rows.empty() && r.races.empty()) {
            m_progressLabel->setText(tr("no results"));
            return;
        }
        addReport(tr("this machine %1").arg(QDateTime::currentDateTime().toString("HH:mm")), r, true);
        m_progressLabel->setText(
            tr("done: %1 timings%2")
                .arg(r.rows.size())
                .arg(r.notes.empty() ? QString() : tr(" — ") + QString::fromStdString(r.notes.back())));
    });
    connect(m_engine, &EngineController::failed, this, [this](const QString& message, EngineController::Job job) {
        if (job != EngineController::Job::Bench)
            return;
        m_error->setText(message);
        m_error->show();
        m_run->setEnabled(!m_engine->isBenchmarking());
        m_cancel->setEnabled(m_engine->isBenchmarking());
    });
}

void CompareView::fillDevices()
{
    qDeleteAll(m_deviceBoxes);
    m_deviceBoxes.clear();
    bool cuda = false;
    for (const auto& d : m_engine->devices()) {
        auto* b = new QCheckBox(QString("%1 — %2").arg(QString::fromStdString(d.id), QString::fromStdString(d.name)));
        b->setProperty("device", QString::fromStdString(d.id));
        b->setToolTip(tr("Benchmark on %1").arg(QString::fromStdString(d.id)));
        b->setChecked(true);
        cuda = cuda || d.id != "cpu";
        m_deviceBoxes << b;
        m_deviceArea->layout()->addWidget(b);
    }
    if (!cuda) {
        auto* b = new QCheckBox(tr("CUDA — no GPU here"));
        b->setEnabled(false);
        b->setToolTip(tr("Run `chatbench-cli bench` on a GPU server and import its report to compare."));
        m_deviceBoxes << b;
        m_deviceArea->layout()->addWidget(b);
    }
}

BenchConfig CompareView::config() const
{
    BenchConfig c;
    c.devices.clear();
    for (auto* b : m_deviceBoxes)
        if (b->isEnabled() && b->isChecked())
            c.devices.push_back(b->property("device").toString().toStdString());
    c.precisions.clear();
    for (auto* b : m_precisionBoxes)
        if (b->isChecked())
            c.precisions.push_back(*parseBenchPrecision(b->objectName().toStdString()));
    if (m_preset->currentData(Qt::UserRole + 1).toString() == "run") {
        const QVariantList sizes = m_preset->currentData().toList();
        c.preset = "seed"; // its training recipe, at the run's sizes
        c.embedDim = sizes.value(0).toInt();
        c.hidden = sizes.value(1).toInt();
        c.layers = sizes.value(2).toInt();
    } else {
        c.preset = m_preset->currentText().toStdString();
    }
    bool ok = false;
    c.batchSizes.clear();
    for (int v : parseInts(m_batches->text(), &ok))
        c.batchSizes.push_back(v);
    c.threads.clear();
    for (int v : parseInts(m_threads->text(), &ok))
        c.threads.push_back(v);
    if (c.threads.empty())
        c.threads = { 0 };
    c.repeats = m_repeats->value();
    c.raceEpochs = m_raceEpochs->value();
    return c;
}

void CompareView::setReportsDir(const QString& dir)
{
    m_reportsDir = dir;
    m_saved->clear();
    if (dir.isEmpty())
        return;
    QStringList files;
    QDirIterator it(dir, { "*.json" }, QDir::Files, QDirIterator::Subdirectories);
    while (it.hasNext())
        files << it.next();
    files.sort();
    for (const QString& path : files) {
        // Only files that read as reports (a folder may hold summaries and other JSON too).
        try {
            const BenchReport r = readBenchReport(path.toStdString());
            auto* item = new QListWidgetItem(
                QString("%1 — %2").arg(QDir(dir).relativeFilePath(path), shownLabel(r.label)), m_saved);
            item->setData(Qt::UserRole, path);
            item->setToolTip(QString::fromStdString(describeWorkload(r, 0)));
        } catch (const Error&) {
            continue;
        }
    }
}

void CompareView::setBatchSizes(const QString& list)
{
    m_batches->setText(list);
}

void CompareView::setThreads(const QString& list)
{
    m_threads->setText(list);
}

void CompareView::setRaceEpochs(int epochs)
{
    m_raceEpochs->setValue(epochs);
}

void CompareView::setRepeats(int repeats)
{
    m_repeats->setValue(repeats);
}

void CompareView::runLocal()
{
    bool ok = false;
    const QList<int> batches = parseInts(m_batches->text(), &ok);
    m_error->hide();
    const BenchConfig c = config();
    QString problem;
    if (!ok || batches.isEmpty() || batches.contains(0))
        problem = tr("Batch sizes: give positive whole numbers separated by commas, e.g. 1,16,64.");
    else if (const QList<int> threads = parseInts(m_threads->text(), &ok);
             !ok || std::any_of(threads.begin(), threads.end(), [](int t) { return t > 1024; }))
        problem = tr("CPU threads: give whole numbers from 0 to 1024 separated by commas (0 = default).");
    else if (c.devices.empty())
        problem = tr("Tick at least one device.");
    else if (c.precisions.empty())
        problem = tr("Tick at least one precision.");
    if (!problem.isEmpty()) {
        m_error->setText(problem);
        m_error->show();
        return;
    }
    m_run->setEnabled(false);
    m_cancel->setEnabled(true);
    m_progressLabel->setText(tr("starting…"));
    m_engine->runBench(c);
}

void CompareView::addReport(const QString& label, const BenchReport& report, bool local)
{
    m_sources.append({ shownLabel(label.toStdString()), report, local });
    refresh();
}

bool CompareView::importReport(const QString& path)
{
    try {
        const BenchReport r = readBenchReport(path.toStdString());
        const QString label
            = QString::fromStdString(r.label.empty() ? QFileInfo(path).baseName().toStdString() : r.label);
        addReport(label, r, false);
        m_error->hide();
        Q_EMIT status(tr("imported %1 (%2 timings)").arg(QFileInfo(path).fileName()).arg(r.rows.size()));
        return true;
    } catch (const Error& e) {
        m_error->setText(tr("Could not import the report:\n%1").arg(QString::fromStdString(e.what())));
        m_error->show();
        return false;
    }
}

bool CompareView::exportReport(const QString& path, QString* why) const
{
    const int row = m_reports->currentRow();
    int index = row >= 0 ? row : -1;
    if (index < 0)
        for (int i = static_cast<int>(m_sources.size()) - 1; i >= 0 && index < 0; --i)
            if (m_sources[i].local)
                index = i;
    if (index < 0 || index >= m_sources.size()) {
        if (why)
            *why = tr("no report to export: select one in the list");
        return false;
    }
    return writeExport(path, QByteArray::fromStdString(toJson(m_sources[index].report)), why);
}

bool CompareView::exportCharts(const QString& path, QString* why)
{
    // Drawn in memory, then written whole (a pipe there is refused instead of waited on).
    QBuffer buffer;
    buffer.open(QIODevice::WriteOnly);
    bool drawn = false;
    const QPixmap pix = m_charts->grab();
    if (path.endsWith(".pdf", Qt::CaseInsensitive)) {
        QPdfWriter pdf(&buffer);
        pdf.setPageSize(QPageSize(QPageSize::A4));
        pdf.setPageOrientation(QPageLayout::Landscape);
        QPainter p(&pdf);
        if (p.isActive()) {
            const QRect page = p.viewport();
            const QSize size = pix.size().scaled(page.size(), Qt::KeepAspectRatio);
            p.drawPixmap(QRect(QPoint(0, 0), size), pix);
            drawn = p.end();
        }
    } else {
        drawn = pix.save(&buffer, "PNG");
    }
    if (!drawn) {
        if (why)
            *why = tr("could not draw the charts");
        return false;
    }
    return writeExport(path, buffer.data(), why);
}

void CompareView::refresh()
{
    // Workloads: reports of the same corpus and model share an id; only their rows are compared
    // as ratios (speed-ups within one workload and batch).
    QList<int> workloadOf; // by source index
    QList<const BenchReport*> workloads; // a representative report per workload
    for (const auto& s : m_sources) {
        int w = -1;
        for (int i = 0; i < workloads.size() && w < 0; ++i)
            if (sameWorkload(*workloads[i], 0, s.report, 0))
                w = i;
        if (w < 0) {
            w = static_cast<int>(workloads.size());
            workloads << &s.report;
        }
        workloadOf << w;
    }
    m_workloadIds.clear();
    for (int w : workloadOf)
        m_workloadIds << QString("W%1").arg(w + 1);
    auto wid = [&](int source) { return m_workloadIds.value(source); };

    // Reports list.
    m_reports->clear();
    for (int i = 0; i < m_sources.size(); ++i) {
        const auto& s = m_sources[i];
        auto* item = new QListWidgetItem(QString("%1%2 — %3 — %4 timings")
                                             .arg(s.label, s.local ? tr(" (local)") : QString(), wid(i))
                                             .arg(s.report.rows.size()),
            m_reports);
        item->setToolTip(QString::fromStdString(describeWorkload(s.report, 0)));
    }

    // What is compared with what, and the one-device hint.
    QStringList lines;
    for (int w = 0; w < workloads.size(); ++w) {
        QStringList names;
        for (int i = 0; i < m_sources.size(); ++i)
            if (workloadOf[i] == w)
                names << m_sources[i].label.toHtmlEscaped();
        lines << tr("<b>W%1</b> = %2 — %3")
                     .arg(w + 1)
                     .arg(QString::fromStdString(describeWorkload(*workloads[w], 0)).toHtmlEscaped(), names.join(", "));
    }
    bool otherDevice = false;
    for (const auto& s : m_sources)
        for (const auto& x : s.report.rows)
            otherDevice = otherDevice || x.device != "cpu";
    QString note = lines.join("<br>");
    if (workloads.size() > 1)
        note += tr("<br>These reports timed <b>different workloads</b>: speed-ups (×) compare bars of the same "
                   "workload and batch only, and lines of different workloads are not comparable.");
    if (!m_sources.isEmpty() && !otherDevice)
        note += tr("<br>Only CPU rows so far. For CPU against GPU, add a saved GPU report from the list below "
                   "(gpu-….json), or run <tt>chatbench-cli bench --device cpu,cuda:0 --precision fp32,tf32,bf16,fp16 "
                   "--out gpu.json</tt> on a machine with a CUDA GPU (on the same corpus and preset) and import the "
                   "report here.");
    m_workloads->setText(note);
    m_workloads->setVisible(!note.isEmpty());
    m_workloads->setStyleSheet(workloads.size() > 1
            ? "QLabel { background: #fff4d6; color: #6b4a00; border: 1px solid #e6c97a; padding: 4px; }"
            : "QLabel { background: #f3f6fb; color: #333; border: 1px solid #cfd6e3; padding: 4px; }");

    // Table.
    m_table->setSortingEnabled(false);
    int rows = 0;
    for (const auto& s : m_sources)
        rows += static_cast<int>(s.report.rows.size());
    m_table->setRowCount(rows);
    int r = 0;
    for (int si = 0; si < m_sources.size(); ++si) {
        const auto& s = m_sources[si];
        for (const auto& x : s.report.rows) {
            auto num = [](double v, int digits) {
                auto* item = new QTableWidgetItem;
                item->setData(Qt::DisplayRole, QString::number(v, 'f', digits).toDouble());
                return item;
            };
            auto* workload = new QTableWidgetItem(wid(si));
            workload->setToolTip(QString::fromStdString(describeWorkload(s.report, x.batch)));
            m_table->setItem(r, 0, new QTableWidgetItem(s.label));
            m_table->setItem(r, 1, workload);
            m_table->setItem(r, 2, new QTableWidgetItem(QString::fromStdString(x.device)));
            m_table->setItem(r, 3, new QTableWidgetItem(QString::fromStdString(precisionLabel(x)))); // as it ran
            m_table->setItem(r, 4, num(x.threads, 0));
            m_table->setItem(r, 5, num(x.batch, 0));
            m_table->setItem(r, 6, new QTableWidgetItem(QString::fromStdString(benchUnitName(x.unit))));
            m_table->setItem(r, 7, num(1e3 * x.time.median, 3));
            m_table->setItem(r, 8, num(x.tokensPerSecond, 0));
            m_table->setItem(r, 9, num(x.gflops, 2));
            m_table->setItem(r, 10, num(100 * x.gemmFraction, 1));
            m_table->setItem(r, 11, num(static_cast<double>(x.peakMemoryBytes) / (1 << 20), 0));
            m_table->setItem(r, 12, x.energyJoules >= 0 ? num(x.energyJoules, 3) : new QTableWidgetItem(tr("n/a")));
            ++r;
        }
    }
    m_table->setSortingEnabled(true);

    // 1. Epoch time bars with p10–p90, clustered by workload and batch; the speed-up of each bar
    // is against the slowest bar of its own cluster.
    m_epoch->clearPlottables();
    m_epoch->clearItems();
    struct Bar {
        int source;
        const BenchRow* row;
    };
    struct Cluster {
        int workload;
        int batch;
        std::vector<Bar> bars;
    };
    std::vector<Cluster> clusters;
    for (int si = 0; si < m_sources.size(); ++si)
        for (const auto& x : m_sources[si].report.rows) {
            if (x.unit != BenchUnit::Epoch)
                continue;
            auto it = std::find_if(clusters.begin(), clusters.end(),
                [&](const Cluster& c) { return c.workload == workloadOf[si] && c.batch == x.batch; });
            if (it == clusters.end())
                it = clusters.insert(clusters.end(), Cluster { workloadOf[si], x.batch, {} });
            it->bars.push_back({ si, &x });
        }
    QSharedPointer<QCPAxisTickerText> ticks(new QCPAxisTickerText);
    std::map<int, QVector<double>> barKeys, barData, errLo, errHi; // by source
    double pos = 0, top = 0;
    for (const Cluster& c : clusters) {
        double slowest = 0;
        for (const Bar& b : c.bars)
            slowest = std::max(slowest, b.row->time.median);
        const double first = pos;
        for (const Bar& b : c.bars) {
            const BenchRow& x = *b.row;
            barKeys[b.source] << pos;
            barData[b.source] << x.time.median;
            errLo[b.source] << x.time.median - x.time.p10;
            errHi[b.source] << x.time.p90 - x.time.median;
            QString tick = QString("%1 %2").arg(
                QString::fromStdString(x.device), QString::fromStdString(benchPrecisionName(x.precision)));
            if (x.device == "cpu" && x.threads > 0)
                tick += QString("\n%1t").arg(x.threads);
            ticks->addTick(pos, tick);
            if (c.bars.size() > 1) {
                auto* label = new QCPItemText(m_epoch);
                label->position->setCoords(pos, x.time.p90);
                label->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
                label->setText(QString::fromUtf8("×%1").arg(slowest / x.time.median, 0, 'f', 2));
                label->setFont(QFont(font().family(), 8, QFont::Bold));
            }
            top = std::max(top, x.time.p90);
            pos += 1;
        }
        auto* name = new QCPItemText(m_epoch);
        name->setClipToAxisRect(true);
        name->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        name->position->setCoords((first + pos - 1) / 2, 0.02);
        name->setPositionAlignment(Qt::AlignHCenter | Qt::AlignTop);
        name->setText(tr("W%1, batch %2").arg(c.workload + 1).arg(c.batch));
        name->setFont(QFont(font().family(), 8));
        name->setColor(QColor(90, 90, 90));
        pos += 0.6; // a gap between clusters
    }
    for (const auto& [si, keys] : barKeys) {
        auto* bars = new QCPBars(m_epoch->xAxis, m_epoch->yAxis);
        bars->setName(m_sources[si].label + " (" + wid(si) + ")");
        bars->setBrush(colour(si));
        bars->setPen(Qt::NoPen);
        bars->setWidth(0.7);
        bars->setData(keys, barData[si]);
        auto* err = new QCPErrorBars(m_epoch->xAxis, m_epoch->yAxis);
        err->removeFromLegend();
        err->setDataPlottable(bars);
        err->setData(errLo[si], errHi[si]);
    }
    m_epoch->xAxis->setTicker(ticks);
    m_epoch->xAxis->setTickLabelFont(QFont(font().family(), 7)); // many bars share a narrow chart
    m_epoch->xAxis->setRange(-0.7, std::max(1.0, pos - 0.6) - 0.3);
    // Head room above the bars for the speed-up labels, and below for the cluster names.
    m_epoch->yAxis->setRange(top > 0 ? -top * 0.12 : 0, top > 0 ? top * 1.25 : 1);
    m_epoch->replot();

    // 2. Training tokens/s against batch size, one line per report/device/precision/threads.
    // 3. Batch-1 reply latency against the best batch-N reply throughput.
    m_throughput->clearGraphs();
    m_latency->clearGraphs();
    m_latency->clearItems();
    int gi = 0;
    QVector<double> tpX, tpY, latX, latY;
    for (int si = 0; si < m_sources.size(); ++si) {
        const auto& s = m_sources[si];
        std::map<QString, std::vector<const BenchRow*>> groups;
        for (const auto& x : s.report.rows)
            groups[groupName(wid(si), s, x)].push_back(&x);
        for (const auto& [name, rowsOf] : groups) {
            QVector<double> bx, by;
            double latency = -1, best = 0;
            for (const BenchRow* x : rowsOf) {
                if (x->unit == BenchUnit::TrainStep) {
                    bx << x->batch;
                    by << x->tokensPerSecond;
                } else if (x->unit == BenchUnit::ReplyLatency) {
                    latency = 1e3 * x->time.median;
                } else if (x->unit == BenchUnit::ReplyThroughput) {
                    best = std::max(best, x->tokensPerSecond);
                }
            }
            if (!bx.isEmpty()) {
                auto* g = m_throughput->addGraph();
                g->setName(name);
                g->setPen(QPen(colour(gi), 2));
                g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 6));
                g->setData(bx, by);
                tpX << bx;
                tpY << by;
            }
            if (latency > 0) {
                auto* g = m_latency->addGraph();
                g->setName(name);
                g->setLineStyle(QCPGraph::lsNone);
                g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, QPen(colour(gi)), QBrush(colour(gi)), 10));
                g->setData(QVector<double> { latency }, QVector<double> { best });
                latX << latency;
                latY << best;
            }
            ++gi;
        }
    }
    // Times and rates start at 0 (all data is positive); the far end gets a margin.
    plotaxes::fit(m_throughput->xAxis, plotaxes::span(tpX, false, /*positiveOnly=*/true), 0.1);
    plotaxes::fit(m_throughput->yAxis, plotaxes::merge(plotaxes::span(tpY), { 0, 0, true }));
    m_throughput->yAxis->setRangeLower(0);
    m_throughput->replot();
    plotaxes::fit(m_latency->xAxis, plotaxes::merge(plotaxes::span(latX), { 0, 0, true }), 0.1);
    plotaxes::fit(m_latency->yAxis, plotaxes::merge(plotaxes::span(latY), { 0, 0, true }), 0.1);
    m_latency->xAxis->setRangeLower(0);
    m_latency->yAxis->setRangeLower(0);
    m_latency->replot();

    // 4. The race.
    m_race->clearGraphs();
    int ri = 0;
    QVector<double> raceX, raceY;
    for (int si = 0; si < m_sources.size(); ++si) {
        const auto& s = m_sources[si];
        for (const auto& c : s.report.races) {
            QVector<double> x, y;
            for (const auto& p : c.points) {
                if (!std::isfinite(p.seconds) || !std::isfinite(p.loss))
                    continue;
                x << p.seconds;
                y << p.loss;
            }
            if (y.isEmpty())
                continue;
            auto* g = m_race->addGraph();
            g->setName(wid(si) + " · " + s.label + " · "
                + QString::fromStdString(c.device + " " + benchPrecisionName(c.precision)
                    + (c.device == "cpu" && c.threads > 0 ? " · " + std::to_string(c.threads) + " thr" : "")));
            g->setPen(QPen(colour(ri++), 2));
            g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 4));
            g->setData(x, y);
            raceX << x;
            raceY << y;
        }
    }
    plotaxes::fit(m_race->xAxis, plotaxes::merge(plotaxes::span(raceX), { 0, 0, true }), 0.03);
    m_race->xAxis->setRangeLower(0);
    plotaxes::fit(m_race->yAxis, plotaxes::span(raceY));
    m_race->replot();
}
