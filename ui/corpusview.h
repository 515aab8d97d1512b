#pragma once
// The Corpus tab: open a file or folder (dialogs or drag and drop), the detected format, errors
// as file:line, statistics, length histograms, tokenizer options and a filterable preview.

#include "enginecontroller.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QLabel;
class QLineEdit;
class QSortFilterProxyModel;
class QSpinBox;
class QTableView;
class PairTableModel;

class CorpusView : public QWidget {
    Q_OBJECT

public:
    CorpusView(EngineController* engine, QWidget* parent = nullptr);

    // Loads with the options currently set in the view.
    void load(const QString& path);
    QString currentPath() const { return m_path; }
    bool isLoaded() const { return m_loaded; }
    chatbench::TokenizerOptions tokenizerOptions() const;

    QLabel* errorLabel() const { return m_error; }
    QLabel* pairsLabel() const { return m_pairs; }
    QTableView* preview() const { return m_table; }
    QLineEdit* filter() const { return m_filter; }
    QCustomPlot* histogram() const { return m_hist; }

public Q_SLOTS:
    void openFile();
    void openFolder();
    void showError(const QString& message);

Q_SIGNALS:
    void loaded(const QString& path, int pairs);

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    void showSummary(const CorpusSummary& s);

    EngineController* m_engine;
    QComboBox* m_format = nullptr;
    QCheckBox* m_latin1 = nullptr;
    QComboBox* m_mode = nullptr;
    QSpinBox* m_minFreq = nullptr;
    QLabel* m_error = nullptr;
    QLabel* m_pathLabel = nullptr;
    QLabel* m_formatLabel = nullptr;
    QLabel* m_pairs = nullptr;
    QLabel* m_vocab = nullptr;
    QLabel* m_oov = nullptr;
    QLabel* m_warnings = nullptr;
    QCustomPlot* m_hist = nullptr;
    QLineEdit* m_filter = nullptr;
    QTableView* m_table = nullptr;
    PairTableModel* m_model = nullptr;
    QSortFilterProxyModel* m_proxy = nullptr;
    QString m_path;
    bool m_loaded = false;
};
