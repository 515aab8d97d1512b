#pragma once
// The Chat tab: message bubbles, decoding options, the "break the handoff" switch, the
// reply-diversity probe, and the handoff view of the selected bot reply.

#include "enginecontroller.h"

#include <QMap>
#include <QWidget>

class HandoffView;
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QScrollArea;
class QSpinBox;
class QTableWidget;
class QVBoxLayout;

class ChatView : public QWidget {
    Q_OBJECT

public:
    ChatView(EngineController* engine, QWidget* parent = nullptr);

    chatbench::DecodeOptions decodeOptions() const;
    // Questions the diversity probe asks (the loaded corpus' first prompts by default).
    void setProbeQuestions(const QStringList& questions) { m_probeQuestions = questions; }
    QStringList probeQuestions() const { return m_probeQuestions; }

    HandoffView* handoffView() const { return m_handoff; }
    QLineEdit* input() const { return m_input; }
    QScrollArea* chatScroll() const { return m_scroll; }
    QComboBox* methodBox() const { return m_method; } // greedy, beam, sample
    QSpinBox* beamBox() const { return m_beam; }
    QDoubleSpinBox* temperatureBox() const { return m_temperature; }
    QSpinBox* topKBox() const { return m_topK; }
    QCheckBox* breakSwitch() const { return m_break; }
    QComboBox* breakMode() const { return m_breakMode; }
    QLabel* probeLabel() const { return m_probeLabel; }
    QPushButton* probeButton() const { return m_probe; }
    // The probe's questions with the reply under the correct handoff and under the broken one.
    QTableWidget* probeTable() const { return m_probeTable; }
    // Which weights of the open run answer: 0 the latest checkpoint, 1 the best-validation ones.
    QComboBox* weightsBox() const { return m_weights; }
    int botMessages() const { return m_answers.size(); }
    // The answer the handoff view shows (0: none).
    quint64 shownAnswer() const { return m_shown; }
    // How many of the newest answers keep their weights for explanations and what-if branches.
    static constexpr int kAnswersExplained = 8;

public Q_SLOTS:
    void send();
    void ask(const QString& text);
    void runProbe();
    void selectAnswer(quint64 id);

private:
    void addBubble(const QString& text, bool bot, quint64 id, const chatbench::TraceChecks* checks = nullptr);
    void addNote(const QString& text); // a centred line between messages (another model answers from here)
    void showProbeTable();

    EngineController* m_engine;
    QScrollArea* m_scroll = nullptr;
    bool m_followNewest = true; // keep the newest message in view
    QWidget* m_messages = nullptr;
    QVBoxLayout* m_messagesLayout = nullptr;
    QLineEdit* m_input = nullptr;
    QPushButton* m_send = nullptr;
    QComboBox* m_method = nullptr;
    QSpinBox* m_beam = nullptr;
    QDoubleSpinBox* m_temperature = nullptr;
    QSpinBox* m_topK = nullptr;
    QCheckBox* m_break = nullptr;
    QComboBox* m_breakMode = nullptr;
    QPushButton* m_probe = nullptr;
    QLabel* m_probeLabel = nullptr;
    QTableWidget* m_probeTable = nullptr;
    QComboBox* m_weights = nullptr;
    QString m_runDir; // the run open for chat (empty while chatting with training snapshots)
    QLabel* m_botLabel = nullptr;
    HandoffView* m_handoff = nullptr;
    QMap<quint64, ChatAnswer> m_answers;
    quint64 m_shown = 0;
    // The shown answer's explanation, asked for unless it is here or on its way; with the nearest
    // prompts only while their tab is open (the first search for a set of weights builds an index
    // in the chat thread, and replies asked meanwhile wait).
    void requestExplanation();
    bool neighboursWanted() const;
    QMap<quint64, ExplainResult> m_explanations; // per answer, the latest (neighbours at the metric shown)
    QMap<quint64, bool> m_explaining; // answers whose explanation is on its way (true: with neighbours)
    QMap<quint64, std::vector<chatbench::Branch>> m_branches; // per answer, its what-if branches
    QStringList m_asked; // the questions asked, for the comparison
    QStringList m_probeQuestions;
    QString m_probeCorrect;
    QString m_probeBroken;
    ProbeResult m_probeWith; // the last probe with the correct handoff
    ProbeResult m_probeWithout; // the last probe with a broken one
};
