#include "explainviews.h"

#include "heatmap.h"
#include "qcp.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMouseEvent>
#include <QPainter>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>

#include <cmath>
#include <functional>
#include <map>

using namespace chatbench;

namespace {

QString q(const std::string& s)
{
    return QString::fromStdString(s);
}

double norm(const std::vector<float>& v)
{
    double s = 0;
    for (float x : v)
        s += static_cast<double>(x) * x;
    return std::sqrt(s);
}

// ✔/✘ for the three handoff checks, in one line.
QString checksLine(const TraceChecks& c)
{
    auto mark = [](bool ok) { return ok ? QString::fromUtf8("✔") : QString::fromUtf8("✘"); };
    return QObject::tr("%1 handoff  %2 carried  %3 step-wise = teacher-forced")
        .arg(mark(c.handoffEqual), mark(c.stateCarried), mark(c.teacherForcedEqual));
}

QTableWidgetItem* cell(const QString& text, const QString& tip = {})
{
    auto* item = new QTableWidgetItem(text);
    item->setToolTip(tip.isEmpty() ? text : tip);
    return item;
}

} // namespace

// ---- what if --------------------------------------------------------------------------------

// The original reply and each branch as rows of word boxes, one column per decoder step.
class BranchStrip : public QWidget {
public:
    std::function<void(int)> onStepClicked;

    void set(const Reply* original, const std::vector<Branch>* branches)
    {
        m_original = original;
        m_branches = branches;
        // Column widths: the widest word any row has at that step.
        m_columns.clear();
        const QFontMetrics fm(font());
        auto widen = [&](const Reply& r) {
            for (size_t t = 0; t < r.trace.steps.size(); ++t) {
                if (m_columns.size() <= t)
                    m_columns.push_back(40);
                m_columns[t] = std::max(m_columns[t], fm.horizontalAdvance(q(r.trace.steps[t].chosenWord)) + 18);
            }
        };
        if (original)
            widen(*original);
        if (branches)
            for (const Branch& b : *branches)
                widen(b.reply);
        int w = kLeft + 20;
        for (int c : m_columns)
            w += c + kGap;
        setMinimumSize(w, kTop + kRow * (1 + (branches ? static_cast<int>(branches->size()) : 0)) + 10);
        update();
    }

protected:
    static constexpr int kLeft = 150, kTop = 8, kRow = 62, kBox = 28, kGap = 6;

    int columnX(size_t t) const
    {
        int x = kLeft;
        for (size_t k = 0; k < t && k < m_columns.size(); ++k)
            x += m_columns[k] + kGap;
        return x;
    }

    void paintEvent(QPaintEvent*) override
    {
        QPainter p(this);
        p.setRenderHint(QPainter::Antialiasing);
        p.fillRect(rect(), QColor(250, 250, 252));
        if (!m_original) {
            p.setPen(Qt::gray);
            p.drawText(rect(), Qt::AlignCenter, tr("Click a bot reply, then a candidate word above"));
            return;
        }
        auto row = [&](int r, const QString& label, const Reply& reply, int forcedAt) {
            const int y = kTop + r * kRow;
            p.setPen(Qt::black);
            p.drawText(QRect(6, y, kLeft - 12, kBox), Qt::AlignVCenter | Qt::AlignLeft, label);
            for (size_t t = 0; t < reply.trace.steps.size(); ++t) {
                const DecoderStep& s = reply.trace.steps[t];
                const int ti = static_cast<int>(t);
                QColor fill(225, 245, 230), border(90, 160, 110);
                if (forcedAt >= 0 && ti < forcedAt) {
                    fill = QColor(238, 238, 238); // shared with the reply
                    border = QColor(180, 180, 180);
                } else if (ti == forcedAt) {
                    fill = QColor(255, 224, 178);
                    border = QColor(230, 120, 20);
                } else if (s.chosenId == Tokenizer::kEnd) {
                    fill = QColor(235, 235, 235);
                }
                const QRect box(columnX(t), y, m_columns[t], kBox);
                p.setPen(QPen(border, ti == forcedAt ? 2.0 : 1.2));
                p.setBrush(fill);
                p.drawRoundedRect(box, 5, 5);
                p.setPen(Qt::black);
                p.drawText(box, Qt::AlignCenter, q(s.chosenWord));
            }
            p.setPen(QColor(90, 90, 90));
            p.drawText(QRect(kLeft, y + kBox + 2, width() - kLeft, 18), Qt::AlignLeft | Qt::AlignVCenter,
                tr("p(reply) = %1  (log p %2)   %3")
                    .arg(std::exp(reply.logProbability), 0, 'g', 3)
                    .arg(reply.logProbability, 0, 'f', 3)
                    .arg(checksLine(reply.trace.checks)));
        };
        row(0, tr("reply"), *m_original, -1);
        if (m_branches)
            for (size_t b = 0; b < m_branches->size(); ++b) {
                const Branch& br = (*m_branches)[b];
                row(static_cast<int>(b) + 1, tr("step %1 → “%2”").arg(br.step).arg(q(br.forcedWord)), br.reply,
                    br.step);
            }
    }

    void mousePressEvent(QMouseEvent* e) override
    {
        if (!m_original || !onStepClicked)
            return;
        const QPoint at = e->position().toPoint();
        if (at.y() < kTop || at.y() > kTop + kBox)
            return;
        for (size_t t = 0; t < m_original->trace.steps.size(); ++t)
            if (at.x() >= columnX(t) && at.x() < columnX(t) + m_columns[t])
                onStepClicked(static_cast<int>(t));
    }

private:
    const Reply* m_original = nullptr;
    const std::vector<Branch>* m_branches = nullptr;
    std::vector<int> m_columns;
};

WhatIfView::WhatIfView(QWidget* parent)
    : QWidget(parent)
{
    m_step = new QSpinBox;
    m_step->setPrefix(tr("step "));
    m_step->setToolTip(tr("The decoder step to change (from 0); or click a word of the reply below"));
    m_stepInfo = new QLabel;
    auto* stepBar = new QHBoxLayout;
    stepBar->addWidget(new QLabel(tr("What if the decoder had said another word at")));
    stepBar->addWidget(m_step);
    stepBar->addWidget(m_stepInfo, 1);

    m_candidates = new QHBoxLayout;
    m_word = new QLineEdit;
    m_word->setPlaceholderText(tr("or type a word"));
    m_word->setMaximumWidth(160);
    m_word->setToolTip(tr("A word of the model's vocabulary to force at the chosen step; Enter forces it"));
    m_force = new QPushButton(tr("Force"));
    m_force->setToolTip(tr("Decode again with this word at the chosen step"));
    auto* candidateBar = new QHBoxLayout;
    candidateBar->addLayout(m_candidates);
    candidateBar->addStretch();
    candidateBar->addWidget(m_word);
    candidateBar->addWidget(m_force);

    m_strip = new BranchStrip;
    m_strip->onStepClicked = [this](int t) { setStep(t); };
    auto* scroll = new QScrollArea;
    scroll->setWidget(m_strip);
    scroll->setWidgetResizable(true);

    auto* help = new QLabel(tr("The branch starts from the state the decoder had carried to that step, takes the "
                               "forced word, and decodes on; the steps before it are the reply's own (grey)."));
    help->setWordWrap(true);
    help->setStyleSheet("color: #555;");

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(stepBar);
    layout->addLayout(candidateBar);
    layout->addWidget(help);
    layout->addWidget(scroll, 1);

    connect(m_step, &QSpinBox::valueChanged, this, &WhatIfView::showCandidates);
    auto typed = [this] {
        if (!m_word->text().trimmed().isEmpty())
            Q_EMIT forceRequested(step(), -1, m_word->text().trimmed());
    };
    connect(m_force, &QPushButton::clicked, this, typed);
    connect(m_word, &QLineEdit::returnPressed, this, typed);
    clear();
}

int WhatIfView::step() const
{
    return m_step->value();
}

void WhatIfView::setStep(int step)
{
    m_step->setValue(step);
}

void WhatIfView::clear()
{
    m_reply = {};
    m_branches.clear();
    m_strip->set(nullptr, nullptr);
    m_step->setRange(0, 0);
    m_force->setEnabled(false);
    showCandidates();
}

void WhatIfView::setReply(const Reply& reply)
{
    m_reply = reply;
    m_branches.clear();
    const int steps = static_cast<int>(reply.trace.steps.size());
    m_step->setRange(0, std::max(0, steps - 1));
    m_force->setEnabled(steps > 0);
    m_strip->set(&m_reply, &m_branches);
    showCandidates();
}

void WhatIfView::addBranch(const Branch& branch)
{
    m_branches.push_back(branch);
    m_strip->set(&m_reply, &m_branches);
}

void WhatIfView::showCandidates()
{
    for (QPushButton* b : m_buttons)
        delete b;
    m_buttons.clear();
    const int t = step();
    if (t < 0 || static_cast<size_t>(t) >= m_reply.trace.steps.size()) {
        m_stepInfo->setText(tr("(no reply selected)"));
        return;
    }
    const DecoderStep& s = m_reply.trace.steps[static_cast<size_t>(t)];
    m_stepInfo->setText(tr("after “%1” it chose “%2”; its candidates:").arg(q(s.inputWord), q(s.chosenWord)));
    for (const TokenProbability& c : s.topK) {
        if (c.id == Tokenizer::kPad || c.id == Tokenizer::kStart)
            continue;
        auto* b = new QPushButton(QString("%1  %2%").arg(q(c.word)).arg(100.0 * c.probability, 0, 'f', 1));
        b->setToolTip(
            c.id == s.chosenId ? tr("The word chosen here") : tr("Force “%1” at step %2").arg(q(c.word)).arg(t));
        b->setEnabled(c.id != s.chosenId);
        connect(b, &QPushButton::clicked, this,
            [this, t, id = static_cast<qint64>(c.id), w = q(c.word)] { Q_EMIT forceRequested(t, id, w); });
        m_candidates->addWidget(b);
        m_buttons << b;
    }
}

// ---- beam tree ------------------------------------------------------------------------------

// The tree as the beam saw it: one column per step holding that step's candidates ranked by
// score (kept ones first, then the pruned when shown), each joined to the hypothesis it extends.
class TreeCanvas : public QWidget {
public:
    std::function<void(int)> onNodeClicked;

    void set(const std::vector<BeamNode>* tree, bool showPruned, int selected)
    {
        m_tree = tree;
        m_selected = selected;
        m_boxes.clear();
        if (!tree || tree->empty()) {
            setMinimumSize(200, 120);
            update();
            return;
        }
        const QFontMetrics fm(font());
        int column = 60;
        for (const BeamNode& b : *tree)
            column = std::max(column, fm.horizontalAdvance(q(b.word)) + 24);
        // Candidates are stored step by step, most likely first: kept ones take full rows at the
        // top of their column, pruned ones short rows below.
        std::map<int, std::pair<double, double>> next; // step → (y of the next kept row, of the next pruned row)
        std::map<int, int> keptIn;
        for (const BeamNode& b : *tree)
            keptIn[b.step] += b.kept;
        double bottom = 0;
        int maxStep = 0;
        for (size_t i = 0; i < tree->size(); ++i) {
            const BeamNode& b = (*tree)[i];
            if (!b.kept && !showPruned)
                continue;
            auto& [keptY, prunedY] = next.try_emplace(b.step, 10.0, 10.0 + keptIn[b.step] * kRow + 6).first->second;
            double& at = b.kept ? keptY : prunedY;
            const double h = b.kept ? kBox : kPrunedBox;
            m_boxes[static_cast<int>(i)] = QRectF(10 + b.step * (column + kGap), at, column, h);
            at += b.kept ? kRow : kPrunedRow;
            bottom = std::max(bottom, at);
            maxStep = std::max(maxStep, b.step);
        }
        setMinimumSize(20 + (maxStep + 1) * (column + kGap), static_cast<int>(bottom) + 10);
        update();
    }

    QRectF box(int node) const
    {
        auto it = m_boxes.find(node);
        return it == m_boxes.end() ? QRectF() : it->second;
    }

protected:
    static constexpr int kRow = 38, kBox = 32, kPrunedRow = 20, kPrunedBox = 17, kGap = 44;

    void paintEvent(QPaintEvent*) override
    {
        QPainter p(this);
        p.setRenderHint(QPainter::Antialiasing);
        p.fillRect(rect(), QColor(250, 250, 252));
        if (!m_tree || m_tree->empty()) {
            p.setPen(Qt::gray);
            p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap,
                tr("Decode with beam search (decoding → beam) and ask again: every hypothesis it kept and pruned "
                   "appears here."));
            return;
        }
        // Edges first, then the boxes over them.
        for (const auto& [i, box] : m_boxes) {
            const BeamNode& b = (*m_tree)[static_cast<size_t>(i)];
            if (b.parent < 0 || !m_boxes.count(b.parent))
                continue;
            const QRectF& from = m_boxes.at(b.parent);
            QPen pen(b.chosen ? QColor(30, 140, 60)
                    : b.kept  ? QColor(130, 130, 130)
                              : QColor(200, 200, 200),
                b.chosen ? 3.0 : 1.3, b.kept ? Qt::SolidLine : Qt::DashLine);
            p.setPen(pen);
            const QPointF a(from.right(), from.center().y()), z(box.left(), box.center().y());
            QPainterPath path(a);
            path.cubicTo(QPointF((a.x() + z.x()) / 2, a.y()), QPointF((a.x() + z.x()) / 2, z.y()), z);
            p.setBrush(Qt::NoBrush);
            p.drawPath(path);
        }
        QFont small = font();
        small.setPointSizeF(font().pointSizeF() * 0.8);
        for (const auto& [i, box] : m_boxes) {
            const BeamNode& b = (*m_tree)[static_cast<size_t>(i)];
            QColor fill = b.chosen ? QColor(205, 238, 214) : b.kept ? QColor(225, 235, 250) : QColor(255, 255, 255);
            QColor border = b.chosen ? QColor(30, 140, 60) : b.kept ? QColor(120, 150, 200) : QColor(190, 190, 190);
            if (b.forced)
                border = QColor(230, 120, 20);
            p.setPen(QPen(i == m_selected ? QColor(20, 60, 200) : border, i == m_selected ? 3.0 : 1.2,
                b.kept ? Qt::SolidLine : Qt::DashLine));
            p.setBrush(fill);
            p.drawRoundedRect(box, 5, 5);
            if (b.finished)
                p.drawRoundedRect(box.adjusted(3, 3, -3, -3), 3, 3);
            p.setPen(b.kept ? Qt::black : Qt::gray);
            if (!b.kept) { // one small line: the word and its score
                p.setFont(small);
                p.drawText(box, Qt::AlignCenter, QString("%1  %2").arg(q(b.word)).arg(b.score, 0, 'f', 1));
                p.setFont(font());
                continue;
            }
            QFont f = font();
            f.setBold(b.chosen);
            p.setFont(f);
            p.drawText(box.adjusted(0, 1, 0, -kBox / 2 + 2), Qt::AlignCenter, q(b.word));
            p.setFont(small);
            p.drawText(box.adjusted(0, kBox / 2, 0, 0), Qt::AlignCenter, QString::number(b.score, 'f', 2));
            p.setFont(font());
        }
    }

    void mousePressEvent(QMouseEvent* e) override
    {
        for (const auto& [i, box] : m_boxes)
            if (box.contains(e->position()) && onNodeClicked)
                onNodeClicked(i);
    }

private:
    const std::vector<BeamNode>* m_tree = nullptr;
    std::map<int, QRectF> m_boxes; // visible nodes
    int m_selected = -1;
};

BeamTreeView::BeamTreeView(QWidget* parent)
    : QWidget(parent)
{
    m_summary = new QLabel;
    m_summary->setWordWrap(true);
    m_pruned = new QCheckBox(tr("show pruned"));
    m_pruned->setChecked(true);
    m_pruned->setToolTip(tr("Also draw the candidates that fell out of the beam (dashed)"));
    auto* top = new QHBoxLayout;
    top->addWidget(m_summary, 1);
    top->addWidget(m_pruned);

    m_canvas = new TreeCanvas;
    m_canvas->onNodeClicked = [this](int n) { selectNode(n); };
    m_scroll = new QScrollArea;
    m_scroll->setWidget(m_canvas);
    m_scroll->setWidgetResizable(true);

    m_node = new QLabel(tr("Click a node to see its state."));
    m_node->setWordWrap(true);
    m_state = new QCustomPlot;
    m_state->setMinimumHeight(110);
    m_state->setMaximumHeight(130);
    m_state->xAxis->setLabel(tr("unit"));
    m_state->yAxis->setLabel(tr("value"));
    m_state->legend->setVisible(true);

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(top);
    layout->addWidget(m_scroll, 1);
    layout->addWidget(m_node);
    layout->addWidget(m_state);
    connect(m_pruned, &QCheckBox::toggled, this, [this] { m_canvas->set(&m_tree, m_pruned->isChecked(), m_selected); });
    setTree({});
}

void BeamTreeView::setTree(const std::vector<BeamNode>& tree)
{
    m_tree = tree;
    m_selected = -1;
    int kept = 0, pruned = 0, finished = 0;
    for (size_t i = 1; i < tree.size(); ++i) {
        kept += tree[i].kept;
        pruned += !tree[i].kept;
        finished += tree[i].kept && tree[i].finished;
    }
    m_summary->setText(tree.empty() ? tr("No beam search for this reply.")
                                    : tr("%1 candidates scored: %2 kept (%3 finished with <end>), %4 pruned (dashed, "
                                         "below the kept ones). The reply's path is "
                                         "green; under each word its cumulative log-probability.")
                                          .arg(tree.size() - 1)
                                          .arg(kept)
                                          .arg(finished)
                                          .arg(pruned));
    m_canvas->set(&m_tree, m_pruned->isChecked(), m_selected);
    m_state->clearGraphs();
    m_state->replot();
    m_node->setText(tree.empty() ? QString() : tr("Click a node to see its state."));
    // The root first (the decoder's state after <start>), scrolled into view once laid out.
    if (!tree.empty()) {
        selectNode(0);
        QTimer::singleShot(0, this, [this] {
            const QRectF r = m_canvas->box(0);
            if (!r.isNull())
                m_scroll->ensureVisible(static_cast<int>(r.center().x()), static_cast<int>(r.center().y()),
                    static_cast<int>(r.width()), m_scroll->viewport()->height() / 2 - 20);
        });
    }
}

void BeamTreeView::selectNode(int node)
{
    if (node < 0 || static_cast<size_t>(node) >= m_tree.size())
        return;
    m_selected = node;
    m_canvas->set(&m_tree, m_pruned->isChecked(), m_selected);
    const BeamNode& b = m_tree[static_cast<size_t>(node)];
    QString status = b.finished ? tr("finished (a complete reply)") : b.kept ? tr("kept") : tr("pruned at this step");
    if (b.forced)
        status += tr(", forced");
    if (b.chosen)
        status += tr(", on the reply's path");
    m_node->setText(tr("“%1” at step %2: log p %3, hypothesis score %4; %5. %6")
                        .arg(q(b.word))
                        .arg(b.step)
                        .arg(b.logProbability, 0, 'f', 3)
                        .arg(b.score, 0, 'f', 3)
                        .arg(status)
                        .arg(b.h.empty() ? tr("It was never fed to the decoder, so it has no state of its own.")
                                         : tr("State after feeding it: |h| %1, |c| %2 (top layer).")
                                               .arg(norm(b.h), 0, 'f', 2)
                                               .arg(norm(b.c), 0, 'f', 2)));
    m_state->clearGraphs();
    if (!b.h.empty()) {
        QVector<double> x, h, c;
        for (size_t j = 0; j < b.h.size(); ++j) {
            x << static_cast<double>(j);
            h << b.h[j];
            c << b.c[j];
        }
        auto* gc = m_state->addGraph();
        gc->setName(tr("c"));
        gc->setPen(QPen(QColor(130, 90, 180), 1.2));
        gc->setData(x, c);
        auto* gh = m_state->addGraph();
        gh->setName(tr("h"));
        gh->setPen(QPen(QColor(40, 100, 200), 1.5));
        gh->setData(x, h);
        m_state->rescaleAxes();
    }
    m_state->replot();
}

// ---- nearest training prompts ---------------------------------------------------------------

NeighboursView::NeighboursView(QWidget* parent)
    : QWidget(parent)
{
    m_metric = new QComboBox;
    m_metric->addItem(tr("cosine"), static_cast<int>(StateMetric::Cosine));
    m_metric->addItem(tr("L2"), static_cast<int>(StateMetric::L2));
    m_metric->setToolTip(tr("How near two encoder final states are: the angle between them (cosine) or their "
                            "Euclidean distance (L2), over h and c of every layer"));
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Training prompts whose encoder final (h, c) is nearest this question's, by")));
    top->addWidget(m_metric);
    top->addStretch();
    m_summary = new QLabel;
    m_summary->setWordWrap(true);
    m_table = new QTableWidget(0, 6);
    m_table->setObjectName("neighboursTable");
    m_table->setHorizontalHeaderLabels(
        { tr("#"), tr("cos"), tr("L2"), tr("training prompt"), tr("its response"), tr("where") });
    m_table->verticalHeader()->hide();
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setWordWrap(true);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setSectionResizeMode(3, QHeaderView::Stretch);
    m_table->horizontalHeader()->setSectionResizeMode(4, QHeaderView::Stretch);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(top);
    layout->addWidget(m_summary);
    layout->addWidget(m_table, 1);
    connect(m_metric, &QComboBox::activated, this, [this] { Q_EMIT metricChanged(metric()); });
    clear();
}

StateMetric NeighboursView::metric() const
{
    return static_cast<StateMetric>(m_metric->currentData().toInt());
}

void NeighboursView::clear()
{
    m_summary->setText(tr("The training prompts nearest the question shown are searched while this tab is open."));
    m_summary->setStyleSheet(QString());
    m_table->setRowCount(0);
}

void NeighboursView::showNote(const QString& note, bool warning)
{
    m_table->setRowCount(0);
    m_summary->setText(warning ? tr("No nearest prompts: %1.").arg(note) : note);
    m_summary->setStyleSheet(warning ? "color: #8a5a00;" : "color: #555;");
}

void NeighboursView::setExplanation(const Explanation& e)
{
    if (e.neighbours.empty() && e.neighboursNote.empty())
        return; // not searched in this explanation: whatever the view shows stands
    if (!e.neighboursNote.empty()) {
        showNote(q(e.neighboursNote));
        return;
    }
    m_table->setRowCount(0);
    int same = 0;
    for (const Neighbour& n : e.neighbours)
        same += n.responseIsReply;
    QString what;
    if (e.memorised)
        what = tr("<b>Memorised:</b> the reply is the nearest prompt's response word for word. The question lands "
                  "next to “%1” and gets its answer.")
                   .arg(q(e.neighbours.front().prompt).toHtmlEscaped());
    else if (same > 0)
        what = tr("%1 of the %2 nearest prompts have this reply as their response.").arg(same).arg(e.neighbours.size());
    else
        what = tr("None of the %1 nearest prompts has this reply as its response.").arg(e.neighbours.size());
    m_summary->setText(tr("%1 <span style='color:#666'>(%2 training prompts indexed in %3 ms for these weights)</span>")
                           .arg(what)
                           .arg(e.indexedPrompts)
                           .arg(e.indexBuildMilliseconds, 0, 'f', 0));
    m_summary->setStyleSheet(e.memorised ? "color: #1b5e20;" : QString());
    m_table->setRowCount(static_cast<int>(e.neighbours.size()));
    for (int r = 0; r < static_cast<int>(e.neighbours.size()); ++r) {
        const Neighbour& n = e.neighbours[static_cast<size_t>(r)];
        m_table->setItem(r, 0, cell(QString::number(r + 1)));
        m_table->setItem(r, 1, cell(QString::number(n.cosine, 'f', 4)));
        m_table->setItem(r, 2, cell(QString::number(n.l2, 'f', 3)));
        m_table->setItem(r, 3, cell(q(n.prompt)));
        m_table->setItem(
            r, 4, cell(q(n.response), n.responseIsReply ? tr("This response is the reply explained") : q(n.response)));
        m_table->setItem(r, 5, cell(QString("%1:%2").arg(QFileInfo(q(n.file)).fileName()).arg(n.line), q(n.file)));
        if (n.responseIsReply)
            for (int c = 0; c < 6; ++c)
                m_table->item(r, c)->setBackground(QColor(216, 243, 220));
    }
    m_table->resizeRowsToContents();
}

// ---- two questions --------------------------------------------------------------------------

QuestionsView::QuestionsView(QWidget* parent)
    : QWidget(parent)
{
    m_a = new QComboBox;
    m_b = new QComboBox;
    for (QComboBox* box : { m_a, m_b }) {
        box->setEditable(true);
        box->setMinimumContentsLength(18);
        box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
        box->setToolTip(tr("A question asked in this chat, or type one"));
    }
    m_go = new QPushButton(tr("Compare"));
    m_go->setToolTip(tr("Encode both questions with the current weights and compare their states and replies"));
    auto* top = new QHBoxLayout;
    top->addWidget(m_a, 1);
    top->addWidget(new QLabel(tr("vs")));
    top->addWidget(m_b, 1);
    top->addWidget(m_go);

    m_h = new QCustomPlot;
    m_c = new QCustomPlot;
    for (QCustomPlot* p : { m_h, m_c }) {
        p->yAxis->setLabel(tr("unit"));
        p->setMinimumHeight(150);
    }
    m_h->xAxis->setLabel(tr("final h (top layer)"));
    m_c->xAxis->setLabel(tr("final c (top layer)"));
    auto* plots = new QHBoxLayout;
    plots->addWidget(m_h, 1);
    plots->addWidget(m_c, 1);

    m_verdict = new QLabel(tr("Pick two questions and press Compare."));
    m_verdict->setWordWrap(true);
    m_replies = new QTableWidget(2, 3);
    m_replies->setObjectName("comparisonReplies");
    m_replies->setVerticalHeaderLabels({ tr("state handed over"), tr("decoder from zeros") });
    m_replies->setHorizontalHeaderLabels({ tr("reply to 1"), tr("reply to 2"), tr("") });
    m_replies->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    m_replies->horizontalHeader()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
    m_replies->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_replies->setFixedHeight(
        m_replies->horizontalHeader()->sizeHint().height() + 2 * m_replies->verticalHeader()->defaultSectionSize() + 4);

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(top);
    layout->addLayout(plots, 1);
    layout->addWidget(m_verdict);
    layout->addWidget(m_replies);
    connect(m_go, &QPushButton::clicked, this, &QuestionsView::compare);
}

void QuestionsView::setQuestions(const QStringList& questions)
{
    for (QComboBox* box : { m_a, m_b }) {
        const QString current = box->currentText();
        const QSignalBlocker block(box);
        box->clear();
        box->addItems(questions);
        if (!current.isEmpty())
            box->setCurrentText(current);
    }
    // By default the last two questions asked.
    if (questions.size() >= 2 && m_a->currentText() == m_b->currentText()) {
        m_a->setCurrentIndex(static_cast<int>(questions.size()) - 2);
        m_b->setCurrentIndex(static_cast<int>(questions.size()) - 1);
    }
}

void QuestionsView::compare()
{
    const QString a = m_a->currentText().trimmed(), b = m_b->currentText().trimmed();
    if (a.isEmpty() || b.isEmpty()) {
        m_verdict->setText(tr("Pick or type two questions."));
        return;
    }
    m_verdict->setText(tr("comparing…"));
    Q_EMIT compareRequested(a, b);
}

void QuestionsView::showComparison(const QuestionComparison& c)
{
    auto both = [&](bool cell) {
        std::vector<std::vector<float>> cols;
        for (int k = 0; k < 2; ++k)
            cols.push_back(cell ? c.encoderFinal[k].back().c : c.encoderFinal[k].back().h);
        return cols;
    };
    if (!c.encoderFinal[0].empty() && !c.encoderFinal[1].empty()) {
        for (QCustomPlot* p : { m_h, m_c }) {
            fillHeatmap(p, both(p == m_c), 0, QString());
            QSharedPointer<QCPAxisTickerText> ticks(new QCPAxisTickerText);
            ticks->addTick(0, tr("question 1"));
            ticks->addTick(1, tr("question 2"));
            p->xAxis->setTicker(ticks);
            p->replot();
        }
    }
    const QString qa = q(c.questions[0]).toHtmlEscaped(), qb = q(c.questions[1]).toHtmlEscaped();
    QString v = tr("“%1” and “%2” end %3 apart (L2 over h and c of every layer; cosine %4). ")
                    .arg(qa, qb)
                    .arg(c.l2, 0, 'f', 3)
                    .arg(c.cosine, 0, 'f', 3);
    v += c.repliesDiffer ? tr("Handed over, those states give <b>different replies</b>. ")
                         : tr("Handed over, they still give <b>the same reply</b>. ");
    v += c.zeroInitRepliesDiffer
        ? tr("Started from zeros, the decoder still answers differently (it reads the encoder some other way).")
        : tr("Started from zeros, the decoder never sees either state and gives <b>one reply to both</b>: the "
             "seed's “same reply to every question”.");
    m_verdict->setText(v);
    for (int k = 0; k < 2; ++k) {
        m_replies->setItem(0, k, cell(q(c.reply[k])));
        m_replies->setItem(1, k, cell(q(c.zeroInitReply[k])));
    }
    m_replies->setItem(0, 2, cell(c.repliesDiffer ? tr("different") : tr("same")));
    m_replies->setItem(1, 2, cell(c.zeroInitRepliesDiffer ? tr("different") : tr("same")));
    m_replies->item(1, 2)->setForeground(c.zeroInitRepliesDiffer ? QColor(30, 30, 30) : QColor(170, 30, 20));
    m_replies->item(0, 2)->setForeground(c.repliesDiffer ? QColor(27, 94, 32) : QColor(170, 30, 20));
}
