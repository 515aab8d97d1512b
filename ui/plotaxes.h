#pragma once
// Axis ranges that always include the data, and legends that never cover it, for every chart.
//
//   plotaxes::legendAbove(plot);                              // once, after creating the plot
//   plotaxes::fit(plot->yAxis, plotaxes::span(values, false)); // after setting the data
//
// QCustomPlot's rescaleAxes puts the extreme points on the axis lines (a scatter marker there is
// cut in half) and knows nothing of outliers; these helpers add a margin (in log space on a log
// axis) and can leave the extreme 2 % out of the y range on request.

#include <QVector>

class QCPAxis;
class QCustomPlot;

namespace plotaxes {

struct Span {
    double lo = 0;
    double hi = 0;
    bool valid = false; // false when there was no finite value (positive on a log axis)
};

// The range of the finite values (only positive ones when `positiveOnly`). With `ignoreOutliers`
// the range runs from the 2nd to the 98th percentile instead (at least two values needed).
Span span(const QVector<double>& values, bool ignoreOutliers = false, bool positiveOnly = false);
Span merge(Span a, Span b);
// Sets the axis to the span plus `margin` of its width on each side (in log space on a log axis);
// a single value gets a range around it; an invalid span leaves the axis as it is.
void fit(QCPAxis* axis, Span s, double margin = 0.06);
// Moves the plot's legend out of the axis rectangle into a row above it, laid out in as many
// columns of `columnWidth` pixels as the plot's width holds (at most `maxColumns`), re-laid out
// whenever the plot is resized.
void legendAbove(QCustomPlot* plot, int maxColumns = 4, int columnWidth = 230);

} // namespace plotaxes
