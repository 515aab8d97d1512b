#include "liveplot.h"

#include "chatbench/runs.h"
#include "exportfile.h"
#include "plotaxes.h"
#include "qcp.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QHBoxLayout>
#include <QLabel>
#include <QBuffer>
#include <QDir>
#include <QTemporaryDir>
#include <QSlider>
#include <QTextStream>
#include <QVBoxLayout>

#include <cmath>

namespace {
enum Graph { Raw, Smoothed, Validation, EpochTrain, Best };
enum SpeedGraph { Perplexity, Tokens };

QPen pen(const QColor& c, double width = 1.5, Qt::PenStyle style = Qt::SolidLine)
{
    QPen p(c, width, style);
    return p;
}
} // namespace

LivePlot::LivePlot(QWidget* parent)
    : QWidget(parent)
{
    auto* bar = new QHBoxLayout;
    bar->addWidget(new QLabel(tr("x axis")));
    m_xAxis = new QComboBox;
    m_xAxis->addItems({ tr("step"), tr("epoch"), tr("wall time (s)") });
    m_xAxis->setToolTip(tr("What the curves are drawn against: optimizer steps, epochs or training wall time"));
    bar->addWidget(m_xAxis);
    m_logY = new QCheckBox(tr("log y"));
    m_logY->setToolTip(tr("Logarithmic loss axis"));
    bar->addWidget(m_logY);
    m_outliers = new QCheckBox(tr("ignore outliers"));
    m_outliers->setToolTip(tr("Leave the highest and lowest 2 % of values out of the y range (the first steps' "
                              "loss, say); they are still drawn"));
    bar->addWidget(m_outliers);
    bar->addSpacing(12);
    m_smoothLabel = new QLabel;
    bar->addWidget(m_smoothLabel);
    m_smooth = new QSlider(Qt::Horizontal);
    m_smooth->setRange(0, 99);
    m_smooth->setMaximumWidth(160);
    m_smooth->setToolTip(tr("Exponential moving average of the training loss: weight of the past"));
    bar->addWidget(m_smooth);
    bar->addStretch();

    m_loss = new QCustomPlot;
    m_loss->setMinimumHeight(260);
    m_loss->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m_loss->legend->setFont(QFont(font().family(), 8));
    plotaxes::legendAbove(m_loss, 3, 200);
    m_loss->yAxis->setLabel(tr("loss (cross-entropy)"));
    auto* raw = m_loss->addGraph();
    raw->setName(tr("train loss (per step)"));
    raw->setPen(pen(QColor(120, 160, 220, 110), 1));
    auto* smooth = m_loss->addGraph();
    smooth->setName(tr("train loss (smoothed)"));
    smooth->setPen(pen(QColor(20, 70, 170), 2));
    auto* val = m_loss->addGraph();
    val->setName(tr("validation loss"));
    val->setPen(pen(QColor(230, 120, 20), 2));
    val->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
    auto* epochTrain = m_loss->addGraph();
    epochTrain->setName(tr("train loss (epoch mean)"));
    epochTrain->setPen(pen(QColor(20, 70, 170), 1, Qt::DotLine));
    auto* best = m_loss->addGraph();
    best->setName(tr("best validation (weights kept)"));
    best->setLineStyle(QCPGraph::lsNone);
    best->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssStar, QPen(QColor(200, 30, 30), 2), Qt::NoBrush, 14));
    m_bestLabel = new QCPItemText(m_loss);
    m_bestLabel->setPositionAlignment(Qt::AlignHCenter | Qt::AlignTop);
    m_bestLabel->setFont(QFont(font().family(), 8, QFont::Bold));
    m_bestLabel->setColor(QColor(200, 30, 30));
    m_bestLabel->setClipToAxisRect(true);
    m_bestLabel->setPadding(QMargins(0, 9, 0, 0)); // below the star
    m_bestLabel->setVisible(false);
    m_fixedGraphs = m_loss->graphCount();

    m_speed = new QCustomPlot;
    m_speed->setMinimumHeight(140);
    m_speed->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m_speed->legend->setFont(QFont(font().family(), 8));
    plotaxes::legendAbove(m_speed, 2, 200);
    m_speed->yAxis->setLabel(tr("perplexity"));
    m_speed->yAxis2->setVisible(true);
    m_speed->yAxis2->setLabel(tr("tokens/s"));
    auto* ppl = m_speed->addGraph();
    ppl->setName(tr("validation perplexity"));
    ppl->setPen(pen(QColor(40, 150, 70), 2));
    ppl->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 4));
    m_speed->yAxis->setScaleType(QCPAxis::stLogarithmic);
    m_speed->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    auto* tok = m_speed->addGraph(m_speed->xAxis, m_speed->yAxis2);
    tok->setName(tr("tokens/s"));
    tok->setPen(pen(QColor(150, 60, 160, 160), 1));

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(bar);
    layout->addWidget(m_loss, 3);
    m_note = new QLabel;
    m_note->setObjectName("overfittingNote");
    m_note->setWordWrap(true);
    m_note->setStyleSheet("QLabel { background: #fff4d6; color: #6b4a00; border: 1px solid #e6c97a; padding: 4px; "
                          "border-radius: 4px; }");
    m_note->hide();
    layout->addWidget(m_note);
    layout->addWidget(m_speed, 2);

    m_timer.setSingleShot(true);
    m_timer.setInterval(40);
    connect(&m_timer, &QTimer::timeout, this, &LivePlot::replot);
    connect(m_xAxis, &QComboBox::currentIndexChanged, this, [this](int i) { setXAxis(static_cast<XAxis>(i)); });
    connect(m_logY, &QCheckBox::toggled, this, &LivePlot::setLogY);
    connect(m_outliers, &QCheckBox::toggled, this, &LivePlot::setIgnoreOutliers);
    connect(m_smooth, &QSlider::valueChanged, this, &LivePlot::setSmoothing);
    // Dragging or wheeling stops the auto-fit; a double click brings it back.
    for (auto* p : { m_loss, m_speed }) {
        connect(p, &QCustomPlot::mouseWheel, this, [this] { m_userZoomed = true; });
        connect(p, &QCustomPlot::mousePress, this, [this] { m_userZoomed = true; });
        connect(p, &QCustomPlot::mouseDoubleClick, this, [this] {
            m_userZoomed = false;
            scheduleReplot();
        });
    }
    m_smooth->setValue(90);
    setSmoothing(90);
}

void LivePlot::clear()
{
    m_steps.clear();
    m_smoothed.clear();
    m_ema = 0;
    m_emaWeight = 0;
    m_epochs.clear();
    m_epochTrain.clear();
    m_history.clear();
    m_note->clear(); // the last run's overfitting note stayed over the next one's empty axes
    m_note->hide();
    m_userZoomed = false;
    scheduleReplot();
}

void LivePlot::setXAxis(XAxis axis)
{
    m_axis = axis;
    if (m_xAxis->currentIndex() != static_cast<int>(axis))
        m_xAxis->setCurrentIndex(static_cast<int>(axis));
    const QString label = axis == XAxis::Step ? tr("step") : axis == XAxis::Epoch ? tr("epoch") : tr("wall time (s)");
    m_loss->xAxis->setLabel(label);
    m_speed->xAxis->setLabel(label);
    m_userZoomed = false;
    scheduleReplot();
}

void LivePlot::setLogY(bool on)
{
    if (m_logY->isChecked() != on)
        m_logY->setChecked(on);
    m_loss->yAxis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (on)
        m_loss->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    else
        m_loss->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    scheduleReplot();
}

void LivePlot::setIgnoreOutliers(bool on)
{
    if (m_outliers->isChecked() != on)
        m_outliers->setChecked(on);
    m_ignoreOutliers = on;
    m_userZoomed = false;
    scheduleReplot();
}

void LivePlot::setSmoothing(int percent)
{
    m_alpha = std::clamp(percent, 0, 99) / 100.0;
    m_smoothLabel->setText(tr("smoothing %1").arg(m_alpha, 0, 'f', 2));
    // Recompute the EMA over the raw points.
    m_smoothed.clear();
    m_ema = 0;
    m_emaWeight = 0;
    for (const Point& p : m_steps)
        m_smoothed.push_back(smoothedNext(p));
    scheduleReplot();
}

LivePlot::Point LivePlot::smoothedNext(const Point& raw)
{
    // Debiased EMA (as TensorBoard): the average starts at 0 with weight 0, so dividing by the
    // weight gathered so far keeps the first points at the data instead of pulled toward 0.
    m_ema = m_alpha * m_ema + (1 - m_alpha) * raw.value;
    m_emaWeight = m_alpha * m_emaWeight + (1 - m_alpha);
    Point s = raw;
    s.value = m_emaWeight > 0 ? m_ema / m_emaWeight : raw.value;
    return s;
}

void LivePlot::addStep(const chatbench::StepMetrics& m)
{
    const double step = static_cast<double>(m.step);
    const Point p { step, step / m_stepsPerEpoch, m.elapsedSeconds, m.loss, m.tokensPerSecond };
    m_steps.push_back(p);
    m_smoothed.push_back(smoothedNext(p));
    scheduleReplot();
}

void LivePlot::addEpoch(const chatbench::EpochMetrics& m)
{
    const double step = static_cast<double>(m.step);
    m_epochs.push_back({ step, static_cast<double>(m.epoch + 1), m.elapsedSeconds, m.validationLoss, m.perplexity });
    m_epochTrain.push_back({ step, static_cast<double>(m.epoch + 1), m.elapsedSeconds, m.trainLoss, 0 });
    m_history.push_back(m);
    const QString note = overfittingNote();
    m_note->setText(note);
    m_note->setVisible(!note.isEmpty());
    scheduleReplot();
}

void LivePlot::setOverlay(const QString& name, const std::vector<chatbench::EpochMetrics>& history)
{
    for (int i = m_loss->graphCount() - 1; i >= m_fixedGraphs; --i)
        if (m_loss->graph(i)->property("overlay").toString() == name)
            m_loss->removeGraph(i);
    static const QColor colors[]
        = { QColor(130, 130, 130), QColor(170, 110, 60), QColor(90, 140, 140), QColor(150, 100, 150) };
    const QColor c = colors[(m_loss->graphCount() - m_fixedGraphs) % 4];
    QVector<Point> pts;
    for (const auto& m : history) {
        const double v = std::isfinite(m.validationLoss) ? m.validationLoss : m.trainLoss;
        pts.push_back({ static_cast<double>(m.step), static_cast<double>(m.epoch + 1), m.elapsedSeconds, v, 0 });
    }
    auto* g = m_loss->addGraph();
    g->setName(name);
    g->setProperty("overlay", name);
    g->setProperty("points", QVariant::fromValue(pts.size()));
    g->setPen(pen(c, 1.5, Qt::DashLine));
    // Keep the raw points on the graph object so axis changes can rebuild it.
    QVector<double> steps, epochs, times, values;
    for (const auto& p : pts) {
        steps << p.step;
        epochs << p.epoch;
        times << p.time;
        values << p.value;
    }
    g->setProperty("steps", QVariant::fromValue(steps));
    g->setProperty("epochs", QVariant::fromValue(epochs));
    g->setProperty("times", QVariant::fromValue(times));
    g->setProperty("values", QVariant::fromValue(values));
    scheduleReplot();
}

void LivePlot::clearOverlays()
{
    for (int i = m_loss->graphCount() - 1; i >= m_fixedGraphs; --i)
        m_loss->removeGraph(i);
    scheduleReplot();
}

void LivePlot::scheduleReplot()
{
    if (!m_timer.isActive())
        m_timer.start();
}

double LivePlot::xOf(const Point& p) const
{
    switch (m_axis) {
    case XAxis::Step: return p.step;
    case XAxis::Epoch: return p.epoch;
    case XAxis::WallTime: return p.time;
    }
    return p.step;
}

void LivePlot::fill(QCPGraph* g, const QVector<Point>& pts, bool extra) const
{
    QVector<double> x, y;
    const int n = pts.size();
    const int stride = n > kMaxDrawn ? (n + kMaxDrawn - 1) / kMaxDrawn : 1;
    x.reserve(n / stride + 2);
    y.reserve(n / stride + 2);
    for (int i = 0; i < n; i += stride) {
        const double v = extra ? pts[i].extra : pts[i].value;
        if (!std::isfinite(v))
            continue;
        x << xOf(pts[i]);
        y << v;
    }
    // The newest point is always drawn.
    if (n > 0 && (n - 1) % stride != 0) {
        const double v = extra ? pts[n - 1].extra : pts[n - 1].value;
        if (std::isfinite(v)) {
            x << xOf(pts[n - 1]);
            y << v;
        }
    }
    g->setData(x, y, /*alreadySorted=*/true);
}

void LivePlot::replot()
{
    fill(m_loss->graph(Raw), m_steps);
    fill(m_loss->graph(Smoothed), m_smoothed);
    fill(m_loss->graph(Validation), m_epochs);
    fill(m_loss->graph(EpochTrain), m_epochTrain);
    for (int i = m_fixedGraphs; i < m_loss->graphCount(); ++i) {
        auto* g = m_loss->graph(i);
        const auto key = m_axis == XAxis::Step ? "steps" : m_axis == XAxis::Epoch ? "epochs" : "times";
        g->setData(g->property(key).value<QVector<double>>(), g->property("values").value<QVector<double>>());
    }
    fill(m_speed->graph(Perplexity), m_epochs, true);
    fill(m_speed->graph(Tokens), m_steps, true);
    markBest();
    if (!m_userZoomed)
        fitAxes();
    m_loss->replot(QCustomPlot::rpQueuedReplot);
    m_speed->replot(QCustomPlot::rpQueuedReplot);
    ++m_replots;
    Q_EMIT replotted();
}

int LivePlot::bestEpoch() const
{
    const int i = chatbench::bestEpochIndex(m_history);
    return i < 0 ? 0 : m_history[static_cast<size_t>(i)].epoch + 1;
}

QString LivePlot::overfittingNote() const
{
    return QString::fromStdString(chatbench::overfittingNote(m_history));
}

void LivePlot::markBest()
{
    const int i = chatbench::bestEpochIndex(m_history);
    auto* g = m_loss->graph(Best);
    if (i < 0) {
        g->data()->clear();
        m_bestLabel->setVisible(false);
        return;
    }
    const Point& p = m_epochs[i];
    g->setData(QVector<double> { xOf(p) }, QVector<double> { p.value });
    m_bestLabel->position->setCoords(xOf(p), p.value);
    m_bestLabel->setText(tr("best: epoch %1").arg(static_cast<int>(p.epoch)));
    m_bestLabel->setVisible(true);
}

void LivePlot::fitAxes()
{
    // x: every graph's keys; y: every graph's values, outliers left out on request. Each axis gets
    // a margin so that the extreme points and their markers stay inside.
    auto keysAndValues = [](QCustomPlot* plot, QCPAxis* valueAxis, QVector<double>* keys, QVector<double>* values) {
        for (int i = 0; i < plot->graphCount(); ++i) {
            QCPGraph* g = plot->graph(i);
            if (valueAxis && g->valueAxis() != valueAxis)
                continue;
            for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) {
                *keys << it->key;
                *values << it->value;
            }
        }
    };
    QVector<double> lossKeys, lossValues;
    keysAndValues(m_loss, nullptr, &lossKeys, &lossValues);
    const bool logLoss = m_loss->yAxis->scaleType() == QCPAxis::stLogarithmic;
    plotaxes::fit(m_loss->xAxis, plotaxes::span(lossKeys), 0.02);
    plotaxes::fit(m_loss->yAxis, plotaxes::span(lossValues, m_ignoreOutliers, logLoss));

    QVector<double> speedKeys, ppl, tokens;
    keysAndValues(m_speed, m_speed->yAxis, &speedKeys, &ppl);
    keysAndValues(m_speed, m_speed->yAxis2, &speedKeys, &tokens);
    plotaxes::fit(m_speed->xAxis, plotaxes::span(speedKeys), 0.02);
    plotaxes::fit(m_speed->yAxis, plotaxes::span(ppl, m_ignoreOutliers, /*positiveOnly=*/true));
    plotaxes::fit(m_speed->yAxis2, plotaxes::span(tokens, m_ignoreOutliers));
}

int LivePlot::drawnPoints(int graph) const
{
    return graph < m_loss->graphCount() ? m_loss->graph(graph)->dataCount() : 0;
}

bool LivePlot::exportImage(const QString& path, QString* why)
{
    // Drawn whole first, then written where the user chose (writeExport). A PNG is encoded in
    // memory (what savePng writes); QCustomPlot writes a PDF only to a path, so that one is
    // rendered into a private temporary folder and read back.
    QByteArray bytes;
    bool drawn = false;
    if (path.endsWith(".pdf", Qt::CaseInsensitive)) {
        const QTemporaryDir scratch;
        const QString rendered = scratch.filePath("chart.pdf");
        QFile f(rendered);
        drawn = scratch.isValid() && m_loss->savePdf(rendered) && f.open(QIODevice::ReadOnly);
        if (drawn)
            bytes = f.readAll();
    } else {
        QBuffer buffer(&bytes);
        drawn = buffer.open(QIODevice::WriteOnly) && m_loss->toPixmap(0, 0, 2.0).save(&buffer, "PNG");
    }
    if (!drawn) {
        if (why)
            *why = tr("could not draw the chart (is the temporary folder %1 full?)").arg(QDir::tempPath());
        return false;
    }
    return writeExport(path, bytes, why);
}

bool LivePlot::exportCsv(const QString& path, QString* why)
{
    QByteArray csv;
    QTextStream out(&csv);
    out << "kind,step,epoch,wall_seconds,value,extra\n";
    for (const auto& p : m_steps)
        out << "train_step," << p.step << ',' << p.epoch << ',' << p.time << ',' << p.value << ',' << p.extra << '\n';
    for (const auto& p : m_epochs)
        out << "validation_epoch," << p.step << ',' << p.epoch << ',' << p.time << ',' << p.value << ',' << p.extra
            << '\n';
    out.flush();
    return writeExport(path, csv, why);
}
