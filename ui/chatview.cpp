#include "chatview.h"

#include "explainviews.h"
#include "handoffview.h"
#include "shown.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMouseEvent>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>

using namespace chatbench;

namespace {

// A chat bubble; bot bubbles are clickable and open their handoff view.
class Bubble : public QLabel {
public:
    Bubble(const QString& text, bool bot, std::function<void()> onClick)
        : QLabel(text)
        , m_onClick(std::move(onClick))
    {
        setWordWrap(true);
        setTextFormat(Qt::RichText);
        setMaximumWidth(420);
        setStyleSheet(bot
                ? "QLabel { background: #eef1f6; border: 1px solid #cfd6e3; border-radius: 10px; padding: 7px; }"
                : "QLabel { background: #2f6fd0; color: white; border-radius: 10px; padding: 7px; }");
        if (bot) {
            setCursor(Qt::PointingHandCursor);
            setToolTip(QObject::tr("Click to open this reply's state handoff"));
        }
    }

protected:
    void mousePressEvent(QMouseEvent* e) override
    {
        if (m_onClick && e->button() == Qt::LeftButton)
            m_onClick();
    }

private:
    std::function<void()> m_onClick;
};

} // namespace

ChatView::ChatView(EngineController* engine, QWidget* parent)
    : QWidget(parent)
    , m_engine(engine)
{
    m_messages = new QWidget;
    m_messagesLayout = new QVBoxLayout(m_messages);
    m_messagesLayout->addStretch();
    m_scroll = new QScrollArea;
    m_scroll->setWidget(m_messages);
    m_scroll->setWidgetResizable(true);
    // Keep the newest message in view while the reader is at the bottom (or has just sent one);
    // someone scrolled up to reread is left where they are.
    connect(m_scroll->verticalScrollBar(), &QScrollBar::rangeChanged, this, [this](int, int max) {
        if (m_followNewest)
            m_scroll->verticalScrollBar()->setValue(max);
    });
    connect(m_scroll->verticalScrollBar(), &QScrollBar::valueChanged, this,
        [this](int value) { m_followNewest = value >= m_scroll->verticalScrollBar()->maximum() - 4; });

    m_input = new QLineEdit;
    m_input->setPlaceholderText(tr("Ask the bot something and press Enter"));
    m_input->setToolTip(tr("Your message; Enter sends it"));
    m_send = new QPushButton(tr("Send"));
    m_send->setToolTip(tr("Send the message (Enter)"));
    auto* inputBar = new QHBoxLayout;
    inputBar->addWidget(m_input, 1);
    inputBar->addWidget(m_send);

    m_method = new QComboBox;
    for (const std::string& name : decodeMethodNames())
        m_method->addItem(QString::fromStdString(name), static_cast<int>(*parseDecodeMethod(name)));
    m_beam = new QSpinBox;
    m_beam->setRange(1, 32);
    m_beam->setValue(4);
    m_beam->setPrefix(tr("beam "));
    m_beam->setToolTip(tr("Beam search: hypotheses kept per step"));
    m_method->setToolTip(tr("How the next word is picked: greedy (most likely), beam search, or sampling"));
    m_temperature = new QDoubleSpinBox;
    m_temperature->setRange(0.05, 5);
    m_temperature->setSingleStep(0.1);
    m_temperature->setValue(1.0);
    m_temperature->setPrefix(tr("T "));
    m_temperature->setToolTip(tr("Sampling temperature: below 1 sharper, above 1 more random"));
    m_topK = new QSpinBox;
    m_topK->setRange(0, 1000);
    m_topK->setPrefix(tr("top-k "));
    m_topK->setSpecialValueText(tr("top-k all"));
    m_topK->setToolTip(tr("Sampling picks among the k most likely words (0: all)"));
    // Only the settings the method reads can be set (T 5 with greedy was ignored without a word;
    // the CLI refuses it).
    auto applicable = [this] {
        const auto method = static_cast<DecodeMethod>(m_method->currentData().toInt());
        m_beam->setEnabled(method == DecodeMethod::Beam);
        m_temperature->setEnabled(method == DecodeMethod::Sample);
        m_topK->setEnabled(method == DecodeMethod::Sample);
    };
    connect(m_method, &QComboBox::currentIndexChanged, this, applicable);
    applicable();
    auto* opts = new QHBoxLayout;
    opts->addWidget(new QLabel(tr("decoding")));
    opts->addWidget(m_method);
    opts->addWidget(m_beam);
    opts->addWidget(m_temperature);
    opts->addWidget(m_topK);
    opts->addStretch();

    m_break = new QCheckBox(tr("Break the handoff"));
    m_break->setToolTip(tr("Reproduce the seed's bug: the decoder does not get the encoder's state (Ctrl+B)"));
    m_break->setShortcut(QKeySequence("Ctrl+B"));
    m_breakMode = new QComboBox;
    m_breakMode->addItem(tr("decoder starts from zeros"), static_cast<int>(HandoffMode::ZeroInit));
    m_breakMode->addItem(tr("state reset every step"), static_cast<int>(HandoffMode::ResetEachStep));
    m_breakMode->setToolTip(tr("How the handoff is broken: the decoder starts from zeros instead of the encoder's "
                               "(h, c), or its state is thrown away after every word"));
    m_probe = new QPushButton(tr("Diversity probe"));
    m_probe->setToolTip(tr("Ask a set of different questions and count the distinct replies (Ctrl+D)"));
    m_probe->setShortcut(QKeySequence("Ctrl+D"));
    m_probeLabel = new QLabel(tr("probe: not run"));
    m_probeLabel->setWordWrap(true);
    auto* bug = new QHBoxLayout;
    bug->addWidget(m_break);
    bug->addWidget(m_breakMode);
    bug->addSpacing(12);
    bug->addWidget(m_probe);
    auto* probeBar = new QHBoxLayout;
    probeBar->addWidget(m_probeLabel, 1);
    m_probeTable = new QTableWidget(0, 3);
    m_probeTable->setObjectName("probeTable");
    m_probeTable->setHorizontalHeaderLabels({ tr("question"), tr("handoff correct"), tr("handoff broken") });
    m_probeTable->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    m_probeTable->verticalHeader()->hide();
    m_probeTable->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_probeTable->setWordWrap(true);
    m_probeTable->setMaximumHeight(200);
    m_probeTable->setToolTip(tr("The probe's questions and the replies with the state handed over and without"));
    m_probeTable->hide();

    m_botLabel = new QLabel(tr("No model yet: train one (Train tab) or double-click a run in the run history."));
    m_botLabel->setStyleSheet("color: #666;");
    m_botLabel->setWordWrap(true);
    m_weights = new QComboBox;
    m_weights->setObjectName("weightsBox");
    m_weights->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    m_weights->addItem(tr("latest checkpoint"));
    m_weights->setToolTip(tr("Which weights of the open run answer: the latest checkpoint, or those kept at the "
                             "lowest validation loss (before overfitting)"));
    m_weights->setEnabled(false);
    auto* botBar = new QHBoxLayout;
    botBar->addWidget(m_botLabel, 1);
    botBar->addWidget(new QLabel(tr("weights")));
    botBar->addWidget(m_weights);

    auto* left = new QWidget;
    auto* leftLayout = new QVBoxLayout(left);
    leftLayout->setContentsMargins(0, 0, 0, 0);
    leftLayout->addLayout(botBar);
    leftLayout->addWidget(m_scroll, 1);
    leftLayout->addLayout(inputBar);
    leftLayout->addLayout(opts);
    leftLayout->addLayout(bug);
    leftLayout->addLayout(probeBar);
    leftLayout->addWidget(m_probeTable);

    m_handoff = new HandoffView;
    auto* split = new QSplitter;
    split->addWidget(left);
    split->addWidget(m_handoff);
    split->setStretchFactor(0, 2);
    split->setStretchFactor(1, 3);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(split);

    connect(m_input, &QLineEdit::returnPressed, this, &ChatView::send);
    connect(m_send, &QPushButton::clicked, this, &ChatView::send);
    connect(m_probe, &QPushButton::clicked, this, &ChatView::runProbe);
    connect(m_engine, &EngineController::botReady, this, [this](qint64 step) {
        m_botLabel->setText(m_engine->isTraining()
                ? tr("Chatting with a snapshot of the training weights (step %1)").arg(step)
                : tr("Chatting with the model at step %1").arg(step));
    });
    connect(m_engine, &EngineController::replyReady, this, [this](const ChatAnswer& a) {
        m_answers.insert(a.id, a);
        // Each answer keeps the weights that gave it, for its explanation; during training they
        // change every epoch, so only the newest answers keep theirs (a model copy each).
        int newer = 0;
        for (auto it = m_answers.end(); it != m_answers.begin();) {
            --it;
            if (++newer > kAnswersExplained && it->bot != a.bot)
                it->bot.reset();
        }
        QString text = QString(
            a.reply.text.empty() ? tr("<i>(empty reply)</i>") : shownText(a.reply.text).toHtmlEscaped());
        if (!a.reply.trace.unknownWords.empty()) {
            QStringList unk;
            for (const auto& w : a.reply.trace.unknownWords)
                unk << shownText(w).toHtmlEscaped();
            text += tr("<br><small style='color:#a05a00'>unknown words: %1</small>").arg(unk.join(", "));
        }
        if (a.reply.trace.unknownWords.size() == a.reply.trace.inputWords.size())
            text += tr("<br><small style='color:#a05a00'>the model knows no word of this message: its encoder "
                       "reads only &lt;unk&gt;</small>");
        if (a.reply.trace.wordsLeftOut > 0)
            text += tr("<br><small style='color:#a05a00'>the model reads %1 words at most: the last %2 of this "
                       "message were left out</small>")
                        .arg(a.reply.trace.inputIds.size())
                        .arg(a.reply.trace.wordsLeftOut);
        addBubble(text, true, a.id, &a.reply.trace.checks);
        selectAnswer(a.id);
    });
    connect(m_engine, &EngineController::runLoaded, this, [this](const RunSummary& r) {
        m_runDir = r.runDir;
        const QSignalBlocker block(m_weights);
        m_weights->clear();
        m_weights->addItem(tr("latest checkpoint"));
        if (r.best.available)
            m_weights->addItem(
                tr("best validation: epoch %1 (loss %2)").arg(r.best.epoch).arg(r.best.validationLoss, 0, 'f', 3));
        m_weights->setCurrentIndex(r.bestLoaded && r.best.available ? 1 : 0);
        m_weights->setEnabled(!m_engine->isTraining() && m_weights->count() > 1);
        // Another model answers from here: what was said and probed before was said by the last one.
        m_probeCorrect.clear();
        m_probeBroken.clear();
        m_probeWith = {};
        m_probeWithout = {};
        m_probeTable->hide();
        m_probeLabel->setText(tr("probe: not run"));
        m_probeLabel->setStyleSheet(QString());
        addNote(tr("now chatting with %1 (%2, step %3)")
                    .arg(QFileInfo(r.runDir).fileName(), r.bestLoaded ? tr("best weights") : tr("latest checkpoint"))
                    .arg(r.step));
        if (!r.note.isEmpty()) // a resume from here continues from these weights, not the newest
            addNote(tr("note: %1").arg(r.note));
    });
    connect(m_weights, &QComboBox::activated, this, [this](int index) {
        if (!m_runDir.isEmpty() && !m_engine->isTraining())
            m_engine->loadRun(m_runDir, index == 1);
    });
    connect(m_engine, &EngineController::trainingStarted, this, [this] {
        m_weights->setEnabled(false);
        m_runDir.clear();
    });
    connect(m_engine, &EngineController::probeDone, this, [this](const ProbeResult& r) {
        const QString line = tr("%1 distinct of %2").arg(r.distinct).arg(r.questions.size());
        if (r.handoff == HandoffMode::Correct) {
            m_probeCorrect = line;
            m_probeWith = r;
        } else {
            m_probeBroken = line;
            m_probeWithout = r;
        }
        showProbeTable();
        m_probeLabel->setText(tr("probe — handoff correct: %1 · broken: %2")
                                  .arg(m_probeCorrect.isEmpty() ? tr("not run") : m_probeCorrect,
                                      m_probeBroken.isEmpty() ? tr("not run") : m_probeBroken));
        m_probeLabel->setStyleSheet(r.distinct <= 1 ? "color: #8a1c13; font-weight: bold;" : "color: #1b5e20;");
        m_probe->setEnabled(true);
    });
    // Why this reply: the explanation of the answer shown, its what-if branches, two questions.
    connect(m_engine, &EngineController::explained, this, [this](const ExplainResult& r) {
        if (m_explaining.value(r.id) == r.withNeighbours)
            m_explaining.remove(r.id);
        // Neighbours by another metric than the one now chosen: a newer request is on its way.
        if (r.withNeighbours && r.explanation.metric != m_handoff->neighboursView()->metric())
            return;
        auto old = m_explanations.find(r.id);
        if (old != m_explanations.end() && old->withNeighbours && !r.withNeighbours)
            return; // keep the one that has them
        m_explanations.insert(r.id, r);
        if (r.id == m_shown)
            m_handoff->showExplanation(r.explanation);
    });
    connect(m_handoff->tabs(), &QTabWidget::currentChanged, this, [this] {
        if (neighboursWanted())
            requestExplanation();
    });
    connect(m_engine, &EngineController::branched, this, [this](const BranchResult& r) {
        m_branches[r.id].push_back(r.branch);
        if (r.id == m_shown)
            m_handoff->addBranch(r.branch);
    });
    connect(m_handoff->whatIfView(), &WhatIfView::forceRequested, this,
        [this](int step, qint64 token, const QString& word) {
            auto it = m_answers.find(m_shown);
            if (it != m_answers.end() && it->bot)
                m_engine->whatIf(*it, step, token, word);
        });
    connect(m_handoff->neighboursView(), &NeighboursView::metricChanged, this, [this] {
        // Every answer's neighbours were searched by the other metric; the rest still holds.
        for (ExplainResult& r : m_explanations)
            r.withNeighbours = false;
        m_explaining.clear();
        requestExplanation();
    });
    connect(
        m_handoff->questionsView(), &QuestionsView::compareRequested, m_engine, &EngineController::compareQuestions);
    connect(m_engine, &EngineController::compared, m_handoff->questionsView(), &QuestionsView::showComparison);
    connect(m_engine, &EngineController::failed, this, [this](const QString&, EngineController::Job job) {
        if (job == EngineController::Job::Chat) {
            m_probe->setEnabled(true);
            m_explaining.clear(); // an explanation that failed may be asked for again
        }
    });
}

DecodeOptions ChatView::decodeOptions() const
{
    DecodeOptions o;
    o.method = static_cast<DecodeMethod>(m_method->currentData().toInt());
    o.beamWidth = m_beam->value();
    o.temperature = m_temperature->value();
    o.topK = m_topK->value();
    o.handoff
        = m_break->isChecked() ? static_cast<HandoffMode>(m_breakMode->currentData().toInt()) : HandoffMode::Correct;
    return o;
}

void ChatView::send()
{
    const QString text = m_input->text().trimmed();
    if (text.isEmpty())
        return;
    m_input->clear();
    ask(text);
}

void ChatView::ask(const QString& text)
{
    addBubble(shownText(text).toHtmlEscaped(), false, 0);
    m_asked.removeAll(text);
    m_asked << text;
    m_handoff->questionsView()->setQuestions(m_asked);
    m_engine->chat(text, decodeOptions());
}

void ChatView::runProbe()
{
    QStringList questions = m_probeQuestions;
    if (questions.isEmpty())
        questions = { "hello", "how are you?", "what is your name?", "what is an lstm?", "tell me a joke",
            "what does the forget gate do?", "how do i start training?", "goodbye" };
    m_probe->setEnabled(false);
    m_probeLabel->setText(tr("probing %1 questions…").arg(questions.size()));
    m_engine->probeDiversity(questions, decodeOptions());
}

void ChatView::showProbeTable()
{
    const ProbeResult& any = m_probeWith.questions.isEmpty() ? m_probeWithout : m_probeWith;
    // Short headers (the columns are narrow); the whole story in their tooltips.
    const bool zero = m_probeWithout.handoff == HandoffMode::ZeroInit;
    const QString mode = m_probeWithout.questions.isEmpty() ? tr("broken")
        : zero                                              ? tr("zero start")
                                                            : tr("reset each step");
    auto count = [](const ProbeResult& r) {
        return r.questions.isEmpty() ? tr("not run") : tr("%1/%2 distinct").arg(r.distinct).arg(r.questions.size());
    };
    m_probeTable->setHorizontalHeaderLabels(
        { tr("question"), tr("correct · %1").arg(count(m_probeWith)), tr("%1 · %2").arg(mode, count(m_probeWithout)) });
    m_probeTable->horizontalHeaderItem(1)->setToolTip(
        tr("Replies with the encoder's final (h, c) handed to the decoder and carried step to step"));
    m_probeTable->horizontalHeaderItem(2)->setToolTip(m_probeWithout.questions.isEmpty()
            ? tr("Tick Break the handoff and run the probe again")
            : zero ? tr("Replies with the handoff broken: the decoder starts from zeros instead of the encoder's state")
                   : tr("Replies with the handoff broken: the decoder's state is reset after every word"));
    m_probeTable->setRowCount(static_cast<int>(any.questions.size()));
    for (int i = 0; i < any.questions.size(); ++i) {
        m_probeTable->setItem(i, 0, new QTableWidgetItem(any.questions[i]));
        // Only results for the same questions line up.
        const bool with = m_probeWith.questions == any.questions;
        const bool without = m_probeWithout.questions == any.questions;
        m_probeTable->setItem(i, 1, new QTableWidgetItem(with ? m_probeWith.replies.value(i) : QString()));
        m_probeTable->setItem(i, 2, new QTableWidgetItem(without ? m_probeWithout.replies.value(i) : QString()));
    }
    m_probeTable->resizeRowsToContents();
    m_probeTable->show();
}

void ChatView::addNote(const QString& text)
{
    auto* note = new QLabel(text);
    note->setAlignment(Qt::AlignCenter);
    note->setWordWrap(true);
    note->setStyleSheet("QLabel { color: #777; font-style: italic; }");
    m_messagesLayout->insertWidget(m_messagesLayout->count(), note);
    m_followNewest = true;
}

void ChatView::selectAnswer(quint64 id)
{
    auto it = m_answers.find(id);
    if (it == m_answers.end())
        return;
    m_shown = id;
    m_handoff->showReply(it->prompt, it->reply);
    for (const Branch& b : m_branches.value(id))
        m_handoff->addBranch(b);
    auto e = m_explanations.find(id);
    if (e != m_explanations.end())
        m_handoff->showExplanation(e->explanation);
    if (!it->bot) {
        if (e == m_explanations.end() || !e->withNeighbours)
            m_handoff->explanationUnavailable(tr("the weights that gave this reply are no longer kept (only those "
                                                 "of the last %1 replies are); ask again to explain it")
                                                  .arg(kAnswersExplained));
        m_handoff->whatIfView()->setEnabled(false);
        return;
    }
    requestExplanation();
}

bool ChatView::neighboursWanted() const
{
    return m_handoff->tabs()->currentWidget() == m_handoff->neighboursView();
}

void ChatView::requestExplanation()
{
    auto it = m_answers.find(m_shown);
    if (it == m_answers.end() || !it->bot)
        return;
    const bool neighbours = neighboursWanted();
    auto have = m_explanations.find(m_shown);
    if (have != m_explanations.end() && (have->withNeighbours || !neighbours))
        return;
    auto pending = m_explaining.find(m_shown);
    if (pending != m_explaining.end() && (*pending || !neighbours))
        return;
    m_explaining[m_shown] = neighbours;
    if (neighbours)
        m_handoff->neighboursView()->showNote(tr("searching the training prompts (the first search for these weights "
                                                 "encodes them all)…"),
            /*warning=*/false);
    m_engine->explain(*it, m_handoff->neighboursView()->metric(), neighbours ? 8 : 0);
}

void ChatView::addBubble(const QString& text, bool bot, quint64 id, const TraceChecks* checks)
{
    QString html = text;
    if (bot && checks) {
        auto dot = [](bool ok, const QString& what) {
            return QString("<span style='color:%1' title='%2'>%3</span>")
                .arg(ok ? "#1b8a3a" : "#c62828", what, ok ? "&#10004;" : "&#10008;");
        };
        html += QString("<br><small>%1 handoff %2 carried %3 step-wise</small>")
                    .arg(dot(checks->handoffEqual, tr("handoff equal")), dot(checks->stateCarried, tr("state carried")),
                        dot(checks->teacherForcedEqual, tr("step-wise == teacher-forced")));
    }
    auto* bubble = new Bubble(
        html, bot, bot ? std::function<void()>([this, id] { selectAnswer(id); }) : std::function<void()>());
    auto* row = new QHBoxLayout;
    if (!bot)
        row->addStretch();
    row->addWidget(bubble);
    if (bot)
        row->addStretch();
    m_messagesLayout->insertLayout(m_messagesLayout->count(), row);
    // The new bubble's height is known only after layout: follow the range when it grows.
    m_followNewest = true;
}
