#pragma once
// The UI's only door to the engine.
//
//   auto* engine = new EngineController(this);          // starts the engine and chat threads
//   connect(engine, &EngineController::epochDone, plot, &LivePlot::addEpoch);
//   connect(engine, &EngineController::failed, this, &MainWindow::showError);  // (message, job)
//   engine->loadCorpus(request);
//   engine->startTraining(config, runDir);
//   engine->stop();                                       // takes effect after the current batch
//
// Jobs run on a long-lived engine thread (corpus, training, runs); replies run on a second,
// chat thread against a snapshot of the weights, so chatting works while training goes on.
// Engine callbacks arrive as queued signals carrying small value structs; any failure arrives
// as one `failed` signal with a message a user can act on.

#include "chatbench/bench.h"
#include "chatbench/chatbot.h"
#include "chatbench/config.h"
#include "chatbench/corpus.h"
#include "chatbench/corpusstats.h"
#include "chatbench/devices.h"
#include "chatbench/doctor.h"
#include "chatbench/explain.h"
#include "chatbench/runs.h"
#include "chatbench/trainer.h"

#include <QObject>
#include <QString>
#include <QStringList>
#include <QThread>
#include <QVector>

#include <atomic>
#include <memory>
#include <vector>

class EngineWorker;
class ChatWorker;

struct CorpusRequest {
    QString path;
    chatbench::CorpusFormat format = chatbench::CorpusFormat::Auto;
    bool latin1 = false;
    chatbench::Pairing pairing = chatbench::Pairing::Consecutive;
    bool strict = false; // fail on the first malformed record instead of skipping it
    chatbench::TokenizerOptions tokenizer; // for the vocabulary and OOV figures
};

struct CorpusSummary {
    CorpusRequest request;
    chatbench::CorpusStats stats; // computed by the engine at the requested tokenizer options
    std::shared_ptr<const std::vector<chatbench::Pair>> data; // all pairs, for the preview
};

struct RunSummary {
    QString runDir;
    chatbench::TrainConfig config;
    std::vector<chatbench::EpochMetrics> history;
    chatbench::BestWeights best; // the run's best-validation weights, when it has them
    bool bestLoaded = false; // these weights (not the latest checkpoint) were loaded
    qint64 step = 0; // training step of the weights loaded
    // What loading had to do (an older checkpoint fallen back to, state.json read from a
    // checkpoint's own state): empty when nothing.
    QString note;
};

struct ChatAnswer {
    quint64 id = 0; // the request's id
    QString prompt;
    chatbench::Reply reply;
    qint64 botStep = 0; // training step of the weights that answered
    // The weights that answered and how they decoded: explanations and what-if branches of
    // this reply use the same ones, even after training has moved on.
    std::shared_ptr<const chatbench::Chatbot> bot;
    chatbench::DecodeOptions options;
};

// An answer's explanation (occlusion and nearest training prompts) or one what-if branch of it.
struct ExplainResult {
    quint64 id = 0; // the answer's id
    chatbench::Explanation explanation; // without its reply (the answer has it)
    bool withNeighbours = false; // the nearest prompts were asked for (found, or a note why not)
};
struct BranchResult {
    quint64 id = 0; // the answer's id
    chatbench::Branch branch;
};

struct ProbeResult {
    QStringList questions;
    QStringList replies;
    int distinct = 0;
    chatbench::HandoffMode handoff = chatbench::HandoffMode::Correct;
};

Q_DECLARE_METATYPE(CorpusSummary)
Q_DECLARE_METATYPE(RunSummary)
Q_DECLARE_METATYPE(ChatAnswer)
Q_DECLARE_METATYPE(ProbeResult)
Q_DECLARE_METATYPE(ExplainResult)
Q_DECLARE_METATYPE(BranchResult)
Q_DECLARE_METATYPE(chatbench::QuestionComparison)
Q_DECLARE_METATYPE(chatbench::StepMetrics)
Q_DECLARE_METATYPE(chatbench::EpochMetrics)
Q_DECLARE_METATYPE(chatbench::TrainProgress)
Q_DECLARE_METATYPE(chatbench::TrainResult)
Q_DECLARE_METATYPE(chatbench::BenchReport)
Q_DECLARE_METATYPE(chatbench::BenchRow)
Q_DECLARE_METATYPE(chatbench::DoctorReport)

class EngineController : public QObject {
    Q_OBJECT

public:
    // Which job a failure belongs to, so the view that asked can show it in place.
    enum class Job { Devices, Corpus, Training, Run, Chat, Bench, Doctor, Import };
    Q_ENUM(Job)

    explicit EngineController(QObject* parent = nullptr);
    ~EngineController() override;

    void loadCorpus(const CorpusRequest& request);
    // Trains a new run on the loaded corpus into runDir.
    void startTraining(const chatbench::TrainConfig& config, const QString& runDir);
    // Continues a run on the corpus its config.json names (reloaded by the engine).
    void resume(const QString& runDir, int epochs = 0);
    // The same, changing what a resume may change (the device, threads, epochs …).
    void resume(const QString& runDir, const chatbench::ResumeChanges& changes);
    void stop();
    // Loads a saved run to chat with (and its history for the plots).
    // Opens a run for chat: its latest checkpoint, or (`best`) its best-validation weights.
    void loadRun(const QString& runDir, bool best = false);
    // Replies with the latest weights; returns the request id echoed in replyReady.
    quint64 chat(const QString& text, const chatbench::DecodeOptions& options);
    void probeDiversity(const QStringList& questions, const chatbench::DecodeOptions& options);
    // Why this reply (chat thread, with the weights that gave it): which words moved the state,
    // and (when `neighbours` > 0) the training prompts nearest by `metric`, from an index built
    // on first use for those weights (the last two sets are kept) → explained. Replies asked
    // meanwhile wait for the build.
    void explain(const ChatAnswer& answer, chatbench::StateMetric metric, int neighbours);
    // What `answer`'s bot would have said with token `token` (or, when -1, the typed `word`) at
    // decoder step `step` → branched (or failed, naming a word outside the vocabulary).
    void whatIf(const ChatAnswer& answer, int step, qint64 token, const QString& word);
    // Two questions to the current weights side by side → compared.
    void compareQuestions(const QString& a, const QString& b);
    // Benchmarks on the loaded corpus (engine thread; not while training). stop() cancels.
    void runBench(const chatbench::BenchConfig& config);
    bool isBenchmarking() const { return m_benchmarking; }
    // The environment doctor (engine thread, after any job in progress): doctorDone or failed.
    void runDoctor();
    // Whether this build can import Keras models (HDF5 and libzip were found).
    static bool canImportKeras();
    // Imports a Keras model into runDir (engine thread), diagnosing it on up to 30 prompts of the
    // loaded corpus: kerasImported (then load the run to chat) or failed(…, Job::Import).
    void importKeras(const QString& model, const QString& tokenizer, const QString& startWord, const QString& endWord,
        const QString& runDir);

    bool isTraining() const { return m_training; }
    // A corpus load is queued or running: training started now would take the corpus and the
    // tokenizer settings of before it.
    bool isLoadingCorpus() const { return m_corpusLoads > 0; }
    bool hasBot() const { return m_hasBot; }
    // Devices are probed once on the engine thread at start-up; empty until devicesReady.
    const std::vector<chatbench::DeviceInfo>& devices() const { return m_devices; }

Q_SIGNALS:
    void devicesReady();
    void corpusLoaded(const CorpusSummary& summary);
    void trainingStarted(const QString& runDir, const chatbench::TrainConfig& config, qint64 firstStep);
    void stepDone(const chatbench::StepMetrics& metrics);
    void epochDone(const chatbench::EpochMetrics& metrics);
    void progress(const chatbench::TrainProgress& progress);
    void trainingFinished(const chatbench::TrainResult& result, const QString& runDir);
    void runLoaded(const RunSummary& run);
    void botReady(qint64 step);
    void replyReady(const ChatAnswer& answer);
    void probeDone(const ProbeResult& result);
    void explained(const ExplainResult& result);
    void branched(const BranchResult& result);
    void compared(const chatbench::QuestionComparison& comparison);
    void benchProgress(const QString& what, int done, int total);
    void benchRow(const chatbench::BenchRow& row);
    void benchFinished(const chatbench::BenchReport& report); // empty rows: it failed (see failed)
    void doctorDone(const chatbench::DoctorReport& report);
    void kerasImported(const QString& runDir, const QString& report); // report: notes and diagnosis
    void log(const QString& message);
    void failed(const QString& message, EngineController::Job job);

private:
    QThread m_engineThread;
    QThread m_chatThread;
    EngineWorker* m_engine = nullptr;
    ChatWorker* m_chat = nullptr;
    std::shared_ptr<std::atomic<bool>> m_cancel;
    std::shared_ptr<std::atomic<bool>> m_closing; // set by the destructor: the chat thread's reply stops
    std::vector<chatbench::DeviceInfo> m_devices;
    bool m_training = false;
    int m_corpusLoads = 0; // queued or running
    bool m_benchmarking = false;
    bool m_hasBot = false;
    quint64 m_nextId = 1;
};
