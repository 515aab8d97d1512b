#pragma once
// Heat maps of state vectors (units × steps) with their colour scale, for the handoff view and
// the two-question comparison.

#include <QString>

#include <vector>

class QCPColorMap;
class QCustomPlot;

// The colour scale beside a heat map (made once per plot, then reused), labelled `label`.
void attachColorScale(QCustomPlot* plot, QCPColorMap* map, const QString& label);
// `columns` (each a vector of units) as a heat map with a diverging scale symmetric around 0
// (blue negative, white 0, red positive). `divider` > 0 draws a dashed line before that column,
// marked `mark`.
void fillHeatmap(QCustomPlot* plot, const std::vector<std::vector<float>>& columns, int divider, const QString& mark);
