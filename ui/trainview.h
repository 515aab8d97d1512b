#pragma once
// The Train tab: hyper-parameters with presets, the device selector, Train / Stop / Resume, a
// progress bar with ETA, the live curves, and the run history to overlay earlier runs.

#include "chatbench/config.h"
#include "chatbench/devices.h"
#include "chatbench/trainer.h"

#include <QWidget>

class EngineController;
class LivePlot;
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QListWidget;
class QProgressBar;
class QPushButton;
class QSpinBox;

class TrainView : public QWidget {
    Q_OBJECT

public:
    TrainView(EngineController* engine, QWidget* parent = nullptr);

    chatbench::TrainConfig config() const;
    void setConfig(const chatbench::TrainConfig& cfg);
    void setRunsDir(const QString& dir);
    QString runsDir() const { return m_runsDir; }
    QString currentRun() const { return m_currentRun; }
    void setCurrentRun(const QString& dir);
    void refreshRunHistory();
    void showRunCurves(const QString& runDir); // the run's saved steps and epochs

    LivePlot* plot() const { return m_plot; }
    QPushButton* trainButton() const { return m_train; }
    QPushButton* stopButton() const { return m_stop; }
    QPushButton* resumeButton() const { return m_resume; }
    QComboBox* deviceBox() const { return m_device; }
    QComboBox* precisionBox() const { return m_precision; }
    QListWidget* runList() const { return m_runs; }
    QString progressText() const; // the line under the buttons: progress, then how the run ended

public Q_SLOTS:
    void startTraining();
    void stopTraining();
    void resumeTraining();

Q_SIGNALS:
    void status(const QString& message);

private:
    void fillDevices();
    void updatePrecisions();
    void updateTf32(); // TF32 is a CUDA fp32 option
    void setRunning(bool running);
    void applyPreset(const QString& name);

    EngineController* m_engine;
    LivePlot* m_plot = nullptr;
    QComboBox* m_preset = nullptr;
    QSpinBox* m_epochs = nullptr;
    QSpinBox* m_batch = nullptr;
    QDoubleSpinBox* m_lr = nullptr;
    QComboBox* m_optimizer = nullptr;
    QSpinBox* m_embed = nullptr;
    QSpinBox* m_hidden = nullptr;
    QSpinBox* m_layers = nullptr;
    QDoubleSpinBox* m_dropout = nullptr;
    QCheckBox* m_attention = nullptr;
    QCheckBox* m_shared = nullptr;
    QDoubleSpinBox* m_teacher = nullptr;
    QDoubleSpinBox* m_clip = nullptr;
    QSpinBox* m_patience = nullptr;
    QDoubleSpinBox* m_valFraction = nullptr;
    QSpinBox* m_seed = nullptr;
    QComboBox* m_device = nullptr;
    QSpinBox* m_threads = nullptr;
    QComboBox* m_precision = nullptr;
    QCheckBox* m_tf32 = nullptr; // CUDA fp32 only
    QLabel* m_deviceNote = nullptr;
    QPushButton* m_train = nullptr;
    QPushButton* m_stop = nullptr;
    QPushButton* m_resume = nullptr;
    QProgressBar* m_progress = nullptr;
    QLabel* m_eta = nullptr;
    QString m_failure; // why the training in progress failed, said when it finishes
    QListWidget* m_runs = nullptr;
    QString m_runsDir;
    QString m_currentRun;
    QString m_wantedDevice; // from settings, applied once the devices are probed
    bool m_haveCorpus = false; // Train needs a loaded corpus
    bool m_running = false;
    chatbench::TrainConfig m_base; // fields the form does not show come from here
};
