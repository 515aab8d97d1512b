#pragma once
// The handoff view of one reply: how the encoder's final (h, c) became the decoder's initial
// state and was carried step to step.
//
// On top the three checks as badges and a strip (encoder tokens → (h, c) → decoder steps); below,
// tabs with heatmaps (units × steps) of h and c, norms and mean gate activations over the steps,
// the top-k next-token probabilities of a chosen step, and attention weights when the model has
// attention.

#include "chatbench/chatbot.h"
#include "chatbench/explain.h"

#include <QWidget>

class QCustomPlot;
class QLabel;
class QSpinBox;
class QTabWidget;
class QToolButton;
class HandoffStrip;
class WhatIfView;
class BeamTreeView;
class NeighboursView;
class QuestionsView;

class HandoffView : public QWidget {
    Q_OBJECT

public:
    explicit HandoffView(QWidget* parent = nullptr);

    void showReply(const QString& prompt, const chatbench::Reply& reply);
    // Why this reply: occlusion bars under the encoder words and the nearest training prompts.
    void showExplanation(const chatbench::Explanation& explanation);
    void addBranch(const chatbench::Branch& branch); // a what-if branch of the reply shown
    // The reply shown cannot be explained (`why`): the explaining tabs say so and take no input.
    void explanationUnavailable(const QString& why);
    void clear();
    // Which word's occlusion bar the strip draws, relative heights in [0, 1] (empty: none).
    std::vector<double> occlusionBars() const;
    bool hasReply() const { return m_hasReply; }

    // Badge i (0 handoff, 1 carried, 2 teacher-forced): whether it shows a pass.
    bool badgePasses(int i) const;
    QLabel* badge(int i) const;
    QLabel* titleLabel() const { return m_title; }
    QTabWidget* tabs() const { return m_tabs; }
    QCustomPlot* hHeatmap() const { return m_h; }
    QCustomPlot* gatesPlot() const { return m_gates; }
    QToolButton* helpButton() const { return m_helpButton; }
    WhatIfView* whatIfView() const { return m_whatIf; }
    BeamTreeView* beamTreeView() const { return m_beamTree; }
    NeighboursView* neighboursView() const { return m_neighbours; }
    QuestionsView* questionsView() const { return m_questions; }

private:
    void showStep(int step);

    QLabel* m_title = nullptr;
    QToolButton* m_helpButton = nullptr;
    QLabel* m_help = nullptr; // what h and c are, what the checks prove
    QLabel* m_badges[3] = {};
    bool m_pass[3] = {};
    HandoffStrip* m_strip = nullptr;
    QTabWidget* m_tabs = nullptr;
    QCustomPlot* m_h = nullptr;
    QCustomPlot* m_c = nullptr;
    QCustomPlot* m_norms = nullptr;
    QCustomPlot* m_gates = nullptr;
    QCustomPlot* m_topk = nullptr;
    QCustomPlot* m_attention = nullptr;
    QSpinBox* m_step = nullptr;
    QLabel* m_stepLabel = nullptr;
    WhatIfView* m_whatIf = nullptr;
    BeamTreeView* m_beamTree = nullptr;
    NeighboursView* m_neighbours = nullptr;
    QuestionsView* m_questions = nullptr;
    chatbench::Reply m_reply;
    bool m_hasReply = false;
};
