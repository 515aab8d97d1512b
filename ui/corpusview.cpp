#include "corpusview.h"

#include "plotaxes.h"
#include "qcp.h"

#include <QAbstractTableModel>
#include <QCheckBox>
#include <QComboBox>
#include <QDragEnterEvent>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMimeData>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

using namespace chatbench;

class PairTableModel : public QAbstractTableModel {
public:
    using QAbstractTableModel::QAbstractTableModel;

    void setPairs(std::shared_ptr<const std::vector<Pair>> pairs)
    {
        beginResetModel();
        m_pairs = std::move(pairs);
        endResetModel();
    }
    int rowCount(const QModelIndex& parent = {}) const override
    {
        return parent.isValid() || !m_pairs ? 0 : static_cast<int>(m_pairs->size());
    }
    int columnCount(const QModelIndex& parent = {}) const override { return parent.isValid() ? 0 : 3; }
    const Pair& pair(int row) const { return (*m_pairs)[static_cast<size_t>(row)]; }
    QVariant data(const QModelIndex& index, int role) const override
    {
        if (!m_pairs || (role != Qt::DisplayRole && role != Qt::ToolTipRole))
            return {};
        const Pair& p = (*m_pairs)[static_cast<size_t>(index.row())];
        switch (index.column()) {
        case 0: return QString::fromStdString(p.prompt);
        case 1: return QString::fromStdString(p.response);
        default: return QString("%1:%2").arg(QFileInfo(QString::fromStdString(p.file)).fileName()).arg(p.line);
        }
    }
    QVariant headerData(int section, Qt::Orientation o, int role) const override
    {
        if (o != Qt::Horizontal || role != Qt::DisplayRole)
            return QAbstractTableModel::headerData(section, o, role);
        return section == 0 ? QObject::tr("prompt") : section == 1 ? QObject::tr("response") : QObject::tr("source");
    }

private:
    std::shared_ptr<const std::vector<Pair>> m_pairs;
};

CorpusView::CorpusView(EngineController* engine, QWidget* parent)
    : QWidget(parent)
    , m_engine(engine)
{
    setAcceptDrops(true);
    auto* openFileButton = new QPushButton(tr("Open file…"));
    openFileButton->setShortcut(QKeySequence::Open);
    openFileButton->setToolTip(tr("Open a corpus file (Ctrl+O); you can also drop files or folders here"));
    auto* openFolderButton = new QPushButton(tr("Open folder…"));
    openFolderButton->setShortcut(QKeySequence("Ctrl+Shift+O"));
    openFolderButton->setToolTip(tr("Open a folder of corpus files, e.g. the chatterbot corpus (Ctrl+Shift+O)"));
    auto* reload = new QPushButton(tr("Reload"));
    reload->setToolTip(tr("Load the corpus again with the options on this bar"));
    m_format = new QComboBox;
    for (const std::string& name : formatNames())
        m_format->addItem(QString::fromStdString(name), static_cast<int>(*parseFormat(name)));
    m_format->setToolTip(tr("The file format: auto (told by the extension and content), TSV, JSON lines, "
                            "chatterbot YAML, Cornell or dialog text (one turn a line)"));
    m_latin1 = new QCheckBox(tr("Latin-1"));
    m_latin1->setToolTip(tr("Read the files as Latin-1 instead of UTF-8 (bytes 0x80-0x9F as Windows-1252 has them: "
                            "curly quotes, dashes, the euro sign)"));
    m_pairing = new QComboBox;
    m_pairing->addItem(tr("consecutive turns"), static_cast<int>(Pairing::Consecutive));
    m_pairing->addItem(tr("first turn → rest"), static_cast<int>(Pairing::FirstRest));
    m_pairing->setToolTip(tr("How a conversation's turns become pairs: every turn answers the one before it, or "
                             "the first turn is answered by all the others joined (the Keras recipe)"));
    m_strict = new QCheckBox(tr("strict"));
    m_strict->setToolTip(tr("Fail on the first malformed record instead of skipping it and listing it below"));
    m_mode = new QComboBox;
    m_mode->addItem(tr("Keras tokenizer"), static_cast<int>(TokenizerMode::Keras));
    m_mode->addItem(tr("punctuation-aware"), static_cast<int>(TokenizerMode::Punctuation));
    m_minFreq = new QSpinBox;
    m_minFreq->setRange(1, 1000);
    m_minFreq->setPrefix(tr("min freq "));
    m_minFreq->setToolTip(tr("Words seen fewer times than this in the training pairs become <unk>"));
    m_mode->setToolTip(tr("How text is split into words: as Keras' Tokenizer does (punctuation dropped), or "
                          "keeping punctuation as words"));
    auto* bar = new QHBoxLayout;
    bar->addWidget(openFileButton);
    bar->addWidget(openFolderButton);
    bar->addWidget(reload);
    bar->addSpacing(16);
    bar->addWidget(new QLabel(tr("format")));
    bar->addWidget(m_format);
    bar->addWidget(m_latin1);
    bar->addWidget(m_pairing);
    bar->addWidget(m_strict);
    bar->addSpacing(16);
    bar->addWidget(m_mode);
    bar->addWidget(m_minFreq);
    bar->addStretch();

    m_error = new QLabel;
    m_error->setWordWrap(true);
    m_error->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_error->setStyleSheet(
        "QLabel { background: #fde2e1; color: #8a1c13; border: 1px solid #e8a39d; padding: 6px; border-radius: 4px; }");
    m_error->hide();

    auto* stats = new QFormLayout;
    stats->addRow(tr("Corpus"), m_pathLabel = new QLabel(tr("none")));
    stats->addRow(tr("Format"), m_formatLabel = new QLabel("-"));
    stats->addRow(tr("Pairs"), m_pairs = new QLabel("-"));
    stats->addRow(tr("Vocabulary"), m_vocab = new QLabel("-"));
    stats->addRow(tr("OOV rate"), m_oov = new QLabel("-"));
    stats->addRow(tr("Warnings"), m_warnings = new QLabel("-"));
    m_pathLabel->setWordWrap(true);
    m_warnings->setWordWrap(true);
    m_oov->setToolTip(tr("Share of validation-split words that the training-split vocabulary maps to <unk>"));
    auto* statsBox = new QGroupBox(tr("Statistics"));
    statsBox->setLayout(stats);
    statsBox->setMaximumWidth(360);

    m_hist = new QCustomPlot;
    m_hist->setMinimumHeight(200);
    m_hist->xAxis->setLabel(tr("words per turn"));
    m_hist->yAxis->setLabel(tr("pairs"));
    m_hist->legend->setVisible(true);
    auto* promptBars = new QCPBars(m_hist->xAxis, m_hist->yAxis);
    promptBars->setName(tr("prompt length"));
    promptBars->setPen(Qt::NoPen);
    promptBars->setBrush(QColor(40, 100, 200, 170));
    promptBars->setWidth(0.45);
    auto* responseBars = new QCPBars(m_hist->xAxis, m_hist->yAxis);
    responseBars->setName(tr("response length"));
    responseBars->setPen(Qt::NoPen);
    responseBars->setBrush(QColor(230, 120, 20, 170));
    responseBars->setWidth(0.45);
    plotaxes::legendAbove(m_hist, 2); // in the corner it covered the longest turns' bars

    // What loading skipped: one row per record or file, file:line; a click shows the source there.
    m_warningList = new QListWidget;
    m_warningList->setAlternatingRowColors(true);
    m_source = new QLabel;
    m_source->setTextFormat(Qt::PlainText);
    m_source->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_source->setFont(QFont("monospace", 9));
    m_source->setWordWrap(true);
    m_source->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    m_source->setStyleSheet("QLabel { background: #f6f6f6; border: 1px solid #ddd; padding: 4px; }");
    m_source->setText(tr("Click a warning to see the source lines around it."));
    auto* warnLayout = new QHBoxLayout;
    warnLayout->addWidget(m_warningList, 1);
    warnLayout->addWidget(m_source, 1);
    m_warningBox = new QGroupBox(tr("Skipped while loading"));
    m_warningBox->setLayout(warnLayout);
    m_warningBox->setMaximumHeight(170);
    m_warningBox->hide();

    auto* top = new QHBoxLayout;
    top->addWidget(statsBox);
    top->addWidget(m_hist, 1);

    m_filter = new QLineEdit;
    m_filter->setPlaceholderText(tr("Filter pairs…"));
    m_filter->setClearButtonEnabled(true);
    m_filter->setToolTip(tr("Show only the pairs containing this text"));
    m_model = new PairTableModel(this);
    m_proxy = new QSortFilterProxyModel(this);
    m_proxy->setSourceModel(m_model);
    m_proxy->setFilterKeyColumn(-1);
    m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
    m_table = new QTableView;
    m_table->setModel(m_proxy);
    m_table->setSortingEnabled(true);
    m_table->sortByColumn(-1, Qt::AscendingOrder); // file order until a header is clicked
    m_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_table->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
    m_table->horizontalHeader()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
    m_table->verticalHeader()->setDefaultSectionSize(22);
    m_table->setAlternatingRowColors(true);

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(bar);
    layout->addWidget(m_error);
    layout->addLayout(top, 2);
    layout->addWidget(m_warningBox);
    layout->addWidget(m_filter);
    layout->addWidget(m_table, 3);

    connect(openFileButton, &QPushButton::clicked, this, &CorpusView::openFile);
    connect(openFolderButton, &QPushButton::clicked, this, &CorpusView::openFolder);
    connect(reload, &QPushButton::clicked, this, [this] {
        if (!m_path.isEmpty())
            load(m_path);
    });
    connect(m_filter, &QLineEdit::textChanged, m_proxy, &QSortFilterProxyModel::setFilterFixedString);
    connect(m_minFreq, &QSpinBox::valueChanged, this, [this] {
        if (m_loaded)
            load(m_path);
    });
    // Every option reloads the corpus open, so what the boxes say is what is loaded (the format
    // and Latin-1 did not: the preview stayed UTF-8 with Latin-1 ticked, until Reload).
    for (QComboBox* box : { m_mode, m_pairing, m_format })
        connect(box, &QComboBox::currentIndexChanged, this, [this] {
            if (m_loaded)
                load(m_path);
        });
    for (QCheckBox* box : { m_strict, m_latin1 })
        connect(box, &QCheckBox::toggled, this, [this] {
            if (m_loaded)
                load(m_path);
        });
    connect(m_warningList, &QListWidget::currentRowChanged, this, &CorpusView::showWarning);
    connect(m_engine, &EngineController::corpusLoaded, this, &CorpusView::showSummary);
}

TokenizerOptions CorpusView::tokenizerOptions() const
{
    TokenizerOptions t;
    t.mode = static_cast<TokenizerMode>(m_mode->currentData().toInt());
    t.minFrequency = m_minFreq->value();
    return t;
}

void CorpusView::load(const QString& path)
{
    CorpusRequest r;
    r.path = path;
    r.format = static_cast<CorpusFormat>(m_format->currentData().toInt());
    r.latin1 = m_latin1->isChecked();
    r.pairing = static_cast<Pairing>(m_pairing->currentData().toInt());
    r.strict = m_strict->isChecked();
    r.tokenizer = tokenizerOptions();
    m_error->hide();
    m_pathLabel->setText(tr("loading %1…").arg(path));
    m_engine->loadCorpus(r);
}

void CorpusView::openFile()
{
    const QString path = QFileDialog::getOpenFileName(this, tr("Open a corpus"), QFileInfo(m_path).absolutePath(),
        tr("Corpora (*.yml *.yaml *.tsv *.jsonl *.json *.ndjson *.txt);;All files (*)"));
    if (!path.isEmpty())
        load(path);
}

void CorpusView::openFolder()
{
    const QString path = QFileDialog::getExistingDirectory(
        this, tr("Open a corpus folder (chatterbot YAML or Cornell)"), QFileInfo(m_path).absolutePath());
    if (!path.isEmpty())
        load(path);
}

void CorpusView::showError(const QString& message)
{
    // A failed (re)load leaves the corpus loaded before in use, with its own settings.
    m_error->setText(tr("Could not load the corpus:\n%1%2")
                         .arg(message,
                             m_loaded ? tr("\n\nTraining and chat still use the corpus loaded before (%1), as the "
                                           "statistics below show, with the options it was loaded with.")
                                            .arg(m_path)
                                      : QString()));
    m_error->show();
    m_pathLabel->setText(m_loaded ? m_path : tr("none"));
}

void CorpusView::showSummary(const CorpusSummary& s)
{
    m_loaded = true;
    m_path = s.request.path;
    m_error->hide();
    m_pathLabel->setText(s.request.path);
    const chatbench::CorpusStats& st = s.stats;
    m_formatLabel->setText(
        tr("%1 (%2 file(s))").arg(QString::fromStdString(chatbench::formatName(st.format))).arg(st.files));
    m_pairs->setText(tr("%1 (%2 pairing)").arg(st.pairs).arg(QString::fromStdString(pairingName(st.pairing))));
    m_vocab->setText(tr("%1 words at min frequency %2").arg(st.vocabulary).arg(st.tokenizer.minFrequency));
    const bool noValidation = std::isnan(st.validationOovRate); // too few pairs to hold some out
    m_oov->setText(
        noValidation ? tr("– (no validation pairs)") : QString("%1 %").arg(100 * st.validationOovRate, 0, 'f', 1));
    m_oov->setToolTip(noValidation ? tr("The corpus has too few pairs to hold some out for validation, so there "
                                        "are no unseen words to measure.")
                                   : QString());
    m_warningItems = st.warnings;
    m_warningList->clear();
    for (const auto& w : st.warnings) {
        auto* item = new QListWidgetItem(
            QString::fromStdString((QFileInfo(QString::fromStdString(w.file)).fileName().toStdString())
                + (w.line > 0 ? ":" + std::to_string(w.line) : "") + ": " + w.message));
        item->setToolTip(QString::fromStdString(toString(w)));
        if (w.kind != CorpusWarning::Kind::Note)
            item->setForeground(QColor(160, 60, 0));
        m_warningList->addItem(item);
    }
    m_warnings->setText(st.warnings.empty()
            ? tr("none")
            : QString::fromStdString(describeWarnings(st.warnings, 0)).section('\n', 0, 0) + tr(" (listed below)"));
    m_warningBox->setVisible(!st.warnings.empty());
    m_source->setText(tr("Click a warning to see the source lines around it."));
    auto bars = [&](int i, const std::vector<int64_t>& h, double offset) {
        auto* b = qobject_cast<QCPBars*>(m_hist->plottable(i));
        QVector<double> x, y;
        for (size_t k = 0; k < h.size(); ++k) {
            x << static_cast<double>(k) + offset;
            y << static_cast<double>(h[k]);
        }
        b->setData(x, y);
    };
    bars(0, st.promptLengths, -0.22);
    bars(1, st.responseLengths, 0.22);
    // Every bar whole inside the axes (the longest turns' bar was cut in half at the right edge).
    const double longest = static_cast<double>(std::max(st.promptLengths.size(), st.responseLengths.size()));
    m_hist->xAxis->setRange(-0.7, std::max(1.0, longest - 0.3));
    int64_t most = 1;
    for (const auto* h : { &st.promptLengths, &st.responseLengths })
        for (int64_t n : *h)
            most = std::max(most, n);
    m_hist->yAxis->setRange(0, static_cast<double>(most) * 1.08);
    m_hist->replot();
    m_model->setPairs(s.data);
    Q_EMIT loaded(s.request.path, static_cast<int>(st.pairs));
}

void CorpusView::dragEnterEvent(QDragEnterEvent* event)
{
    if (event->mimeData()->hasUrls())
        event->acceptProposedAction();
}

void CorpusView::showWarning(int row)
{
    if (row < 0 || static_cast<size_t>(row) >= m_warningItems.size())
        return;
    const CorpusWarning& w = m_warningItems[static_cast<size_t>(row)];
    const QString file = QString::fromStdString(w.file);
    // The source lines around the problem, the line itself marked.
    QFile f(file);
    QStringList excerpt;
    if (w.line > 0 && f.open(QIODevice::ReadOnly)) {
        const long from = std::max(1L, w.line - 2), to = w.line + 2;
        long n = 0;
        while (!f.atEnd() && n < to) {
            const QByteArray raw = f.readLine(4096);
            ++n;
            if (n < from)
                continue;
            QString text = QString::fromUtf8(raw);
            text.remove('\n').remove('\r');
            excerpt << QString("%1%2 | %3").arg(n == w.line ? "▶" : " ").arg(n, 5).arg(text.left(160));
        }
    }
    m_source->setText(QFileInfo(file).fileName() + (w.line > 0 ? QString(":%1").arg(w.line) : QString()) + "  "
        + QString::fromStdString(w.message) + (excerpt.isEmpty() ? QString() : "\n\n" + excerpt.join("\n")));
    // In the preview: the pair kept nearest after the skipped record in the same file.
    m_filter->clear();
    int best = -1;
    long bestLine = 0;
    for (int r = 0; r < m_model->rowCount(); ++r) {
        const Pair& p = m_model->pair(r);
        if (p.file != w.file || p.line < w.line)
            continue;
        if (best < 0 || p.line < bestLine) {
            best = r;
            bestLine = p.line;
        }
    }
    if (best >= 0) {
        const QModelIndex at = m_proxy->mapFromSource(m_model->index(best, 0));
        m_table->setCurrentIndex(at);
        m_table->scrollTo(at, QAbstractItemView::PositionAtCenter);
    }
}

void CorpusView::dropEvent(QDropEvent* event)
{
    const auto urls = event->mimeData()->urls();
    if (!urls.isEmpty() && urls.first().isLocalFile())
        load(urls.first().toLocalFile());
}
