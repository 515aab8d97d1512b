#include "handoffview.h"

#include "explainviews.h"
#include "heatmap.h"
#include "plotaxes.h"
#include "qcp.h"
#include "shown.h"

#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QPainter>
#include <QScrollArea>
#include <QSpinBox>
#include <QTabWidget>
#include <QToolButton>
#include <QToolTip>
#include <QVBoxLayout>

#include <cmath>

using namespace chatbench;

namespace {

double norm(const std::vector<float>& v)
{
    double s = 0;
    for (float x : v)
        s += static_cast<double>(x) * x;
    return std::sqrt(s);
}

double mean(const std::vector<float>& v)
{
    double s = 0;
    for (float x : v)
        s += x;
    return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// Steps and units are whole numbers: no "12.5" ticks.
void wholeNumberTicks(QCPAxis* axis)
{
    QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
    ticker->setTickStep(1);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    axis->setTicker(ticker);
}

QCustomPlot* makePlot(const QString& x, const QString& y)
{
    auto* p = new QCustomPlot;
    p->xAxis->setLabel(x);
    p->yAxis->setLabel(y);

    p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    return p;
}

} // namespace

// Encoder tokens → (h, c) → decoder steps, one box each, painted in a scrollable strip.
// Under each encoder word, a bar: how far dropping that word moves the encoder's final (h, c).
class HandoffStrip : public QWidget {
public:
    HandoffStrip() { setMinimumHeight(126); }

    void setOcclusion(std::vector<Occlusion> occlusion)
    {
        m_occlusion = std::move(occlusion);
        update();
    }
    // Bar heights relative to the tallest, in source order; empty when there are none to draw.
    std::vector<double> bars() const
    {
        std::vector<double> out;
        if (!m_reply || m_occlusion.size() != m_reply->trace.inputWords.size())
            return out;
        double most = 1e-12;
        for (const Occlusion& o : m_occlusion)
            most = std::max(most, o.stateChange);
        for (const Occlusion& o : m_occlusion)
            out.push_back(o.stateChange / most);
        return out;
    }

    void setReply(const Reply* r)
    {
        m_reply = r;
        m_occlusion.clear();
        int w = 40;
        if (r) {
            QFontMetrics fm(font());
            for (const auto& word : r->trace.inputWords)
                w += fm.horizontalAdvance(shownText(word)) + 26;
            w += 150;
            for (const auto& s : r->trace.steps)
                w += fm.horizontalAdvance(QString::fromStdString(s.chosenWord)) + 30;
        }
        setMinimumWidth(w);
        update();
    }

protected:
    bool event(QEvent* e) override
    {
        if (e->type() == QEvent::ToolTip) {
            auto* help = static_cast<QHelpEvent*>(e);
            for (size_t i = 0; i < m_barRects.size() && i < m_occlusion.size(); ++i)
                if (m_barRects[i].adjusted(-4, -4, 4, 4).contains(help->pos())) {
                    const Occlusion& o = m_occlusion[i];
                    QToolTip::showText(help->globalPos(),
                        tr("Without “%1”: the encoder's final (h, c) moves by %2 (%3% of its length); %4.\n"
                           "Gradient × input of the reply's first word's log-probability here: %5")
                            .arg(QString::fromStdString(o.word))
                            .arg(o.stateChange, 0, 'f', 3)
                            .arg(100 * o.relativeChange, 0, 'f', 1)
                            .arg(o.replyChanged
                                    ? tr("the greedy reply becomes “%1”").arg(QString::fromStdString(o.reply))
                                    : tr("the greedy reply stays the same"))
                            .arg(o.gradientTimesInput, 0, 'f', 4),
                        this);
                    return true;
                }
            QToolTip::hideText();
            e->ignore();
            return true;
        }
        return QWidget::event(e);
    }

    void paintEvent(QPaintEvent*) override
    {
        QPainter p(this);
        p.setRenderHint(QPainter::Antialiasing);
        p.fillRect(rect(), QColor(250, 250, 252));
        m_barRects.clear();
        if (!m_reply) {
            p.setPen(Qt::gray);
            p.drawText(rect(), Qt::AlignCenter, tr("Click a bot reply to see its state handoff"));
            return;
        }
        const StateTrace& t = m_reply->trace;
        const QFontMetrics fm(font());
        const int y = 34, h = 30;
        int x = 10;
        auto box = [&](const QString& text, const QColor& fill, const QColor& border) {
            const int w = fm.horizontalAdvance(text) + 16;
            p.setPen(QPen(border, 1.2));
            p.setBrush(fill);
            p.drawRoundedRect(QRectF(x, y, w, h), 5, 5);
            p.setPen(Qt::black);
            p.drawText(QRectF(x, y, w, h), Qt::AlignCenter, text);
            x += w;
            return w;
        };
        auto arrow = [&](const QColor& c, int len = 14) {
            p.setPen(QPen(c, 2));
            p.drawLine(x + 2, y + h / 2, x + len - 2, y + h / 2);
            p.drawLine(x + len - 6, y + h / 2 - 4, x + len - 2, y + h / 2);
            p.drawLine(x + len - 6, y + h / 2 + 4, x + len - 2, y + h / 2);
            x += len;
        };
        p.setPen(Qt::darkGray);
        p.drawText(10, 20, tr("encoder"));
        const QSet<QString> unknown = [&] {
            QSet<QString> s;
            for (const auto& w : t.unknownWords)
                s << shownText(w);
            return s;
        }();
        const std::vector<double> heights = bars();
        for (size_t i = 0; i < t.inputWords.size(); ++i) {
            const QString w = shownText(t.inputWords[i]);
            const int left = x;
            const int bw
                = box(w, unknown.contains(w) ? QColor(255, 230, 200) : QColor(225, 235, 250), QColor(120, 150, 200));
            if (i < heights.size()) {
                // The occlusion bar: red when the reply changes without the word.
                const Occlusion& o = m_occlusion[i];
                const int full = 22, bh = std::max(2, static_cast<int>(std::lround(full * heights[i])));
                const QRect bar(left + bw / 2 - 7, y + h + 4 + full - bh, 14, bh);
                p.setPen(Qt::NoPen);
                p.setBrush(o.replyChanged ? QColor(214, 96, 77) : QColor(120, 150, 200));
                p.drawRect(bar);
                m_barRects.push_back(bar);
                QFont small = font();
                small.setPointSizeF(font().pointSizeF() * 0.75);
                p.setFont(small);
                p.setPen(Qt::darkGray);
                p.drawText(QRect(left - 6, y + h + 4 + full, bw + 12, 14), Qt::AlignCenter,
                    QString::number(100 * o.relativeChange, 'f', 0) + "%");
                p.setFont(font());
            }
            arrow(QColor(120, 150, 200), 10);
        }
        if (!m_occlusion.empty()) {
            QFont small = font();
            small.setPointSizeF(font().pointSizeF() * 0.8);
            p.setFont(small);
            p.setPen(Qt::gray);
            p.drawText(10, height() - 6,
                !heights.empty() ? tr("bars: how far dropping each word moves the encoder's final (h, c); red: the "
                                      "greedy reply changes without it (hover for numbers)")
                    : t.inputWords.empty()
                    ? tr("no occlusion bars: the tokenizer keeps no word of this message")
                    : tr("no occlusion bars: the model reads %1 of these %2 words (its tokenizer "
                         "drops unknown words)")
                          .arg(m_occlusion.size())
                          .arg(t.inputWords.size()));
            p.setFont(font());
        }
        if (t.inputWords.empty()) {
            box("<unk>", QColor(255, 230, 200), QColor(120, 150, 200));
            arrow(QColor(120, 150, 200), 10);
        }
        const bool ok = t.checks.handoffEqual;
        const double hn = t.encoderFinal.empty() ? 0 : norm(t.encoderFinal.back().h);
        const double cn = t.encoderFinal.empty() ? 0 : norm(t.encoderFinal.back().c);
        const int hx = x;
        box(QString("(h, c)  |h| %1  |c| %2").arg(hn, 0, 'f', 2).arg(cn, 0, 'f', 2), QColor(235, 225, 250),
            QColor(130, 90, 180));
        p.setPen(Qt::darkGray);
        p.drawText(hx, 20, tr("encoder final state"));
        const int ax = x;
        arrow(ok ? QColor(30, 150, 60) : QColor(210, 40, 30), 44);
        p.setPen(ok ? QColor(30, 150, 60) : QColor(210, 40, 30));
        p.drawText(ax, y + h + 16, ok ? tr("handed over") : tr("NOT handed over"));
        p.setPen(Qt::darkGray);
        p.drawText(x, 20, tr("decoder (input → chosen)"));
        for (size_t i = 0; i < t.steps.size(); ++i) {
            const auto& s = t.steps[i];
            const QString w = QString::fromStdString(s.chosenWord);
            box(w, s.chosenId == Tokenizer::kEnd ? QColor(235, 235, 235) : QColor(225, 245, 230), QColor(90, 160, 110));
            if (i + 1 < t.steps.size())
                arrow(t.checks.stateCarried ? QColor(90, 160, 110) : QColor(210, 40, 30), 12);
        }
    }

private:
    const Reply* m_reply = nullptr;
    std::vector<Occlusion> m_occlusion; // for m_reply's source words, when computed
    std::vector<QRect> m_barRects; // where the bars were drawn (for tooltips)
};

HandoffView::HandoffView(QWidget* parent)
    : QWidget(parent)
{
    m_title = new QLabel(tr("No reply selected"));
    QFont f = m_title->font();
    f.setBold(true);
    m_title->setFont(f);
    m_title->setWordWrap(true);
    m_title->setTextFormat(Qt::PlainText); // a question holding "<b>" is shown as typed
    auto* badges = new QHBoxLayout;
    for (int i = 0; i < 3; ++i) {
        m_badges[i] = new QLabel;
        m_badges[i]->setAlignment(Qt::AlignCenter);
        m_badges[i]->setMinimumHeight(40);
        m_badges[i]->setWordWrap(true);
        badges->addWidget(m_badges[i], 1);
    }
    m_strip = new HandoffStrip;
    auto* scroll = new QScrollArea;
    scroll->setWidget(m_strip);
    scroll->setWidgetResizable(true);
    scroll->setFixedHeight(156);

    m_h = makePlot(tr("step (encoder | decoder)"), tr("unit"));
    m_c = makePlot(tr("decoder step (0 = initial state)"), tr("unit"));
    for (QCPAxis* axis : { m_h->xAxis, m_h->yAxis, m_c->xAxis, m_c->yAxis })
        wholeNumberTicks(axis);
    auto* states = new QWidget;
    auto* statesLayout = new QVBoxLayout(states);
    statesLayout->setContentsMargins(0, 0, 0, 0);
    statesLayout->addWidget(new QLabel(tr("h of the top layer: encoder steps, then decoder steps")));
    statesLayout->addWidget(m_h, 1);
    statesLayout->addWidget(new QLabel(tr("c of the top layer: the decoder's initial state, then each step")));
    statesLayout->addWidget(m_c, 1);

    m_norms = makePlot(tr("decoder step (0 = initial state)"), tr("norm"));
    plotaxes::legendAbove(m_norms, 2, 150);
    m_gates = makePlot(tr("decoder step"), tr("mean activation"));
    plotaxes::legendAbove(m_gates, 4, 150);
    wholeNumberTicks(m_norms->xAxis);
    wholeNumberTicks(m_gates->xAxis);
    auto* dyn = new QWidget;
    auto* dynLayout = new QVBoxLayout(dyn);
    dynLayout->setContentsMargins(0, 0, 0, 0);
    dynLayout->addWidget(m_norms, 1);
    dynLayout->addWidget(m_gates, 1);

    m_topk = makePlot(QString(), tr("probability"));
    m_step = new QSpinBox;
    m_step->setToolTip(tr("Which decoder step's candidates to show"));
    m_stepLabel = new QLabel;
    auto* topkBox = new QWidget;
    auto* topkLayout = new QVBoxLayout(topkBox);
    topkLayout->setContentsMargins(0, 0, 0, 0);
    auto* stepBar = new QHBoxLayout;
    stepBar->addWidget(new QLabel(tr("decoder step")));
    stepBar->addWidget(m_step);
    stepBar->addWidget(m_stepLabel, 1);
    topkLayout->addLayout(stepBar);
    topkLayout->addWidget(m_topk, 1);

    m_attention = makePlot(tr("source token"), tr("decoder step"));

    m_tabs = new QTabWidget;
    m_tabs->addTab(states, tr("h and c heatmaps"));
    m_tabs->addTab(dyn, tr("norms and gates"));
    m_tabs->addTab(topkBox, tr("top-k per step"));
    m_tabs->addTab(m_attention, tr("attention"));
    m_whatIf = new WhatIfView;
    m_beamTree = new BeamTreeView;
    m_neighbours = new NeighboursView;
    m_questions = new QuestionsView;
    m_tabs->addTab(m_whatIf, tr("what if"));
    m_tabs->addTab(m_beamTree, tr("beam tree"));
    m_tabs->addTab(m_neighbours, tr("nearest prompts"));
    m_tabs->addTab(m_questions, tr("two questions"));
    m_tabs->setTabToolTip(4, tr("Force another word at any step and see where the reply goes"));
    m_tabs->setTabToolTip(5, tr("Every hypothesis a beam search kept and pruned"));
    m_tabs->setTabToolTip(6, tr("The training prompts whose encoder state this question lands next to"));
    m_tabs->setTabToolTip(7, tr("Two questions' encoder states and replies side by side"));

    m_helpButton = new QToolButton;
    m_helpButton->setText(tr("What am I looking at?"));
    m_helpButton->setCheckable(true);
    m_helpButton->setToolTip(tr("What h and c are, and what the three checks prove"));
    m_help = new QLabel(tr(
        "<b>h and c.</b> An LSTM reads a sentence word by word and keeps two vectors: <b>h</b>, the hidden "
        "state (what it outputs at each word), and <b>c</b>, the cell state (its longer-term memory). After the "
        "last word of your question, the encoder's final (h, c) is everything the model knows about it."
        "<br><b>The handoff.</b> The decoder must <i>start</i> from that (h, c) and carry its own state from "
        "each word to the next. If it starts from zeros instead, every question looks the same to it and the bot "
        "gives the same reply to everything: the bug this view catches."
        "<br><b>The three checks.</b> (1) the decoder's first state equals the encoder's last; (2) every step "
        "starts from the state the step before left; (3) decoding word by word gives the same numbers as the single "
        "pass used in training. Green means shown to hold on this reply, to within rounding; hover a badge for the "
        "numbers."
        "<br><b>Below.</b> The strip draws encoder words, then (h, c), then the reply's words. The heatmaps show every "
        "unit of h and c at every step (red positive, blue negative; the scale is on the right); then the state "
        "sizes and gate activations, the top candidates at each step, and attention when the model has it."));
    m_help->setWordWrap(true);
    m_help->setObjectName("handoffHelp");
    m_help->setStyleSheet(
        "QLabel { background: #f3f6fb; border: 1px solid #cfd6e3; border-radius: 4px; padding: 6px; }");
    m_help->hide();
    connect(m_helpButton, &QToolButton::toggled, m_help, &QWidget::setVisible);
    auto* titleBar = new QHBoxLayout;
    titleBar->addWidget(m_title, 1);
    titleBar->addWidget(m_helpButton, 0, Qt::AlignTop);

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(titleBar);
    layout->addWidget(m_help);
    layout->addLayout(badges);
    layout->addWidget(scroll);
    layout->addWidget(m_tabs, 1);

    connect(m_step, &QSpinBox::valueChanged, this, &HandoffView::showStep);
    clear();
}

QLabel* HandoffView::badge(int i) const
{
    return m_badges[i];
}

bool HandoffView::badgePasses(int i) const
{
    return m_pass[i];
}

void HandoffView::clear()
{
    m_hasReply = false;
    m_title->setText(tr("No reply selected — chat, then click a bot reply"));
    for (int i = 0; i < 3; ++i) {
        m_pass[i] = false;
        m_badges[i]->setText("—");
        m_badges[i]->setStyleSheet("QLabel { background: #eee; border-radius: 6px; padding: 4px; }");
    }
    m_strip->setReply(nullptr);
    m_whatIf->clear();
    m_beamTree->setTree({});
    m_neighbours->clear();
}

void HandoffView::showExplanation(const Explanation& e)
{
    if (!m_hasReply)
        return;
    m_strip->setOcclusion(e.occlusion);
    m_neighbours->setExplanation(e);
}

void HandoffView::explanationUnavailable(const QString& why)
{
    m_neighbours->showNote(why);
    m_whatIf->setEnabled(false);
    m_whatIf->setToolTip(why);
}

void HandoffView::addBranch(const Branch& branch)
{
    m_whatIf->addBranch(branch);
}

std::vector<double> HandoffView::occlusionBars() const
{
    return m_strip->bars();
}

void HandoffView::showReply(const QString& prompt, const Reply& reply)
{
    m_reply = reply;
    m_hasReply = true;
    const StateTrace& t = m_reply.trace;
    // A 600-word question took the title over and clipped it (the reply never showed): the
    // question is cut there, and whole in the tooltip.
    m_title->setText(tr("“%1” → “%2”   (%3, %4 layer(s) × %5 units, handoff %6)")
                         .arg(shownText(prompt, 160), shownText(m_reply.text, 240), QString::fromStdString(t.device))
                         .arg(t.layers)
                         .arg(t.hidden)
                         .arg(QString::fromStdString(handoffModeName(t.handoff))));
    m_title->setToolTip(shownText(prompt));
    const auto& c = t.checks;
    const bool pass[3] = { c.handoffEqual, c.stateCarried, c.teacherForcedEqual };
    // Plain words on the badge; the measured numbers in its tooltip.
    const QString texts[3] = {
        pass[0] ? tr("The decoder starts from the encoder's memory")
                : tr("The decoder does NOT start from the encoder's memory"),
        pass[1] ? tr("Each word continues from the state the last one left")
                : tr("The state is NOT carried from word to word"),
        pass[2] ? tr("Word-by-word decoding matches one pass over the whole reply")
                : tr("Word-by-word decoding differs from one pass over the whole reply"),
    };
    const QString tips[3] = {
        tr("Handoff check: the decoder's initial (h, c) equals the encoder's final (h, c) in every layer.\n"
           "max |decoder₀ − encoder final| = %1")
            .arg(c.handoffMaxDiff, 0, 'g', 3),
        tr("Carried check: each decoder step's input state equals the previous step's output state.\n"
           "max |in(t) − out(t−1)| = %1")
            .arg(c.carriedMaxDiff, 0, 'g', 3),
        tr("Teacher-forced check: the logits of the step-by-step loop equal those of one teacher-forced pass over "
           "the reply, as in training.\nmax |Δlogit| = %1 (tolerance %2: 1e-4 × the largest |logit|, at least 1e-4)")
            .arg(c.teacherForcedMaxDiff, 0, 'g', 3)
            .arg(c.teacherForcedTolerance, 0, 'g', 3),
    };
    for (int i = 0; i < 3; ++i) {
        m_pass[i] = pass[i];
        m_badges[i]->setToolTip(tips[i]);
        m_badges[i]->setText((pass[i] ? QString::fromUtf8("✔ ") : QString::fromUtf8("✘ ")) + texts[i]);
        m_badges[i]->setStyleSheet(pass[i] ? "QLabel { background: #d8f3dc; color: #1b5e20; border: 1px solid #8fd19e; "
                                             "border-radius: 6px; padding: 4px; }"
                                           : "QLabel { background: #fde2e1; color: #8a1c13; border: 1px solid #e8a39d; "
                                             "border-radius: 6px; padding: 4px; }");
    }
    m_strip->setReply(&m_reply);
    m_whatIf->setReply(m_reply);
    m_whatIf->setEnabled(true);
    m_whatIf->setToolTip(QString());
    m_beamTree->setTree(m_reply.beamTree);
    m_neighbours->clear();

    // Heatmaps: h over encoder then decoder steps; c from the decoder's initial state on.
    std::vector<std::vector<float>> hCols = t.encoderTopH;
    const int divider = static_cast<int>(hCols.size());
    std::vector<std::vector<float>> cCols;
    if (!t.decoderInitial.empty())
        cCols.push_back(t.decoderInitial.back().c);
    for (const auto& s : t.steps) {
        hCols.push_back(s.stateOut.back().h);
        cCols.push_back(s.stateOut.back().c);
    }
    fillHeatmap(m_h, hCols, divider, tr("handoff →"));
    fillHeatmap(m_c, cCols, 1, tr("decoder steps →"));

    // Norms and gates over the steps.
    m_norms->clearGraphs();
    m_gates->clearGraphs();
    QVector<double> x, hn, cn;
    if (!t.decoderInitial.empty()) {
        x << 0;
        hn << norm(t.decoderInitial.back().h);
        cn << norm(t.decoderInitial.back().c);
    }
    QVector<double> gx, gi, gf, gg, go;
    for (size_t i = 0; i < t.steps.size(); ++i) {
        const auto& s = t.steps[i];
        x << static_cast<double>(i + 1);
        hn << norm(s.stateOut.back().h);
        cn << norm(s.stateOut.back().c);
        gx << static_cast<double>(i + 1);
        gi << mean(s.inputGate);
        gf << mean(s.forgetGate);
        gg << mean(s.cellGate);
        go << mean(s.outputGate);
    }
    auto line = [](QCustomPlot* p, const QString& name, const QVector<double>& xs, const QVector<double>& ys,
                    const QColor& c) {
        auto* g = p->addGraph();
        g->setName(name);
        g->setPen(QPen(c, 2));
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 4));
        g->setData(xs, ys);
    };
    line(m_norms, tr("|h| (top layer)"), x, hn, QColor(40, 100, 200));
    line(m_norms, tr("|c| (top layer)"), x, cn, QColor(130, 90, 180));
    line(m_gates, tr("input gate σ(i)"), gx, gi, QColor(40, 150, 70));
    line(m_gates, tr("forget gate σ(f)"), gx, gf, QColor(210, 120, 20));
    line(m_gates, tr("cell candidate tanh(g)"), gx, gg, QColor(120, 120, 120));
    line(m_gates, tr("output gate σ(o)"), gx, go, QColor(40, 100, 200));
    plotaxes::fit(m_norms->yAxis, plotaxes::merge(plotaxes::span(hn), plotaxes::span(cn)));
    m_norms->yAxis->setRangeLower(std::min(0.0, m_norms->yAxis->range().lower));
    // Gates are sigmoids in (0, 1), the cell candidate a tanh in (-1, 1): the whole possible range.
    m_gates->yAxis->setRange(-1.08, 1.08);
    for (auto* p : { m_norms, m_gates }) {
        p->xAxis->setRange(-0.5, static_cast<double>(t.steps.size()) + 0.5);
        p->replot();
    }

    // Attention: decoder steps × source tokens.
    m_attention->clearPlottables();
    if (!t.steps.empty() && !t.steps.front().attention.empty()) {
        auto* map = new QCPColorMap(m_attention->xAxis, m_attention->yAxis);
        const int ns = static_cast<int>(t.steps.front().attention.size()), nt = static_cast<int>(t.steps.size());
        map->data()->setSize(ns, nt);
        map->data()->setRange(QCPRange(0, ns - 1), QCPRange(0, nt - 1));
        for (int y = 0; y < nt; ++y)
            for (int xk = 0; xk < ns; ++xk)
                map->data()->setCell(xk, y, t.steps[static_cast<size_t>(y)].attention[static_cast<size_t>(xk)]);
        map->setGradient(QCPColorGradient::gpHot);
        map->setDataRange(QCPRange(0, 1));
        attachColorScale(m_attention, map, tr("attention weight"));
        QSharedPointer<QCPAxisTickerText> ticks(new QCPAxisTickerText);
        for (int k = 0; k < ns && k < static_cast<int>(t.inputWords.size()); ++k)
            ticks->addTick(k, shownText(t.inputWords[static_cast<size_t>(k)], 24));
        m_attention->xAxis->setTicker(ticks);
        m_attention->xAxis->setRange(-0.5, ns - 0.5);
        m_attention->yAxis->setRange(-0.5, nt - 0.5);
        m_tabs->setTabEnabled(3, true);
    } else {
        m_tabs->setTabEnabled(3, false);
    }
    m_attention->replot();

    m_step->setRange(1, std::max<int>(1, static_cast<int>(t.steps.size())));
    m_step->setValue(1);
    showStep(1);
}

void HandoffView::showStep(int step)
{
    m_topk->clearPlottables();
    if (!m_hasReply || step < 1 || step > static_cast<int>(m_reply.trace.steps.size())) {
        m_topk->replot();
        return;
    }
    const DecoderStep& s = m_reply.trace.steps[static_cast<size_t>(step - 1)];
    m_stepLabel->setText(tr("input “%1” → chosen “%2”  (%3 ms)")
                             .arg(QString::fromStdString(s.inputWord), QString::fromStdString(s.chosenWord))
                             .arg(s.milliseconds, 0, 'f', 2));
    auto* bars = new QCPBars(m_topk->xAxis, m_topk->yAxis);
    QSharedPointer<QCPAxisTickerText> ticks(new QCPAxisTickerText);
    QVector<double> x, y;
    for (size_t k = 0; k < s.topK.size(); ++k) {
        x << static_cast<double>(k);
        y << s.topK[k].probability;
        ticks->addTick(static_cast<double>(k), QString::fromStdString(s.topK[k].word));
    }
    bars->setData(x, y);
    bars->setBrush(QColor(40, 100, 200, 170));
    bars->setPen(Qt::NoPen);
    m_topk->xAxis->setTicker(ticks);
    m_topk->xAxis->setRange(-0.6, static_cast<double>(s.topK.size()) - 0.4);
    m_topk->yAxis->setRange(0, 1.05);
    m_topk->replot();
}
