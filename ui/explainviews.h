#pragma once
// The "why this reply" tabs of the handoff view, each showing numbers the engine computed
// (chatbench/explain.h):
//
//   WhatIfView      a decoder step's candidates; click one (or type a word) to force it there and
//                   see the branch beside the original, with both probabilities and the checks
//   BeamTreeView    every hypothesis a beam search kept and pruned, the reply's path highlighted;
//                   click a node for its state
//   NeighboursView  the training prompts whose encoder state is nearest (cosine or L2)
//   QuestionsView   two questions: both encoder final states, their distance, and their replies
//                   with the state handed over and with the decoder started from zeros

#include "chatbench/explain.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QHBoxLayout;
class QLabel;
class QLineEdit;
class QPushButton;
class QScrollArea;
class QSpinBox;
class QTableWidget;
class BranchStrip;
class TreeCanvas;

class WhatIfView : public QWidget {
    Q_OBJECT

public:
    explicit WhatIfView(QWidget* parent = nullptr);

    void setReply(const chatbench::Reply& reply); // the original; forgets earlier branches
    void addBranch(const chatbench::Branch& branch);
    void clear();

    int branches() const { return static_cast<int>(m_branches.size()); }
    int step() const; // the step whose candidates are shown (0-based)
    void setStep(int step);
    // The candidate buttons of the shown step, most likely first.
    QList<QPushButton*> candidateButtons() const { return m_buttons; }

Q_SIGNALS:
    // A candidate clicked (`token` its id) or a word typed (`token` -1: the engine looks it up).
    void forceRequested(int step, qint64 token, const QString& word);

private:
    void showCandidates();

    QSpinBox* m_step = nullptr;
    QLabel* m_stepInfo = nullptr;
    QHBoxLayout* m_candidates = nullptr;
    QList<QPushButton*> m_buttons;
    QLineEdit* m_word = nullptr;
    QPushButton* m_force = nullptr;
    BranchStrip* m_strip = nullptr;
    chatbench::Reply m_reply;
    std::vector<chatbench::Branch> m_branches;
};

class BeamTreeView : public QWidget {
    Q_OBJECT

public:
    explicit BeamTreeView(QWidget* parent = nullptr);

    void setTree(const std::vector<chatbench::BeamNode>& tree);
    void selectNode(int node);
    int selectedNode() const { return m_selected; }
    const std::vector<chatbench::BeamNode>& tree() const { return m_tree; }
    QCheckBox* showPruned() const { return m_pruned; }

private:
    TreeCanvas* m_canvas = nullptr;
    QScrollArea* m_scroll = nullptr;
    QCheckBox* m_pruned = nullptr;
    QLabel* m_summary = nullptr;
    QLabel* m_node = nullptr;
    QCustomPlot* m_state = nullptr;
    std::vector<chatbench::BeamNode> m_tree;
    int m_selected = -1;
};

class NeighboursView : public QWidget {
    Q_OBJECT

public:
    explicit NeighboursView(QWidget* parent = nullptr);

    void setExplanation(const chatbench::Explanation& e);
    void showNote(const QString& note, bool warning = true); // no neighbours (yet), and why
    void clear();
    chatbench::StateMetric metric() const;
    QTableWidget* table() const { return m_table; }
    QComboBox* metricBox() const { return m_metric; }
    QLabel* summary() const { return m_summary; }

Q_SIGNALS:
    void metricChanged(chatbench::StateMetric metric);

private:
    QComboBox* m_metric = nullptr;
    QLabel* m_summary = nullptr;
    QTableWidget* m_table = nullptr;
};

class QuestionsView : public QWidget {
    Q_OBJECT

public:
    explicit QuestionsView(QWidget* parent = nullptr);

    // The questions asked so far, offered in both boxes (either may also be typed).
    void setQuestions(const QStringList& questions);
    void showComparison(const chatbench::QuestionComparison& q);
    void compare(); // asks for the two questions in the boxes
    QComboBox* first() const { return m_a; }
    QComboBox* second() const { return m_b; }
    QLabel* verdict() const { return m_verdict; }

Q_SIGNALS:
    void compareRequested(const QString& a, const QString& b);

private:
    QComboBox* m_a = nullptr;
    QComboBox* m_b = nullptr;
    QPushButton* m_go = nullptr;
    QCustomPlot* m_h = nullptr;
    QCustomPlot* m_c = nullptr;
    QTableWidget* m_replies = nullptr;
    QLabel* m_verdict = nullptr;
};
