#pragma once
// The workbench window: Corpus, Train and Chat tabs around one EngineController.

#include <QMainWindow>

class ChatView;
class CompareView;
class CorpusView;
class EngineController;
class GuidedTour;
class QLabel;
class QTabWidget;
class TrainView;

class MainWindow : public QMainWindow {
    Q_OBJECT

public:
    // `runsDir` empty: the runs folder from the settings (default: the app's data folder). One
    // given (chatbench --runs DIR) holds for this window only: it is not saved in the settings.
    explicit MainWindow(const QString& runsDir = QString(), QWidget* parent = nullptr);
    ~MainWindow() override;

    // Opens the last corpus (or `fallbackCorpus` the first time) and the last run, from settings.
    void restore(const QString& fallbackCorpus);
    // File → Import Keras model…: asks for the files, then imports (engine thread), loads the run
    // and shows what was mapped with the handoff diagnosis on the loaded corpus' prompts.
    void importKeras();
    void importKerasFiles(const QString& model, const QString& tokenizer, const QString& startWord,
        const QString& endWord, const QString& runDir);

    EngineController* engine() const { return m_engine; }
    CorpusView* corpusView() const { return m_corpus; }
    TrainView* trainView() const { return m_train; }
    ChatView* chatView() const { return m_chat; }
    CompareView* compareView() const { return m_compare; }
    QTabWidget* tabs() const { return m_tabs; }
    QString lastError() const { return m_lastError; }
    // Help → Guided tour (F1): a short walk through the four tabs.
    void showGuidedTour();
    GuidedTour* guidedTour() const { return m_tour; }

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void showError(const QString& message);
    void saveSettings();

    EngineController* m_engine = nullptr;
    QTabWidget* m_tabs = nullptr;
    CorpusView* m_corpus = nullptr;
    TrainView* m_train = nullptr;
    ChatView* m_chat = nullptr;
    CompareView* m_compare = nullptr;
    QLabel* m_statusDevice = nullptr;
    GuidedTour* m_tour = nullptr;
    QString m_lastError;
    QStringList m_lastImport; // the import dialog's fields as last given: model, tokenizer, start, end, run
    bool m_runsGiven = false; // the runs folder came from the command line
};
