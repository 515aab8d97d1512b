#pragma once
// The Compare tab: run benchmarks here (devices × precisions × batch sizes × threads) in the
// background, import reports made elsewhere (a GPU server's `chatbench-cli bench`), and compare:
// epoch time per device/precision with speed-ups, training throughput against batch size,
// batch-1 reply latency against batch-N reply throughput, and a race of the same configuration
// trained on each device (loss against wall-clock time).

#include "chatbench/bench.h"

#include <QWidget>

class EngineController;
class QCheckBox;
class QCustomPlot;
class QLabel;
class QLineEdit;
class QListWidget;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QComboBox;
class QTableWidget;

class CompareView : public QWidget {
    Q_OBJECT

public:
    CompareView(EngineController* engine, QWidget* parent = nullptr);

    struct Source {
        QString label;
        chatbench::BenchReport report;
        bool local = false;
    };

    chatbench::BenchConfig config() const;
    void setBatchSizes(const QString& list);
    void setThreads(const QString& list);
    void setRaceEpochs(int epochs);
    void setRepeats(int repeats);
    // Adds a report file; returns false (and shows the error with file:line) when it is bad.
    bool importReport(const QString& path);
    // Writes the selected report (else the newest local one) whole or not at all; false, with the
    // reason in `why`, when there is none or it cannot be written.
    bool exportReport(const QString& path, QString* why = nullptr) const;
    bool exportCharts(const QString& path, QString* why = nullptr); // .png or .pdf, whole or not at all
    void addReport(const QString& label, const chatbench::BenchReport& report, bool local);
    // The folder of saved reports (the project's bench/reports): listed in the Reports panel and
    // where the Import dialog opens.
    void setReportsDir(const QString& dir);
    QString reportsDir() const { return m_reportsDir; }
    QListWidget* savedList() const { return m_saved; } // the reports found there; double-click imports
    // What the charts compare: one line per workload and the one-device hint (empty when none).
    QLabel* workloadNote() const { return m_workloads; }
    // The workload id ("W1", …) of every report, by source index; reports of the same corpus and
    // model share one.
    QStringList workloadIds() const { return m_workloadIds; }

    const QList<Source>& sources() const { return m_sources; }
    QCustomPlot* epochChart() const { return m_epoch; }
    QCustomPlot* throughputChart() const { return m_throughput; }
    QCustomPlot* latencyChart() const { return m_latency; }
    QCustomPlot* raceChart() const { return m_race; }
    QTableWidget* table() const { return m_table; }
    QListWidget* reportList() const { return m_reports; } // one row per source; exportReport writes the current one
    QLabel* errorLabel() const { return m_error; }
    QComboBox* modelBox() const { return m_preset; } // presets, then the open run's sizes
    QPushButton* runButton() const { return m_run; }
    QPushButton* cancelButton() const { return m_cancel; }

public Q_SLOTS:
    void runLocal();
    void refresh();

Q_SIGNALS:
    void status(const QString& message);

private:
    void fillDevices();

    EngineController* m_engine;
    QList<QCheckBox*> m_deviceBoxes;
    QList<QCheckBox*> m_precisionBoxes;
    QWidget* m_deviceArea = nullptr;
    QComboBox* m_preset = nullptr;
    QLineEdit* m_batches = nullptr;
    QLineEdit* m_threads = nullptr;
    QSpinBox* m_repeats = nullptr;
    QSpinBox* m_raceEpochs = nullptr;
    QPushButton* m_run = nullptr;
    QPushButton* m_cancel = nullptr;
    QProgressBar* m_progress = nullptr;
    QLabel* m_progressLabel = nullptr;
    QLabel* m_error = nullptr;
    QListWidget* m_reports = nullptr;
    QWidget* m_charts = nullptr;
    QCustomPlot* m_epoch = nullptr;
    QCustomPlot* m_throughput = nullptr;
    QCustomPlot* m_latency = nullptr;
    QCustomPlot* m_race = nullptr;
    QTableWidget* m_table = nullptr;
    QList<Source> m_sources;
    QStringList m_workloadIds;
    QString m_reportsDir;
    QListWidget* m_saved = nullptr;
    QLabel* m_workloads = nullptr;
};
