#include "enginecontroller.h"

#ifdef CHATBENCH_HAVE_KERAS
#include "chatbench/kerasimport.h"
#endif

#include "chatbench/error.h"
#include "chatbench/runs.h"

#include <QFileInfo>

#include <algorithm>
#include <deque>
#include <set>

using namespace chatbench;

namespace {

// Runs `job` and turns anything it throws into one message for `failed`.
template <typename Job, typename Fail> void guarded(Job&& job, Fail&& fail)
{
    try {
        job();
    } catch (const chatbench::Error& e) {
        fail(QString::fromStdString(e.what()));
    } catch (const std::exception& e) {
        fail(QStringLiteral("internal error: %1").arg(QString::fromStdString(e.what())));
    }
}

// The result reported for a training job that never got to run.
TrainResult notRun()
{
    TrainResult r;
    r.status = TrainStatus::Cancelled;
    return r;
}

} // namespace

// ---- engine thread ------------------------------------------------------------------------

class EngineWorker : public QObject {
    Q_OBJECT

public:
    explicit EngineWorker(std::shared_ptr<std::atomic<bool>> cancel)
        : m_cancel(std::move(cancel))
    {
    }

    void probeDevices()
    {
        guarded([&] { Q_EMIT devicesReady(listDevices(/*timeBf16=*/true)); },
            [&](const QString& m) { Q_EMIT failed(m, EngineController::Job::Devices); });
    }

    void loadCorpus(const CorpusRequest& req)
    {
        guarded(
            [&] {
                LoadOptions opt;
                opt.format = req.format;
                opt.latin1 = req.latin1;
                opt.pairing = req.pairing;
                opt.strict = req.strict;
                auto corpus = std::make_shared<Corpus>(chatbench::loadCorpus(req.path.toStdString(), opt));
                CorpusSummary s;
                s.request = req;
                s.stats = corpusStats(*corpus, req.tokenizer);
                s.data = std::shared_ptr<const std::vector<Pair>>(corpus, &corpus->pairs);
                m_corpus = corpus;
                m_corpusPath = req.path;
                m_latin1 = req.latin1;
                m_strict = req.strict;
                Q_EMIT corpusLoaded(s);
            },
            [&](const QString& m) { Q_EMIT failed(m, EngineController::Job::Corpus); });
    }

    void train(TrainConfig cfg, const QString& runDir)
    {
        if (!m_corpus) {
            Q_EMIT failed(tr("Load a corpus before training."), EngineController::Job::Training);
            Q_EMIT trainingFinished(notRun(), runDir);
            return;
        }
        cfg.corpus = m_corpusPath.toStdString();
        cfg.corpusFormat = m_corpus->format;
        cfg.latin1 = m_latin1;
        cfg.strictCorpus = m_strict;
        run(runDir,
            [&](const TrainCallbacks& cb) { return chatbench::train(cfg, *m_corpus, runDir.toStdString(), cb); });
    }

    void resume(const QString& runDir, const ResumeChanges& changes)
    {
        run(runDir, [&](const TrainCallbacks& cb) {
            // A run not bound to a corpus yet (an imported model) fine-tunes on the loaded one.
            const std::string dir = runDir.toStdString();
            if (m_corpus && loadRunConfig(dir).corpus.empty())
                return chatbench::resume(dir, *m_corpus, cb, changes);
            return chatbench::resume(dir, cb, changes);
        });
    }

    void loadRun(const QString& runDir, bool best)
    {
        guarded(
            [&] {
                auto bot = std::make_shared<const Chatbot>(Chatbot::load(
                    runDir.toStdString(), "cpu", best ? Chatbot::Weights::Best : Chatbot::Weights::Latest));
                RunSummary r;
                r.runDir = runDir;
                r.config = bot->config();
                r.history = readRunHistory(runDir.toStdString());
                r.best = readBestWeights(runDir.toStdString());
                r.bestLoaded = best;
                r.step = bot->step();
                r.note = QString::fromStdString(bot->note());
                Q_EMIT snapshot(bot);
                Q_EMIT runLoaded(r);
            },
            [&](const QString& m) { Q_EMIT failed(m, EngineController::Job::Run); });
    }

    void importKeras(const QString& model, const QString& tokenizer, const QString& startWord, const QString& endWord,
        const QString& runDir)
    {
#ifdef CHATBENCH_HAVE_KERAS
        guarded(
            [&] {
                KerasImportOptions opt;
                opt.model = model.toStdString();
                opt.tokenizer = tokenizer.toStdString();
                opt.startWord = startWord.toStdString();
                opt.endWord = endWord.toStdString();
                if (m_corpus)
                    opt.prompts = samplePrompts(m_corpus->pairs, 30);
                const KerasImport r = chatbench::importKeras(opt, runDir.toStdString());
                Q_EMIT kerasImported(runDir, QString::fromStdString(describe(r)));
            },
            [&](const QString& m) { Q_EMIT failed(m, EngineController::Job::Import); });
#else
        (void)model, (void)tokenizer, (void)startWord, (void)endWord, (void)runDir;
        Q_EMIT failed(
            tr("This build has no Keras import (HDF5 and libzip were not found)."), EngineController::Job::Import);
#endif
    }

    void bench(const BenchConfig& cfg)
    {
        BenchReport report;
        bool ok = false;
        if (!m_corpus) {
            Q_EMIT failed(tr("Load a corpus before benchmarking: the timings train and answer on it."),
                EngineController::Job::Bench);
        } else {
            // (cancel was cleared when the job was queued: a Stop that comes before it starts counts)
            BenchCallbacks cb;
            cb.cancel = m_cancel.get();
            cb.onProgress
                = [&](const std::string& what, int done, int total) { Q_EMIT benchProgress(what, done, total); };
            cb.onRow = [&](const BenchRow& r) { Q_EMIT benchRow(r); };
            guarded(
                [&] {
                    report = runBench(cfg, *m_corpus, cb);
                    ok = true;
                },
                [&](const QString& m) { Q_EMIT failed(m, EngineController::Job::Bench); });
        }
        Q_EMIT benchFinished(report, ok);
    }

    void doctor()
    {
        guarded([&] { Q_EMIT doctorDone(runDoctor()); },
            [&](const QString& m) { Q_EMIT failed(m, EngineController::Job::Doctor); });
    }

Q_SIGNALS:
    void doctorDone(const chatbench::DoctorReport& report);
    void kerasImported(const QString& runDir, const QString& report);
    void benchProgress(const std::string& what, int done, int total);
    void benchRow(const chatbench::BenchRow& row);
    void benchFinished(const chatbench::BenchReport& report, bool ok);
    void devicesReady(const std::vector<chatbench::DeviceInfo>& devices);
    void corpusLoaded(const CorpusSummary& summary);
    void trainingStarted(const QString& runDir, const chatbench::TrainConfig& config, qint64 firstStep);
    void stepDone(const chatbench::StepMetrics& metrics);
    void epochDone(const chatbench::EpochMetrics& metrics);
    void progress(const chatbench::TrainProgress& progress);
    void trainingFinished(const chatbench::TrainResult& result, const QString& runDir);
    void runLoaded(const RunSummary& run);
    void snapshot(std::shared_ptr<const chatbench::Chatbot> bot);
    void log(const QString& message);
    void failed(const QString& message, EngineController::Job job);

private:
    template <typename Fn> void run(const QString& runDir, Fn&& fn)
    {
        // Not cleared here but when the job was queued: a Stop (or the window closing) between the
        // two must still stop it.
        TrainCallbacks cb;
        cb.cancel = m_cancel.get();
        bool started = false;
        cb.onStep = [&](const StepMetrics& m) { Q_EMIT stepDone(m); };
        cb.onEpoch = [&](const EpochMetrics& m) { Q_EMIT epochDone(m); };
        cb.onProgress = [&](const TrainProgress& p) { Q_EMIT progress(p); };
        cb.onLog = [&](const std::string& m) { Q_EMIT log(QString::fromStdString(m)); };
        cb.onSnapshot = [&](const Chatbot& bot) {
            if (!started) {
                started = true;
                Q_EMIT trainingStarted(runDir, bot.config(), bot.step());
            }
            Q_EMIT snapshot(std::make_shared<const Chatbot>(bot));
        };
        TrainResult result;
        result.status = TrainStatus::Cancelled;
        guarded([&] { result = fn(cb); }, [&](const QString& m) { Q_EMIT failed(m, EngineController::Job::Training); });
        // A run folder moved while training was followed there: the window opens it where it is.
        Q_EMIT trainingFinished(result, result.runDir.empty() ? runDir : QString::fromStdString(result.runDir));
    }

    std::shared_ptr<std::atomic<bool>> m_cancel;
    std::shared_ptr<Corpus> m_corpus;
    QString m_corpusPath;
    bool m_latin1 = false;
    bool m_strict = false;
};

// ---- chat thread --------------------------------------------------------------------------

class ChatWorker : public QObject {
    Q_OBJECT

public:
    // `closing` is set when the window closes: a reply in progress stops at its next step.
    explicit ChatWorker(std::shared_ptr<std::atomic<bool>> closing)
        : m_closing(std::move(closing))
    {
    }

    void setBot(std::shared_ptr<const Chatbot> bot) { m_bot = std::move(bot); }

    // False (after saying why) when there are no weights to answer with yet.
    bool ready()
    {
        if (!m_bot)
            Q_EMIT failed(
                tr("There is no model to chat with yet: train one or open a saved run."), EngineController::Job::Chat);
        return m_bot != nullptr;
    }

    void reply(quint64 id, const QString& text, DecodeOptions opt)
    {
        if (!ready())
            return;
        opt.cancel = m_closing.get();
        guarded(
            [&] {
                ChatAnswer a;
                a.id = id;
                a.prompt = text;
                a.reply = m_bot->reply(text.toStdString(), opt);
                a.botStep = m_bot->step();
                a.bot = m_bot;
                a.options = opt;
                Q_EMIT replyReady(a);
            },
            [&](const QString& m) { Q_EMIT failed(m, EngineController::Job::Chat); });
    }

    void probe(const QStringList& questions, DecodeOptions opt)
    {
        if (!ready())
            return;
        opt.cancel = m_closing.get();
        guarded(
            [&] {
                ProbeResult r;
                r.questions = questions;
                r.handoff = opt.handoff;
                std::set<std::string> distinct;
                for (const QString& q : questions) {
                    const Reply rep = m_bot->reply(q.toStdString(), opt);
                    r.replies << QString::fromStdString(rep.text);
                    distinct.insert(rep.text);
                }
                r.distinct = static_cast<int>(distinct.size());
                Q_EMIT probeDone(r);
            },
            [&](const QString& m) { Q_EMIT failed(m, EngineController::Job::Chat); });
    }

    void explain(const ChatAnswer& answer, StateMetric metric, int neighbours)
    {
        if (!answer.bot)
            return;
        guarded(
            [&] {
                ExplainOptions ex;
                ex.metric = metric;
                ex.neighbours = neighbours;
                std::string why;
                const PromptIndex* index = neighbours > 0 ? indexFor(answer.bot, &why) : nullptr;
                DecodeOptions opt = answer.options;
                opt.cancel = m_closing.get();
                ExplainResult r;
                r.id = answer.id;
                r.withNeighbours = neighbours > 0;
                r.explanation = chatbench::explain(*answer.bot, answer.prompt.toStdString(), opt, ex, index);
                r.explanation.reply = {}; // the window has it (ChatAnswer::reply)
                if (!why.empty())
                    r.explanation.neighboursNote = why;
                Q_EMIT explained(r);
            },
            [&](const QString& m) { Q_EMIT failed(m, EngineController::Job::Chat); });
    }

    void whatIf(const ChatAnswer& answer, int step, qint64 token, const QString& word)
    {
        if (!answer.bot)
            return;
        guarded(
            [&] {
                const int64_t id
                    = token >= 0 ? token : tokenToForce(answer.bot->tokenizer(), word.trimmed().toStdString());
                DecodeOptions opt = answer.options;
                opt.cancel = m_closing.get();
                BranchResult r;
                r.id = answer.id;
                r.branch = chatbench::whatIf(*answer.bot, answer.prompt.toStdString(), answer.reply, step, id, opt);
                Q_EMIT branched(r);
            },
            [&](const QString& m) { Q_EMIT failed(m, EngineController::Job::Chat); });
    }

    void compare(const QString& a, const QString& b)
    {
        if (!ready())
            return;
        guarded([&] { Q_EMIT compared(compareQuestions(*m_bot, a.toStdString(), b.toStdString())); },
            [&](const QString& m) { Q_EMIT failed(m, EngineController::Job::Chat); });
    }

Q_SIGNALS:
    void replyReady(const ChatAnswer& answer);
    void probeDone(const ProbeResult& result);
    void explained(const ExplainResult& result);
    void branched(const BranchResult& result);
    void compared(const chatbench::QuestionComparison& comparison);
    void failed(const QString& message, EngineController::Job job);

private:
    // The nearest-prompt index of `bot`'s weights: built on first use (the training prompts
    // encoded in batches, on this thread); the last two are kept, so going back and forth between
    // answers of two snapshots builds nothing. Null, with `why`, when there are no training
    // prompts to index.
    const PromptIndex* indexFor(const std::shared_ptr<const Chatbot>& bot, std::string* why)
    {
        auto it = std::find_if(m_indexes.begin(), m_indexes.end(), [&](const Index& i) { return i.bot == bot; });
        if (it == m_indexes.end()) {
            Index made { bot, nullptr, {} };
            try {
                made.index
                    = std::make_shared<PromptIndex>(PromptIndex::build(*bot, trainingPairs(*bot), m_closing.get()));
            } catch (const Error& e) {
                made.error = e.what();
            }
            m_indexes.push_front(std::move(made));
            if (m_indexes.size() > 2)
                m_indexes.pop_back();
            it = m_indexes.begin();
        }
        *why = it->error;
        return it->index.get();
    }

    struct Index {
        std::shared_ptr<const Chatbot> bot;
        std::shared_ptr<PromptIndex> index;
        std::string error;
    };
    std::deque<Index> m_indexes; // newest first
    std::shared_ptr<const Chatbot> m_bot;
    std::shared_ptr<std::atomic<bool>> m_closing;
};

// ---- controller ---------------------------------------------------------------------------

namespace {

// Runs `fn` on `worker`'s thread, after whatever that thread is doing.
template <typename Worker, typename Fn> void post(Worker* worker, Fn&& fn)
{
    QMetaObject::invokeMethod(worker, std::forward<Fn>(fn), Qt::QueuedConnection);
}

} // namespace

EngineController::EngineController(QObject* parent)
    : QObject(parent)
    , m_cancel(std::make_shared<std::atomic<bool>>(false))
    , m_closing(std::make_shared<std::atomic<bool>>(false))
{
    qRegisterMetaType<CorpusSummary>();
    qRegisterMetaType<RunSummary>();
    qRegisterMetaType<ChatAnswer>();
    qRegisterMetaType<ProbeResult>();
    qRegisterMetaType<ExplainResult>();
    qRegisterMetaType<BranchResult>();
    qRegisterMetaType<chatbench::QuestionComparison>();
    qRegisterMetaType<chatbench::StepMetrics>();
    qRegisterMetaType<chatbench::EpochMetrics>();
    qRegisterMetaType<chatbench::TrainProgress>();
    qRegisterMetaType<chatbench::TrainResult>();
    qRegisterMetaType<chatbench::BenchReport>();
    qRegisterMetaType<chatbench::BenchRow>();
    qRegisterMetaType<chatbench::DoctorReport>();
    qRegisterMetaType<std::shared_ptr<const chatbench::Chatbot>>("std::shared_ptr<const chatbench::Chatbot>");
    qRegisterMetaType<std::vector<chatbench::DeviceInfo>>("std::vector<chatbench::DeviceInfo>");

    m_engine = new EngineWorker(m_cancel);
    m_engine->moveToThread(&m_engineThread);
    connect(&m_engineThread, &QThread::finished, m_engine, &QObject::deleteLater);
    m_chat = new ChatWorker(m_closing);
    m_chat->moveToThread(&m_chatThread);
    connect(&m_chatThread, &QThread::finished, m_chat, &QObject::deleteLater);

    connect(m_engine, &EngineWorker::devicesReady, this, [this](const std::vector<DeviceInfo>& d) {
        m_devices = d;
        Q_EMIT devicesReady();
    });
    connect(m_engine, &EngineWorker::corpusLoaded, this, [this](const CorpusSummary& s) {
        m_corpusLoads = std::max(0, m_corpusLoads - 1);
        Q_EMIT corpusLoaded(s);
    });
    connect(m_engine, &EngineWorker::trainingStarted, this, &EngineController::trainingStarted);
    connect(m_engine, &EngineWorker::stepDone, this, &EngineController::stepDone);
    connect(m_engine, &EngineWorker::epochDone, this, &EngineController::epochDone);
    connect(m_engine, &EngineWorker::progress, this, &EngineController::progress);
    connect(m_engine, &EngineWorker::trainingFinished, this, [this](const TrainResult& r, const QString& dir) {
        m_training = false;
        Q_EMIT trainingFinished(r, dir);
    });
    connect(m_engine, &EngineWorker::runLoaded, this, &EngineController::runLoaded);
    // The engine's text crosses as a plain copy and becomes a QString on this thread: ThreadSanitizer
    // reported the engine thread's last reference to a QString handed over here against its free
    // in this thread (docs/reliability.md), and with no shared string there is nothing to order.
    connect(m_engine, &EngineWorker::benchProgress, this, [this](const std::string& what, int done, int total) {
        Q_EMIT benchProgress(QString::fromStdString(what), done, total);
    });
    connect(m_engine, &EngineWorker::benchRow, this, &EngineController::benchRow);
    connect(m_engine, &EngineWorker::benchFinished, this, [this](const BenchReport& r, bool ok) {
        m_benchmarking = false;
        if (ok)
            Q_EMIT benchFinished(r);
        else
            Q_EMIT benchFinished(BenchReport {});
    });
    connect(m_engine, &EngineWorker::doctorDone, this, &EngineController::doctorDone);
    connect(m_engine, &EngineWorker::kerasImported, this, &EngineController::kerasImported);
    connect(m_engine, &EngineWorker::log, this, &EngineController::log);
    connect(m_engine, &EngineWorker::failed, this, [this](const QString& message, Job job) {
        if (job == Job::Corpus)
            m_corpusLoads = std::max(0, m_corpusLoads - 1);
        Q_EMIT failed(message, job);
    });
    // Snapshots go straight to the chat thread (queued there), and the UI hears about them.
    connect(m_engine, &EngineWorker::snapshot, m_chat, &ChatWorker::setBot);
    connect(m_engine, &EngineWorker::snapshot, this, [this](const std::shared_ptr<const Chatbot>& bot) {
        m_hasBot = true;
        Q_EMIT botReady(bot->step());
    });
    connect(m_chat, &ChatWorker::replyReady, this, &EngineController::replyReady);
    connect(m_chat, &ChatWorker::probeDone, this, &EngineController::probeDone);
    connect(m_chat, &ChatWorker::explained, this, &EngineController::explained);
    connect(m_chat, &ChatWorker::branched, this, &EngineController::branched);
    connect(m_chat, &ChatWorker::compared, this, &EngineController::compared);
    connect(m_chat, &ChatWorker::failed, this, &EngineController::failed);

    m_engineThread.setObjectName("chatbench-engine");
    m_chatThread.setObjectName("chatbench-chat");
    m_engineThread.start();
    m_chatThread.start();
    post(m_engine, [w = m_engine] { w->probeDevices(); });
}

EngineController::~EngineController()
{
    m_cancel->store(true); // a running training stops after its current batch, with a checkpoint
    m_closing->store(true); // a reply in progress stops at its next decoder step
    // The workers are connected (training hands its snapshots to chat), and each is deleted on its
    // own thread as the threads finish. A receiver's destructor calls into its senders (Qt's
    // disconnectNotify), so deleting both at once raced on the engine worker being destroyed
    // (found by ThreadSanitizer): the link between them goes first.
    disconnect(m_engine, nullptr, m_chat, nullptr);
    m_engineThread.quit();
    m_chatThread.quit();
    m_engineThread.wait();
    m_chatThread.wait();
}

void EngineController::loadCorpus(const CorpusRequest& request)
{
    ++m_corpusLoads;
    post(m_engine, [w = m_engine, request] { w->loadCorpus(request); });
}

void EngineController::startTraining(const TrainConfig& config, const QString& runDir)
{
    if (m_training || m_benchmarking)
        return;
    m_training = true;
    m_cancel->store(false);
    post(m_engine, [w = m_engine, config, runDir] { w->train(config, runDir); });
}

void EngineController::resume(const QString& runDir, int epochs)
{
    ResumeChanges changes;
    changes.epochs = epochs;
    resume(runDir, changes);
}

void EngineController::resume(const QString& runDir, const ResumeChanges& changes)
{
    if (m_training || m_benchmarking)
        return;
    m_training = true;
    m_cancel->store(false);
    post(m_engine, [w = m_engine, runDir, changes] { w->resume(runDir, changes); });
}

void EngineController::runBench(const BenchConfig& config)
{
    if (m_training || m_benchmarking) {
        Q_EMIT failed(tr("Wait for the current training or benchmark to end first."), Job::Bench);
        return;
    }
    m_benchmarking = true;
    m_cancel->store(false);
    post(m_engine, [w = m_engine, config] { w->bench(config); });
}

void EngineController::runDoctor()
{
    post(m_engine, [w = m_engine] { w->doctor(); });
}

bool EngineController::canImportKeras()
{
#ifdef CHATBENCH_HAVE_KERAS
    return true;
#else
    return false;
#endif
}

void EngineController::importKeras(const QString& model, const QString& tokenizer, const QString& startWord,
    const QString& endWord, const QString& runDir)
{
    post(m_engine, [w = m_engine, model, tokenizer, startWord, endWord, runDir] {
        w->importKeras(model, tokenizer, startWord, endWord, runDir);
    });
}

void EngineController::stop()
{
    m_cancel->store(true);
}

void EngineController::loadRun(const QString& runDir, bool best)
{
    // Queued behind the training on the engine thread: said, or the click seemed lost and the chat
    // switched runs later without a word.
    if (m_training)
        Q_EMIT log(tr("%1 opens once the training in progress stops").arg(QFileInfo(runDir).fileName()));
    post(m_engine, [w = m_engine, runDir, best] { w->loadRun(runDir, best); });
}

quint64 EngineController::chat(const QString& text, const DecodeOptions& options)
{
    const quint64 id = m_nextId++;
    post(m_chat, [w = m_chat, id, text, options] { w->reply(id, text, options); });
    return id;
}

void EngineController::probeDiversity(const QStringList& questions, const DecodeOptions& options)
{
    post(m_chat, [w = m_chat, questions, options] { w->probe(questions, options); });
}

void EngineController::explain(const ChatAnswer& answer, StateMetric metric, int neighbours)
{
    post(m_chat, [w = m_chat, answer, metric, neighbours] { w->explain(answer, metric, neighbours); });
}

void EngineController::whatIf(const ChatAnswer& answer, int step, qint64 token, const QString& word)
{
    post(m_chat, [w = m_chat, answer, step, token, word] { w->whatIf(answer, step, token, word); });
}

void EngineController::compareQuestions(const QString& a, const QString& b)
{
    post(m_chat, [w = m_chat, a, b] { w->compare(a, b); });
}

#include "enginecontroller.moc"
