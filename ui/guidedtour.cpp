#include "guidedtour.h"

#include <algorithm>
#include <iterator>

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QTabWidget>
#include <QVBoxLayout>

namespace {

struct Page {
    int tab; // the tab the page explains
    const char* title;
    const char* text;
};

// Tab order: Corpus, Train, Chat, Compare.
const Page kPages[] = {
    { 0, QT_TR_NOOP("1 · Corpus: what the bot learns from"),
        QT_TR_NOOP("A corpus is a list of <b>question → reply</b> pairs. Open a file or folder (Ctrl+O): "
                   "TSV, CSV, JSON lines or chatterbot YAML. The preview shows the pairs as the model will see "
                   "them, the statistics show how long they are, and records that could not be read are listed "
                   "with their file and line instead of stopping the load.") },
    { 1, QT_TR_NOOP("2 · Train: watching it learn"),
        QT_TR_NOOP("Pick a preset, the device and the precision, then <b>Train</b> (Ctrl+T). The blue curve is "
                   "the loss on the training pairs; orange is the loss on pairs held out for validation. When "
                   "orange starts rising while blue keeps falling, the model is memorising: the red star marks "
                   "the best validation epoch, whose weights are kept as <b>best</b>. Stop (Ctrl+.) and Resume "
                   "(Ctrl+R) continue exactly where training was.") },
    { 2, QT_TR_NOOP("3 · Chat: why a reply is what it is"),
        QT_TR_NOOP("Ask anything. Click a reply to see its <b>state handoff</b>: the encoder reads your question "
                   "into two vectors, h and c; the decoder must start from them and carry its state from word to "
                   "word. The three badges prove that on every reply. Tick <b>Break the handoff</b> (Ctrl+B) and "
                   "run the <b>diversity probe</b> (Ctrl+D) to see the classic bug: the same reply to every "
                   "question.") },
    { 2, QT_TR_NOOP("4 · Chat: the pictures"),
        QT_TR_NOOP("Below the badges, heatmaps show every unit of h and c at every step (red positive, blue "
                   "negative, the scale on the right). The other tabs show how large the state is at each step, "
                   "how open the LSTM's gates are, and which words the decoder considered. <b>What am I looking "
                   "at?</b> explains it again beside the view.") },
    { 3, QT_TR_NOOP("5 · Compare: CPU against GPU"),
        QT_TR_NOOP("Benchmark this machine: epoch time, training throughput against batch size, reply latency, "
                   "and a race of the same training on each device. Import reports made on other machines "
                   "(<tt>chatbench-cli bench --out</tt>) to put a GPU beside your CPU. Speed-ups are computed "
                   "only between reports of the same workload (corpus, model and batch), named W1, W2, …") },
};

} // namespace

GuidedTour::GuidedTour(QTabWidget* tabs, QWidget* parent)
    : QDialog(parent)
    , m_tabs(tabs)
{
    setWindowTitle(tr("Guided tour"));
    setObjectName("guidedTour");
    m_title = new QLabel;
    QFont f = m_title->font();
    f.setBold(true);
    f.setPointSizeF(f.pointSizeF() * 1.15);
    m_title->setFont(f);
    m_text = new QLabel;
    m_text->setWordWrap(true);
    m_text->setTextFormat(Qt::RichText);
    m_text->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    m_text->setMinimumWidth(480);
    setMinimumSize(560, 300); // the longest page's text, wrapped, with room to spare
    m_counter = new QLabel;
    m_back = new QPushButton(tr("Back"));
    m_back->setToolTip(tr("The previous page"));
    m_next = new QPushButton(tr("Next"));
    m_next->setToolTip(tr("The next page"));
    auto* close = new QPushButton(tr("Close"));
    close->setToolTip(tr("End the tour (Esc)"));
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_counter);
    buttons->addStretch();
    buttons->addWidget(m_back);
    buttons->addWidget(m_next);
    buttons->addWidget(close);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_title);
    layout->addWidget(m_text, 1);
    layout->addLayout(buttons);
    connect(m_back, &QPushButton::clicked, this, [this] { showPage(m_page - 1); });
    connect(m_next, &QPushButton::clicked, this, [this] { showPage(m_page + 1); });
    connect(close, &QPushButton::clicked, this, &QDialog::close);
    showPage(0);
}

int GuidedTour::pages() const
{
    return static_cast<int>(std::size(kPages));
}

void GuidedTour::showPage(int page)
{
    m_page = std::clamp(page, 0, pages() - 1);
    const Page& p = kPages[m_page];
    m_title->setText(tr(p.title));
    m_text->setText(tr(p.text));
    m_counter->setText(tr("%1 of %2").arg(m_page + 1).arg(pages()));
    m_back->setEnabled(m_page > 0);
    m_next->setEnabled(m_page + 1 < pages());
    if (m_tabs && p.tab < m_tabs->count())
        m_tabs->setCurrentIndex(p.tab);
}
