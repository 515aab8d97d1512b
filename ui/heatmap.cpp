#include "heatmap.h"

#include "qcp.h"

#include <cmath>

// The colour scale beside a heat map (made once per plot, then reused): what a colour means.
void attachColorScale(QCustomPlot* plot, QCPColorMap* map, const QString& label)
{
    auto* grid = plot->plotLayout();
    auto* scale = grid->columnCount() > 1 ? qobject_cast<QCPColorScale*>(grid->element(0, 1)) : nullptr;
    if (!scale) {
        scale = new QCPColorScale(plot);
        plot->plotLayout()->addElement(0, 1, scale);
        scale->setType(QCPAxis::atRight);
        scale->setBarWidth(10);
        auto* group = new QCPMarginGroup(plot);
        plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, group);
        scale->setMarginGroup(QCP::msBottom | QCP::msTop, group);
    }
    scale->axis()->setLabel(label);
    const QCPColorGradient gradient = map->gradient();
    const QCPRange range = map->dataRange();
    map->setColorScale(scale); // the map takes the scale's gradient and range: give it the map's
    scale->setGradient(gradient);
    scale->setDataRange(range);
}

// A units × steps heat map with a shared diverging colour scale.
void fillHeatmap(QCustomPlot* plot, const std::vector<std::vector<float>>& columns, int divider, const QString& mark)
{
    plot->clearPlottables();
    plot->clearItems();
    if (columns.empty())
        return;
    const int nx = static_cast<int>(columns.size());
    const int ny = static_cast<int>(columns.front().size());
    auto* map = new QCPColorMap(plot->xAxis, plot->yAxis);
    map->data()->setSize(nx, ny);
    map->data()->setRange(QCPRange(0, nx - 1), QCPRange(0, ny - 1));
    double amax = 1e-6;
    for (int x = 0; x < nx; ++x)
        for (int y = 0; y < ny; ++y) {
            const double v = columns[static_cast<size_t>(x)][static_cast<size_t>(y)];
            map->data()->setCell(x, y, v);
            amax = std::max(amax, std::abs(v));
        }
    // Diverging: negative blue, zero white, positive red.
    QCPColorGradient g;
    g.setColorStopAt(0.0, QColor(33, 102, 172));
    g.setColorStopAt(0.5, QColor(247, 247, 247));
    g.setColorStopAt(1.0, QColor(178, 24, 43));
    map->setGradient(g);
    map->setDataRange(QCPRange(-amax, amax));
    map->setInterpolate(false);
    attachColorScale(plot, map, QObject::tr("value"));
    plot->xAxis->setRange(-0.5, nx - 0.5);
    plot->yAxis->setRange(-0.5, ny - 0.5);
    if (divider > 0) {
        auto* line = new QCPItemStraightLine(plot);
        line->point1->setCoords(divider - 0.5, 0);
        line->point2->setCoords(divider - 0.5, 1);
        line->setPen(QPen(Qt::black, 2, Qt::DashLine));
        auto* label = new QCPItemText(plot);
        label->position->setCoords(divider - 0.5, ny - 0.5);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        label->setText(" " + mark);
        label->setFont(QFont(plot->font().family(), 8, QFont::Bold));
    }
    plot->replot();
}
