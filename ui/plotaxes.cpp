#include "plotaxes.h"

#include "qcp.h"

#include <algorithm>
#include <cmath>

namespace plotaxes {

Span span(const QVector<double>& values, bool ignoreOutliers, bool positiveOnly)
{
    QVector<double> v;
    v.reserve(values.size());
    for (double x : values)
        if (std::isfinite(x) && (!positiveOnly || x > 0))
            v << x;
    if (v.isEmpty())
        return {};
    std::sort(v.begin(), v.end());
    if (!ignoreOutliers || v.size() < 2)
        return { v.front(), v.back(), true };
    auto at = [&](double q) {
        const double pos = q * static_cast<double>(v.size() - 1);
        const auto i = static_cast<int>(std::floor(pos));
        const double frac = pos - i;
        return i + 1 < v.size() ? v[i] * (1 - frac) + v[i + 1] * frac : v[i];
    };
    return { at(0.02), at(0.98), true };
}

Span merge(Span a, Span b)
{
    if (!a.valid)
        return b;
    if (!b.valid)
        return a;
    return { std::min(a.lo, b.lo), std::max(a.hi, b.hi), true };
}

void fit(QCPAxis* axis, Span s, double margin)
{
    if (!s.valid)
        return;
    if (axis->scaleType() == QCPAxis::stLogarithmic) {
        if (s.lo <= 0)
            return;
        double lo = std::log10(s.lo), hi = std::log10(s.hi);
        const double pad = hi > lo ? (hi - lo) * margin : 0.1;
        axis->setRange(std::pow(10.0, lo - pad), std::pow(10.0, hi + pad));
        return;
    }
    const double width = s.hi - s.lo;
    const double pad = width > 0 ? width * margin : std::max(std::abs(s.lo) * 0.1, 0.5);
    axis->setRange(s.lo - pad, s.hi + pad);
}

namespace {

// Re-wraps a legend when its plot is resized: narrow plots get fewer, readable columns.
class LegendWrap : public QObject {
public:
    LegendWrap(QCustomPlot* plot, int maxColumns, int columnWidth)
        : QObject(plot)
        , m_plot(plot)
        , m_max(maxColumns)
        , m_width(columnWidth)
    {
        plot->installEventFilter(this);
        apply();
    }

protected:
    bool eventFilter(QObject*, QEvent* e) override
    {
        if (e->type() == QEvent::Resize)
            apply();
        return false;
    }

private:
    void apply()
    {
        const int columns = std::clamp(m_plot->width() / m_width, 1, m_max);
        if (m_plot->legend->wrap() != columns) {
            m_plot->legend->setWrap(columns);
            m_plot->replot(QCustomPlot::rpQueuedReplot);
        }
    }

    QCustomPlot* m_plot;
    int m_max;
    int m_width;
};

} // namespace

void legendAbove(QCustomPlot* plot, int maxColumns, int columnWidth)
{
    auto* grid = plot->plotLayout();
    // Above the axis rectangle, below a title row when there is one.
    int row = 0;
    if (grid->rowCount() > 0 && qobject_cast<QCPTextElement*>(grid->element(0, 0)))
        row = 1;
    grid->insertRow(row);
    grid->addElement(row, 0, plot->legend); // takes it out of the axis rectangle's inset layout
    grid->setRowStretchFactor(row, 0.001);
    plot->legend->setFillOrder(QCPLegend::foColumnsFirst);
    plot->legend->setBorderPen(Qt::NoPen);
    plot->legend->setBrush(Qt::NoBrush);
    plot->legend->setMargins(QMargins(4, 0, 4, 0));
    plot->legend->setVisible(true);
    new LegendWrap(plot, maxColumns, columnWidth);
}

} // namespace plotaxes
