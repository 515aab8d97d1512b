#pragma once
// The Corpus tab: open a file or folder (dialogs or drag and drop), the detected format, errors
// as file:line, the pairing and strictness, what loading skipped (each with the source around
// it), statistics, length histograms, tokenizer options and a filterable preview.

#include "enginecontroller.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QGroupBox;
class QListWidget;
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
    QListWidget* warningList() const { return m_warningList; }
    QLabel* sourceExcerpt() const { return m_source; }
    QComboBox* pairingBox() const { return m_pairing; }
    QCheckBox* strictBox() const { return m_strict; }
    QComboBox* formatBox() const { return m_format; }
    QCheckBox* latin1Box() const { return m_latin1; }
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
    void showWarning(int row); // the source around warning `row`, and the nearest kept pair

    EngineController* m_engine;
    QComboBox* m_format = nullptr;
    QCheckBox* m_latin1 = nullptr;
    QComboBox* m_pairing = nullptr;
    QCheckBox* m_strict = nullptr;
    QComboBox* m_mode = nullptr;
    QSpinBox* m_minFreq = nullptr;
    QLabel* m_error = nullptr;
    QLabel* m_pathLabel = nullptr;
    QLabel* m_formatLabel = nullptr;
    QLabel* m_pairs = nullptr;
    QLabel* m_vocab = nullptr;
    QLabel* m_oov = nullptr;
    QLabel* m_warnings = nullptr; // the summary line
    QGroupBox* m_warningBox = nullptr;
    QListWidget* m_warningList = nullptr;
    QLabel* m_source = nullptr;
    std::vector<chatbench::CorpusWarning> m_warningItems;
    QCustomPlot* m_hist = nullptr;
    QLineEdit* m_filter = nullptr;
    QTableView* m_table = nullptr;
    PairTableModel* m_model = nullptr;
    QSortFilterProxyModel* m_proxy = nullptr;
    QString m_path;
    bool m_loaded = false;
};
