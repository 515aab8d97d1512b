#include "compareview.h"

#include "chatbench/error.h"
#include "enginecontroller.h"
#include "qcp.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QFile>
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
#include <QSaveFile>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

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
    p->setMinimumSize(320, 220);
    p->plotLayout()->insertRow(0);
    auto* t = new QCPTextElement(p, title, QFont(p->font().family(), 9, QFont::Bold));
    p->plotLayout()->addElement(0, 0, t);
    p->xAxis->setLabel(x);
    p->yAxis->setLabel(y);
    p->legend->setVisible(true);
    p->legend->setFont(QFont(p->font().family(), 7));
    p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    return p;
}

QString groupName(const CompareView::Source& s, const BenchRow& r)
{
    QString g = QString("%1 %2").arg(
        QString::fromStdString(r.device), QString::fromStdString(benchPrecisionName(r.precision)));
    if (r.threads > 0 && r.device == "cpu")
        g += QString(" %1t").arg(r.threads);
    return s.label + " · " + g;
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
    form->addRow(tr("Repetitions"), m_repeats);
    m_raceEpochs = new QSpinBox;
    m_raceEpochs->setRange(0, 1000);
    m_raceEpochs->setValue(10);
    m_raceEpochs->setToolTip(tr("Train the same configuration this many epochs on each device (0: no race)"));
    form->addRow(tr("Race epochs"), m_raceEpochs);
    m_run = new QPushButton(tr("Run benchmark"));
    m_cancel = new QPushButton(tr("Cancel"));
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
    m_reports = new QListWidget;
    reportsLayout->addWidget(m_reports);
    auto* importButton = new QPushButton(tr("Import…"));
    auto* exportButton = new QPushButton(tr("Export…"));
    auto* removeButton = new QPushButton(tr("Remove"));
    auto* reportButtons = new QHBoxLayout;
    reportButtons->addWidget(importButton);
    reportButtons->addWidget(exportButton);
    reportButtons->addWidget(removeButton);
    reportsLayout->addLayout(reportButtons);
    auto* chartsPng = new QPushButton(tr("Charts → PNG"));
    auto* chartsPdf = new QPushButton(tr("Charts → PDF"));
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

    m_epoch
        = makeChart(tr("Epoch time (median, p10–p90) — speed-up vs the slowest"), QString(), tr("seconds per epoch"));
    m_throughput = makeChart(tr("Training throughput vs batch size"), tr("batch size"), tr("tokens/s (train step)"));
    m_throughput->xAxis->setScaleType(QCPAxis::stLogarithmic);
    QSharedPointer<QCPAxisTickerLog> log2(new QCPAxisTickerLog);
    log2->setLogBase(2);
    m_throughput->xAxis->setTicker(log2);
    m_throughput->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
    m_latency = makeChart(tr("Real time: batch-1 reply latency vs batch-N reply throughput"),
        tr("batch-1 reply latency (ms)"), tr("best reply throughput (tokens/s)"));
    m_race = makeChart(
        tr("Race: the same configuration trained on each device"), tr("wall-clock seconds"), tr("training loss"));
    m_charts = new QWidget;
    auto* grid = new QGridLayout(m_charts);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->addWidget(m_epoch, 0, 0);
    grid->addWidget(m_throughput, 0, 1);
    grid->addWidget(m_latency, 1, 0);
    grid->addWidget(m_race, 1, 1);

    m_table = new QTableWidget;
    m_table->setColumnCount(12);
    m_table->setHorizontalHeaderLabels({ tr("report"), tr("device"), tr("prec"), tr("threads"), tr("batch"), tr("unit"),
        tr("median ms"), tr("tokens/s"), tr("GFLOP/s"), tr("% GEMM"), tr("peak MiB"), tr("energy J") });
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->verticalHeader()->hide();
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setSortingEnabled(true);

    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(m_charts);
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
            = QFileDialog::getOpenFileNames(this, tr("Import benchmark reports"), QString(), tr("Reports (*.json)"));
        for (const QString& f : files)
            importReport(f);
    });
    connect(exportButton, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getSaveFileName(
            this, tr("Export the selected report"), "bench-report.json", tr("Reports (*.json)"));
        if (!path.isEmpty())
            Q_EMIT status(
                exportReport(path) ? tr("report written to %1").arg(path) : tr("could not write %1").arg(path));
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
            if (!path.isEmpty())
                Q_EMIT status(
                    exportCharts(path) ? tr("charts written to %1").arg(path) : tr("could not write %1").arg(path));
        });
    }
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

void CompareView::setBatchSizes(const QString& list)
{
    m_batches->setText(list);
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
    else if (parseInts(m_threads->text(), &ok), !ok)
        problem = tr("CPU threads: give whole numbers separated by commas (0 = default).");
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
    m_sources.append({ label, report, local });
    refresh();
}

bool CompareView::importReport(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        m_error->setText(tr("%1: cannot open the file").arg(path));
        m_error->show();
        return false;
    }
    try {
        const BenchReport r = benchReportFromJson(f.readAll().toStdString(), path.toStdString());
        const QString label
            = QString::fromStdString(r.label.empty() ? QFileInfo(path).baseName().toStdString() : r.label);
        addReport(label, r, false);
        m_error->hide();
        Q_EMIT status(tr("imported %1 (%2 timings)").arg(path).arg(r.rows.size()));
        return true;
    } catch (const Error& e) {
        m_error->setText(tr("Could not import the report:\n%1").arg(QString::fromStdString(e.what())));
        m_error->show();
        return false;
    }
}

bool CompareView::exportReport(const QString& path) const
{
    const int row = m_reports->currentRow();
    int index = row >= 0 ? row : -1;
    if (index < 0)
        for (int i = static_cast<int>(m_sources.size()) - 1; i >= 0 && index < 0; --i)
            if (m_sources[i].local)
                index = i;
    if (index < 0 || index >= m_sources.size())
        return false;
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly))
        return false;
    f.write(QByteArray::fromStdString(toJson(m_sources[index].report)));
    return f.commit();
}

bool CompareView::exportCharts(const QString& path)
{
    if (path.endsWith(".pdf", Qt::CaseInsensitive)) {
        QPdfWriter pdf(path);
        pdf.setPageSize(QPageSize(QPageSize::A4));
        pdf.setPageOrientation(QPageLayout::Landscape);
        QPainter p(&pdf);
        if (!p.isActive())
            return false;
        const QPixmap pix = m_charts->grab();
        const QRect page = p.viewport();
        const QSize size = pix.size().scaled(page.size(), Qt::KeepAspectRatio);
        p.drawPixmap(QRect(QPoint(0, 0), size), pix);
        return p.end();
    }
    return m_charts->grab().save(path);
}

void CompareView::refresh()
{
    // Reports list.
    m_reports->clear();
    for (const auto& s : m_sources)
        m_reports->addItem(
            QString("%1%2 — %3 timings").arg(s.label, s.local ? tr(" (local)") : QString()).arg(s.report.rows.size()));

    // Table.
    m_table->setSortingEnabled(false);
    int rows = 0;
    for (const auto& s : m_sources)
        rows += static_cast<int>(s.report.rows.size());
    m_table->setRowCount(rows);
    int r = 0;
    for (const auto& s : m_sources) {
        for (const auto& x : s.report.rows) {
            auto num = [](double v, int digits) {
                auto* item = new QTableWidgetItem;
                item->setData(Qt::DisplayRole, QString::number(v, 'f', digits).toDouble());
                return item;
            };
            m_table->setItem(r, 0, new QTableWidgetItem(s.label));
            m_table->setItem(r, 1, new QTableWidgetItem(QString::fromStdString(x.device)));
            m_table->setItem(r, 2, new QTableWidgetItem(QString::fromStdString(benchPrecisionName(x.precision))));
            m_table->setItem(r, 3, num(x.threads, 0));
            m_table->setItem(r, 4, num(x.batch, 0));
            m_table->setItem(r, 5, new QTableWidgetItem(QString::fromStdString(benchUnitName(x.unit))));
            m_table->setItem(r, 6, num(1e3 * x.time.median, 3));
            m_table->setItem(r, 7, num(x.tokensPerSecond, 0));
            m_table->setItem(r, 8, num(x.gflops, 2));
            m_table->setItem(r, 9, num(100 * x.gemmFraction, 1));
            m_table->setItem(r, 10, num(static_cast<double>(x.peakMemoryBytes) / (1 << 20), 0));
            m_table->setItem(r, 11, x.energyJoules >= 0 ? num(x.energyJoules, 3) : new QTableWidgetItem(tr("n/a")));
            ++r;
        }
    }
    m_table->setSortingEnabled(true);

    // 1. Epoch time bars with p10–p90 and speed-ups against the slowest.
    m_epoch->clearPlottables();
    m_epoch->clearItems();
    QSharedPointer<QCPAxisTickerText> ticks(new QCPAxisTickerText);
    double slowest = 0;
    for (const auto& s : m_sources)
        for (const auto& x : s.report.rows)
            if (x.unit == BenchUnit::Epoch)
                slowest = std::max(slowest, x.time.median);
    int pos = 0, si = 0;
    for (const auto& s : m_sources) {
        auto* bars = new QCPBars(m_epoch->xAxis, m_epoch->yAxis);
        bars->setName(s.label);
        bars->setBrush(colour(si));
        bars->setPen(Qt::NoPen);
        bars->setWidth(0.7);
        auto* err = new QCPErrorBars(m_epoch->xAxis, m_epoch->yAxis);
        err->removeFromLegend();
        err->setDataPlottable(bars);
        QVector<double> keys, values, lo, hi;
        for (const auto& x : s.report.rows) {
            if (x.unit != BenchUnit::Epoch)
                continue;
            keys << pos;
            values << x.time.median;
            lo << x.time.median - x.time.p10;
            hi << x.time.p90 - x.time.median;
            QString tick = QString("%1 %2").arg(
                QString::fromStdString(x.device), QString::fromStdString(benchPrecisionName(x.precision)));
            if (x.device == "cpu" && x.threads > 0)
                tick += QString("\n%1 threads").arg(x.threads);
            ticks->addTick(pos, tick);
            auto* label = new QCPItemText(m_epoch);
            label->position->setCoords(pos, x.time.p90);
            label->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
            label->setText(QString::fromUtf8("×%1").arg(slowest / x.time.median, 0, 'f', 2));
            label->setFont(QFont(font().family(), 8, QFont::Bold));
            ++pos;
        }
        bars->setData(keys, values);
        err->setData(lo, hi);
        ++si;
    }
    m_epoch->xAxis->setTicker(ticks);
    m_epoch->xAxis->setRange(-0.7, std::max(1, pos) - 0.3);
    // Head room above the bars for the speed-up labels and the legend.
    m_epoch->yAxis->setRange(0, slowest > 0 ? slowest * 1.7 : 1);
    m_epoch->replot();

    // 2. Training tokens/s against batch size, one line per report/device/precision/threads.
    // 3. Batch-1 reply latency against the best batch-N reply throughput.
    m_throughput->clearGraphs();
    m_latency->clearGraphs();
    m_latency->clearItems();
    int gi = 0;
    double maxLatency = 0, maxThroughput = 0;
    for (const auto& s : m_sources) {
        std::map<QString, std::vector<const BenchRow*>> groups;
        for (const auto& x : s.report.rows)
            groups[groupName(s, x)].push_back(&x);
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
            }
            if (latency > 0) {
                auto* g = m_latency->addGraph();
                g->setName(name);
                g->setLineStyle(QCPGraph::lsNone);
                g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, QPen(colour(gi)), QBrush(colour(gi)), 10));
                g->setData(QVector<double> { latency }, QVector<double> { best });
                maxLatency = std::max(maxLatency, latency);
                maxThroughput = std::max(maxThroughput, best);
            }
            ++gi;
        }
    }
    m_throughput->rescaleAxes();
    if (m_throughput->graphCount() > 0) {
        m_throughput->xAxis->setRange(
            m_throughput->xAxis->range().lower / 1.5, m_throughput->xAxis->range().upper * 1.5);
        m_throughput->yAxis->setRange(0, m_throughput->yAxis->range().upper * 1.15);
    }
    m_throughput->replot();
    m_latency->xAxis->setRange(0, maxLatency > 0 ? maxLatency * 1.3 : 1);
    m_latency->yAxis->setRange(0, maxThroughput > 0 ? maxThroughput * 1.9 : 1); // the legend sits above the points
    m_latency->replot();

    // 4. The race.
    m_race->clearGraphs();
    int ri = 0;
    for (const auto& s : m_sources) {
        for (const auto& c : s.report.races) {
            QVector<double> x, y;
            for (const auto& p : c.points) {
                x << p.seconds;
                y << p.loss;
            }
            if (y.isEmpty())
                continue;
            auto* g = m_race->addGraph();
            g->setName(s.label + " · " + QString::fromStdString(c.device + " " + benchPrecisionName(c.precision)));
            g->setPen(QPen(colour(ri++), 2));
            g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 4));
            g->setData(x, y);
        }
    }
    m_race->rescaleAxes();
    if (m_race->graphCount() > 0)
        m_race->xAxis->setRangeLower(0);
    m_race->replot();
}
