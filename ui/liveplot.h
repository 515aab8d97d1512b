#pragma once
// Live training curves: loss (raw + smoothed), validation loss, perplexity and tokens/s.
//
//   LivePlot* plot = new LivePlot;
//   connect(engine, &EngineController::stepDone, plot, &LivePlot::addStep);
//   connect(engine, &EngineController::epochDone, plot, &LivePlot::addEpoch);
//
// Points are stored raw; the view replots on one single-shot 40 ms timer (never per batch) and
// draws at most kMaxDrawn points per series, always keeping the newest.

#include "chatbench/trainer.h"

#include <QTimer>
#include <QVector>
#include <QWidget>

class QCustomPlot;
class QCPGraph;
class QComboBox;
class QCheckBox;
class QSlider;
class QLabel;

class LivePlot : public QWidget {
    Q_OBJECT

public:
    enum class XAxis { Step, Epoch, WallTime };
    static constexpr int kMaxDrawn = 2000;

    explicit LivePlot(QWidget* parent = nullptr);

    void clear();
    void setStepsPerEpoch(double steps) { m_stepsPerEpoch = steps > 0 ? steps : 1; }
    // An earlier run's epochs drawn dashed behind the live curves; replaces the overlay `name`.
    void setOverlay(const QString& name, const std::vector<chatbench::EpochMetrics>& history);
    void clearOverlays();
    void setXAxis(XAxis axis);
    void setLogY(bool on);
    void setSmoothing(int percent); // 0..99: EMA weight of the past
    // Leave the extreme 2 % of values out of the y ranges (a first-step loss spike, say).
    void setIgnoreOutliers(bool on);

    int stepPoints() const { return m_steps.size(); }
    int epochPoints() const { return m_epochs.size(); }
    int drawnPoints(int graph) const; // points the given loss graph holds after the last replot
    int replots() const { return m_replots; }
    QCustomPlot* lossPlot() const { return m_loss; }
    QCustomPlot* speedPlot() const { return m_speed; }
    // The best-validation epoch (1-based; 0 when none) and the overfitting note shown under the
    // curves (empty when none), both from the engine's reading of the epochs shown.
    int bestEpoch() const;
    QString overfittingNote() const;

    // The loss chart (.png or .pdf) and every value shown (CSV), written whole or not at all;
    // false with the reason in `why`.
    bool exportImage(const QString& path, QString* why = nullptr);
    bool exportCsv(const QString& path, QString* why = nullptr);

public Q_SLOTS:
    void addStep(const chatbench::StepMetrics& m);
    void addEpoch(const chatbench::EpochMetrics& m);

Q_SIGNALS:
    void replotted();

private:
    struct Point {
        double step, epoch, time, value, extra;
    };
    Point smoothedNext(const Point& raw); // the next debiased EMA point
    double m_ema = 0; // the running average and the weight it has gathered (debiasing)
    double m_emaWeight = 0;
    void scheduleReplot();
    void replot();
    double xOf(const Point& p) const;
    void fill(QCPGraph* g, const QVector<Point>& pts, bool extra = false) const;
    void fitAxes();
    void markBest();

    QCustomPlot* m_loss = nullptr;
    QCustomPlot* m_speed = nullptr;
    QComboBox* m_xAxis = nullptr;
    QCheckBox* m_logY = nullptr;
    QCheckBox* m_outliers = nullptr;
    QLabel* m_note = nullptr; // the overfitting note
    class QCPItemText* m_bestLabel = nullptr;
    std::vector<chatbench::EpochMetrics> m_history; // the epochs shown, for the best mark and the note
    QSlider* m_smooth = nullptr;
    QLabel* m_smoothLabel = nullptr;
    QTimer m_timer;
    QVector<Point> m_steps; // value = loss, extra = tokens/s
    QVector<Point> m_smoothed;
    QVector<Point> m_epochs; // value = validation loss, extra = perplexity
    QVector<Point> m_epochTrain;
    XAxis m_axis = XAxis::Step;
    double m_alpha = 0.9;
    double m_stepsPerEpoch = 1;
    int m_replots = 0;
    int m_fixedGraphs = 0;
    bool m_userZoomed = false;
    bool m_ignoreOutliers = false;
};
