#include "chatbench/trainer.h"

#include "atomicfile.h"
#include "batches.h"
#include "chatbench/devices.h"
#include "chatbench/error.h"
#include "chatbench/runs.h"
#include "checkpoint.h"
#include "model.h"
#include "runstate.h"
#include "snapshot.h"
#include "text.h"
#include "torchutil.h"
#include "trainstep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <numeric>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;

namespace chatbench {

namespace {

constexpr int kOverfitEpochs = 3; // rising validation epochs before the overfitting note

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0)
{
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Everything one training call works on.
struct Session {
    TrainConfig cfg;
    std::string runDir;
    std::string startedIn; // runDir as given (runDir follows the folder when it is renamed)
    const RunLock* lock = nullptr; // this process' hold on runDir
    Tokenizer tok;
    std::vector<Example> train;
    std::vector<Example> validation;
    Stepper step; // model, optimizer, device and precision
    RunState state;
};

struct Validation {
    double loss = NAN;
    double accuracy = NAN;
};

Validation validate(Session& s, const std::atomic<bool>* cancel, bool* cancelled)
{
    Validation v;
    if (s.validation.empty())
        return v;
    torch::NoGradGuard noGrad;
    s.step.model->eval();
    // Batches of pairs with similar response lengths: the decoder runs each batch to its longest
    // response, so a batch of mixed lengths computes mostly padding.
    std::vector<size_t> order(s.validation.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const auto &x = s.validation[a], &y = s.validation[b];
        return std::make_pair(x.target.size(), x.source.size()) < std::make_pair(y.target.size(), y.source.size());
    });
    const size_t B = static_cast<size_t>(s.cfg.batchSize);
    const int64_t batches = static_cast<int64_t>((order.size() + B - 1) / B);
    auto batchAt = [&](int64_t b) {
        const auto first = order.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(b) * B);
        const auto last
            = order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), (static_cast<size_t>(b) + 1) * B));
        return collate(s.validation, std::vector<size_t>(first, last), s.step.device);
    };
    std::vector<double> sums(static_cast<size_t>(batches));
    std::vector<int64_t> hits(static_cast<size_t>(batches)), counts(static_cast<size_t>(batches));
    const int64_t cores = evaluationCores(s.step, batches);
    // bf16: the weights' forms made once for every batch (nothing changes them in between).
    std::optional<StepBf16Weights> bf16Weights;
    makeStepBf16Weights(s.step, cores, bf16Weights);
    if (cores > 1) {
        // The batches side by side, the threads shared among them, and summed in batch order below: the result
        // does not depend on which finishes first. (No out-of-memory back-off here: inPasses changes
        // the stepper's pass size, which the lanes share; evaluationCores keeps devices that need it
        // on the one-at-a-time path below.)
        onCores(s.step, batches, cores, [&](int64_t b) {
            if (cancel && cancel->load())
                return;
            torch::NoGradGuard noGradHere; // the guard is per thread
            const Batch batch = batchAt(b);
            int64_t h = 0;
            sums[static_cast<size_t>(b)] = lossSum(s.step, batch, false, 1.0, &h).item<double>();
            hits[static_cast<size_t>(b)] = h;
            counts[static_cast<size_t>(b)] = batch.tokens;
        });
    } else {
        for (int64_t b = 0; b < batches && !(cancel && cancel->load()); ++b) {
            const Batch batch = batchAt(b);
            double batchSum = 0;
            int64_t batchHits = 0;
            inPasses(
                s.step, batch, [&] { batchSum = 0, batchHits = 0; },
                [&](const Batch& part) {
                    int64_t h = 0;
                    batchSum += lossSum(s.step, part, false, 1.0, &h).item<double>();
                    batchHits += h;
                });
            sums[static_cast<size_t>(b)] = batchSum;
            hits[static_cast<size_t>(b)] = batchHits;
            counts[static_cast<size_t>(b)] = batch.tokens;
        }
    }
    if (cancel && cancel->load()) {
        *cancelled = true;
        return v;
    }
    double sum = 0;
    int64_t tokens = 0, correct = 0;
    for (size_t b = 0; b < sums.size(); ++b) {
        sum += sums[b];
        tokens += counts[b];
        correct += hits[b];
    }
    v.loss = sum / static_cast<double>(tokens);
    v.accuracy = static_cast<double>(correct) / static_cast<double>(tokens);
    return v;
}

uint64_t epochSeed(uint64_t seed, int epoch)
{
    return seed * 6364136223846793005ULL + 1442695040888963407ULL * static_cast<uint64_t>(epoch + 1);
}

// fp32 on a GPU with TF32 maths allowed, said so.
std::string mathNote(const Stepper& s, const TrainConfig& cfg)
{
    return s.device.is_cuda() && s.precision == Precision::FP32 && cfg.tf32 ? " (TF32 maths)" : "";
}

constexpr int64_t kLargeVocabulary = 30000;

// A vocabulary that outweighs the rest of the model by far (a corpus of mostly one-off words):
// said once at the start, with the size it costs, since the run may still be what was wanted.
std::string largeVocabularyNote(const TrainConfig& cfg)
{
    const ModelConfig& m = cfg.model;
    const int64_t all = parameterCount(m);
    const int64_t perWord = m.embedDim * (m.sharedEmbedding ? 1 : 2) + m.hidden + 1; // embeddings, projection
    const int64_t vocab = perWord * m.vocabSize;
    if (m.vocabSize < kLargeVocabulary || all <= 0 || 4 * vocab < 3 * all)
        return {};
    std::ostringstream o;
    o << "the vocabulary of " << m.vocabSize << " words holds " << std::lround(100.0 * vocab / all)
      << "% of the model's " << all << " parameters (about " << std::fixed << std::setprecision(2) << 16.0 * all / 1e9
      << " GB to train, and every step scores every word): --max-vocab N keeps the N most frequent words";
    return o.str();
}

void log(const TrainCallbacks& cb, const std::string& msg)
{
    if (cb.onLog)
        cb.onLog(msg);
}

// Device, precision, threads and determinism for this process, then the data.
void prepare(Session& s, const Corpus& corpus, const TrainCallbacks& cb)
{
    setThreads(s.cfg.threads);
    if (const unsigned cores = std::thread::hardware_concurrency();
        s.cfg.device == "cpu" && cores > 0 && s.cfg.threads > static_cast<int>(cores))
        log(cb,
            std::to_string(s.cfg.threads) + " threads on " + std::to_string(cores)
                + " cores: the threads take turns on the cores, which is slower than one thread per core");
    setDeterminism(s.cfg.deterministic);
    setTf32(s.cfg.tf32);
    const ResolvedDevice r = resolveDevice(s.cfg.device, s.cfg.precision);
    if (!r.note.empty())
        log(cb, r.note);

    const Split split = splitPairs(corpus.pairs, s.cfg.validationFraction, s.cfg.seed);
    if (s.tok.size() == 0) {
        s.tok = Tokenizer::build(split.train, s.cfg.tokenizer);
        if (s.tok.size() <= 4) // <pad> <unk> <start> <end>: every reply would be <unk>
            throw Error("the vocabulary holds no words: no word of the training pairs is seen "
                + std::to_string(s.cfg.tokenizer.minFrequency) + " times or more"
                + (s.cfg.tokenizer.minFrequency > 1 ? std::string(" (min_frequency); lower it") : std::string())
                + (s.cfg.tokenizer.mode != TokenizerMode::Punctuation
                        ? "; a corpus of punctuation or symbols has words only with --tokenizer punct"
                        : ""));
    }
    int64_t skipped = 0, skippedVal = 0;
    s.train = makeExamples(split.train, s.tok, s.cfg.model, &skipped);
    s.validation = makeExamples(split.validation, s.tok, s.cfg.model, &skippedVal);
    if (skipped + skippedVal > 0)
        log(cb,
            std::to_string(skipped + skippedVal)
                + " pair(s) skipped: prompt or response has no words after tokenizing");
    if (s.train.empty())
        throw Error("no training pairs left after tokenizing the corpus");
    if (s.validation.empty() && s.cfg.patience > 0)
        log(cb,
            "patience " + std::to_string(s.cfg.patience)
                + " is off: early stopping watches the validation loss, and this run has no validation pairs "
                  "(a validation fraction above 0 on a corpus of more pairs gives some)");
    s.cfg.model.vocabSize = s.tok.size();

    s.step = makeStepper(s.cfg, parseDevice(r.device), r.precision);
}

// Writes go by path: a run folder renamed while it trains (`mv`, a file manager) is followed to
// where it went, rather than written into whatever folder takes the old name, another run's
// perhaps; a folder removed ends training. Called before each group of writes.
void followRunFolder(Session& s, const TrainCallbacks& cb)
{
    if (!s.lock)
        return;
    const std::string now = s.lock->currentFolder(s.runDir);
    if (now.empty())
        throw Error(s.runDir, 0,
            "the run folder was removed (or moved where this process cannot follow it) while this process was "
            "training it: training stopped, nothing more was saved");
    if (now != s.runDir) {
        log(cb,
            "the path " + printable(s.runDir) + " no longer leads to this run's folder, which is now at "
                + printable(now) + " (moved, or a link on the way changed): training goes on there");
        s.runDir = now;
    }
    // The folder is where it was, but its files went (a move to another file system copies, then
    // deletes): whatever this process saved now would be a run without config.json or its lock.
    if (!s.lock->lockFileIntact(s.runDir))
        throw Error(s.runDir, 0,
            "the run's lock file (.lock) was removed while this process was training it (the folder moved to "
            "another file system, or its files deleted?): training stopped, nothing more was saved here");
}

// `write` where the run's folder is now; when it fails because the folder moved meanwhile (a
// rename during a save makes the save's own rename fail), once more where it went, its cut-short
// temporary file removed there.
void writeFollowing(Session& s, const TrainCallbacks& cb, const std::function<void()>& write)
{
    followRunFolder(s, cb);
    const std::string before = s.runDir;
    try {
        write();
    } catch (const Error&) {
        followRunFolder(s, cb);
        if (s.runDir == before)
            throw;
        removeOwnTempFiles(s.runDir);
        write();
    }
}

// Its validation loss has not improved for `patience` epochs before all its epochs were done.
bool stoppedEarly(const Session& s)
{
    return s.state.epoch < s.cfg.epochs && s.cfg.patience > 0 && s.state.badEpochs >= s.cfg.patience;
}

TrainResult loop(Session& s, const TrainCallbacks& cb)
{
    TrainResult result;
    result.device = s.step.device.is_cpu() ? "cpu" : "cuda:" + std::to_string(s.step.device.index());
    result.precision = s.step.precision;
    const auto callStart = Clock::now();
    const int64_t batchesPerEpoch = static_cast<int64_t>((s.train.size() + s.cfg.batchSize - 1) / s.cfg.batchSize);
    const int64_t totalSteps = batchesPerEpoch * s.cfg.epochs;
    const int64_t firstStep = s.state.step;
    const double elapsedAtStart = s.state.elapsedSeconds;
    s.step.lossScale = s.state.lossScale;
    s.step.goodSteps = s.state.lossScaleGoodSteps;

    auto finish = [&](TrainStatus status) {
        result.status = status;
        if (s.runDir != s.startedIn)
            result.runDir = s.runDir;
        result.epochsDone = s.state.epoch;
        result.steps = s.state.step;
        result.history = s.state.history;
        result.finalTrainLoss = s.state.history.empty() ? NAN : s.state.history.back().trainLoss;
        result.bestValidationLoss = s.state.haveBest ? s.state.bestValidationLoss : NAN;
        result.seconds = secondsSince(callStart);
        return result;
    };
    auto cancelled = [&] { return cb.cancel && cb.cancel->load(); };
    auto noteBackOff = [&](int64_t passRowsBefore) {
        if (s.step.passRows != passRowsBefore)
            log(cb,
                "out of memory on " + s.step.device.str() + ": each batch of " + std::to_string(s.cfg.batchSize)
                    + " now runs as passes of " + std::to_string(s.step.passRows)
                    + " pairs (their gradients summed: the update of the whole batch)");
    };
    std::vector<StepMetrics> unsavedSteps; // appended to steps.csv with the next checkpoint
    auto checkpoint = [&] {
        s.state.elapsedSeconds = elapsedAtStart + secondsSince(callStart);
        s.state.lossScale = s.step.lossScale;
        s.state.lossScaleGoodSteps = s.step.goodSteps;
        // Steps first: rows past state.json's step (a save cut short) are ignored by readers.
        writeFollowing(s, cb, [&] { appendRunSteps(s.runDir, unsavedSteps); });
        unsavedSteps.clear();
        settleOptimizer(s.step);
        writeFollowing(
            s, cb, [&] { saveCheckpoint(s.runDir, s.step.model, *s.step.optimizer, s.state, s.cfg.keepCheckpoints); });
    };

    if (cb.onSnapshot)
        cb.onSnapshot(makeSnapshot(s.cfg, s.tok, s.step.model, s.state.step));
    while (s.state.epoch < s.cfg.epochs && !s.state.finished) {
        const auto plan = planBatches(s.train, s.cfg.batchSize, s.cfg.bucketing, epochSeed(s.cfg.seed, s.state.epoch));
        if (s.state.batchInEpoch > static_cast<int64_t>(plan.size()))
            throw Error(statePath(s.runDir), 0,
                "bad state: 'batch_in_epoch' is " + std::to_string(s.state.batchInEpoch) + " but an epoch of "
                    + std::to_string(s.train.size()) + " training pairs has " + std::to_string(plan.size())
                    + " batches (the file is damaged, or the corpus changed since)");
        auto epochStart = Clock::now()
            - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.state.epochSeconds));
        for (int64_t b = s.state.batchInEpoch; b < static_cast<int64_t>(plan.size()); ++b) {
            if (cancelled()) {
                s.state.epochSeconds = secondsSince(epochStart);
                checkpoint();
                log(cb, "stopped at step " + std::to_string(s.state.step) + "; checkpoint " + s.state.checkpoint);
                return finish(TrainStatus::Cancelled);
            }
            const auto stepStart = Clock::now();
            // Dropout and scheduled sampling repeat exactly after a resume: the CPU generator is
            // reseeded from (seed, step), a CUDA generator's state is in the checkpoint.
            seedStep(s.cfg.seed, s.state.step);
            Batch batch = collate(s.train, plan[static_cast<size_t>(b)], s.step.device);
            const int64_t passRowsBefore = s.step.passRows;
            const StepOutcome out = trainStep(s.step, batch);
            noteBackOff(passRowsBefore);
            if (!std::isfinite(out.loss) && !s.step.lossScaling)
                throw Error("training diverged: the loss is " + std::to_string(out.loss) + " at step "
                    + std::to_string(s.state.step + 1)
                    + "; lower the learning rate or turn on gradient clipping (the last good checkpoint is "
                    + s.state.checkpoint + ")");
            const double lossValue = out.loss;
            ++s.state.step;
            s.state.batchInEpoch = b + 1;
            countStep(s.state.epochLossSum, s.state.epochTokens, out, batch.tokens);

            const double stepSeconds = secondsSince(stepStart);
            const double elapsed = elapsedAtStart + secondsSince(callStart);
            const StepMetrics sm { s.state.epoch, s.state.step, lossValue,
                stepSeconds > 0 ? static_cast<double>(batch.tokens) / stepSeconds : 0, elapsed };
            unsavedSteps.push_back(sm);
            if (cb.onStep)
                cb.onStep(sm);
            if (cb.onProgress) {
                const int64_t doneHere = s.state.step - firstStep;
                const double perStep = secondsSince(callStart) / static_cast<double>(std::max<int64_t>(1, doneHere));
                cb.onProgress({ s.state.epoch, s.cfg.epochs, s.state.step, totalSteps, elapsed,
                    perStep * static_cast<double>(std::max<int64_t>(0, totalSteps - s.state.step)) });
            }
            if (s.cfg.checkpointEverySteps > 0 && s.state.step % s.cfg.checkpointEverySteps == 0) {
                s.state.epochSeconds = secondsSince(epochStart);
                checkpoint();
            }
        }

        bool valCancelled = false;
        const int64_t passRowsBefore = s.step.passRows;
        const Validation v = validate(s, cb.cancel, &valCancelled);
        noteBackOff(passRowsBefore);
        // A validation set scored NaN: the weights are no longer finite (an update went wrong),
        // which the training loss, taken before each update, does not show yet.
        if (!s.validation.empty() && !valCancelled && !std::isfinite(v.loss) && !s.step.lossScaling)
            throw Error("training diverged: the validation loss is " + std::to_string(v.loss) + " after step "
                + std::to_string(s.state.step)
                + "; lower the learning rate or turn on gradient clipping (the last good checkpoint is "
                + s.state.checkpoint + ")");
        if (valCancelled) {
            s.state.epochSeconds = secondsSince(epochStart);
            checkpoint();
            return finish(TrainStatus::Cancelled);
        }
        EpochMetrics m;
        m.epoch = s.state.epoch;
        m.step = s.state.step;
        m.trainLoss = s.state.epochTokens > 0 ? s.state.epochLossSum / static_cast<double>(s.state.epochTokens) : NAN;
        m.validationLoss = v.loss;
        m.validationAccuracy = v.accuracy;
        m.perplexity = std::exp(std::isfinite(v.loss) ? v.loss : m.trainLoss);
        m.seconds = secondsSince(epochStart);
        m.tokensPerSecond = m.seconds > 0 ? static_cast<double>(s.state.epochTokens) / m.seconds : 0;
        m.elapsedSeconds = elapsedAtStart + secondsSince(callStart);
        s.state.history.push_back(m);

        bool stopEarly = false, improved = false;
        if (std::isfinite(v.loss)) {
            if (!s.state.haveBest || v.loss < s.state.bestValidationLoss) {
                s.state.bestValidationLoss = v.loss;
                s.state.haveBest = true;
                s.state.badEpochs = 0;
                improved = true;
            } else if (s.cfg.patience > 0 && ++s.state.badEpochs >= s.cfg.patience) {
                stopEarly = true;
            }
        }
        ++s.state.epoch;
        s.state.batchInEpoch = 0;
        s.state.epochLossSum = 0;
        s.state.epochTokens = 0;
        s.state.epochSeconds = 0;
        s.state.finished = stopEarly || s.state.epoch >= s.cfg.epochs;
        writeFollowing(s, cb, [&] { writeMetricsCsv(s.runDir, s.state.history); });
        checkpoint();
        if (improved)
            writeFollowing(s, cb, [&] { keepBestCheckpoint(s.runDir, s.state); });
        // Said once per stretch without improvement: when it first reaches kOverfitEpochs.
        if (static_cast<int>(s.state.history.size()) - 1 - bestEpochIndex(s.state.history) == kOverfitEpochs) {
            if (const std::string note = overfittingNote(s.state.history, kOverfitEpochs); !note.empty())
                log(cb, note);
        }
        if (cb.onEpoch)
            cb.onEpoch(m);
        if (cb.onSnapshot)
            cb.onSnapshot(makeSnapshot(s.cfg, s.tok, s.step.model, s.state.step));
        if (stopEarly) {
            log(cb, "early stop: validation loss has not improved for " + std::to_string(s.cfg.patience) + " epochs");
            return finish(TrainStatus::EarlyStopped);
        }
    }
    // A resume of a run that had stopped early, with nothing to add: still stopped early.
    return finish(stoppedEarly(s) ? TrainStatus::EarlyStopped : TrainStatus::Finished);
}

} // namespace

namespace {

// The corpus path config.json keeps: absolute, so that resume and chat find it from any folder.
// A name that is no file (a corpus built in memory) stays as it is.
std::string absoluteCorpusPath(const std::string& path)
{
    std::error_code ec;
    if (path.empty() || !fs::exists(path, ec))
        return path;
    const std::string abs = fs::absolute(path, ec).lexically_normal().string();
    // config.json is UTF-8: under a working folder whose name is not, the path stays as given.
    return ec || text::invalidUtf8Offset(abs) != std::string::npos ? path : abs;
}

} // namespace

uint64_t corpusFingerprint(const std::vector<Pair>& pairs)
{
    text::Fingerprint f;
    for (const Pair& p : pairs) {
        f.add(p.prompt);
        f.add(p.response);
    }
    return f.value();
}

bool sameCorpusFingerprint(uint64_t recorded, uint64_t actual)
{
    return recorded == actual
        || (recorded > (uint64_t(1) << 53) && static_cast<double>(recorded) == static_cast<double>(actual));
}

TrainResult train(const TrainConfig& cfg, const Corpus& corpus, const std::string& runDir, const TrainCallbacks& cb)
{
    validate(cfg);
    requireNewRunPlace(runDir);
    std::string made; // the topmost folder this start made
    const RunLock lock = lockNewRunFolder(runDir, made); // one writer; a second train on this folder stops here
    // config.json without state.json is a start killed before its first checkpoint: start afresh.
    requireNewRunFolder(runDir, kResumeOrChooseAnother);
    std::error_code ec;

    Session s;
    try {
        s.cfg = cfg;
        s.cfg.corpus = absoluteCorpusPath(cfg.corpus);
        s.cfg.pairing = corpus.pairing; // the pairs say how they were made; resume pairs the same way
        s.runDir = s.startedIn = runDir;
        s.lock = &lock;
        prepare(s, corpus, cb);
        s.state.corpusFingerprint = corpusFingerprint(corpus.pairs);
        s.state.vocabFingerprint = vocabularyFingerprint(s.tok);
        s.state.recipe = recipeJson(s.cfg);
        // Preparing can take minutes (a large corpus, a GPU's start): each write goes where the folder is.
        writeFollowing(s, cb, [&] { writeFileAtomic(configPath(s.runDir), toJson(s.cfg)); });
        writeFollowing(s, cb, [&] { s.tok.save(vocabPath(s.runDir)); });
        log(cb,
            "vocabulary " + std::to_string(s.tok.size()) + " words, " + std::to_string(s.train.size())
                + " training and " + std::to_string(s.validation.size()) + " validation pairs, device "
                + (s.step.device.is_cpu() ? "cpu" : "cuda") + " " + precisionName(s.step.precision)
                + mathNote(s.step, s.cfg));
        if (const std::string big = largeVocabularyNote(s.cfg); !big.empty())
            log(cb, big);
        writeFollowing(
            s, cb, [&] { saveCheckpoint(s.runDir, s.step.model, *s.step.optimizer, s.state, s.cfg.keepCheckpoints); });
    } catch (...) {
        // Refused or failed before its first whole checkpoint (a device that is not there, a model
        // too large, a disk that filled): what this start wrote goes again, the folder too if it
        // made it, rather than stay a half run that neither train, resume nor chat could use. Only
        // the folder this process holds, wherever it went: never another one put at its old name.
        const std::string folder = s.runDir.empty() ? runDir : s.runDir;
        if (lock.currentFolder(folder) == folder && !fs::exists(statePath(folder), ec))
            removeFailedStart(folder, made);
        throw;
    }
    return loop(s, cb);
}

Corpus corpusReadAsEarlier(const std::string& path, const TrainConfig& cfg, uint64_t recorded)
{
    if (path.empty() || recorded == 0)
        return {};
    try {
        LoadOptions opt = corpusLoadOptions(cfg);
        opt.keepEscapedBreaks = true;
        if (Corpus c = loadCorpus(path, opt); sameCorpusFingerprint(recorded, corpusFingerprint(c.pairs)))
            return c;
    } catch (const Error&) {
    }
    return {};
}

TrainResult resume(
    const std::string& runDir, const Corpus& corpus, const TrainCallbacks& cb, const ResumeChanges& changes)
{
    const int epochs = changes.epochs;
    Session s;
    requireRunNotInUse(runDir); // before its files are read: a writer may be making them
    s.cfg = loadRunConfig(runDir);
    s.runDir = s.startedIn = runDir;
    const RunLock lock(runDir); // one writer per run
    s.lock = &lock;
    requireRunFilesPlain(runDir);
    std::string recovered;
    s.state = loadState(runDir, &recovered);
    if (!recovered.empty())
        log(cb, recovered);
    {
        std::error_code ec; // a folder there would refuse the first save, after an epoch's work
        if (fs::is_directory(statePath(runDir), ec))
            throw Error(statePath(runDir), 0, "is a folder, not the run's state file: remove it");
    }
    // config.json edited since the run started: the same change as a resume option is refused, so
    // is this (a new seed or validation fraction would quietly give another split and other batches).
    // The settings recorded when the run started are in state.json, or beside its checkpoint.
    std::string recorded = s.state.recipe;
    if (recorded.empty() && !s.state.checkpoint.empty())
        try {
            recorded = loadStateFile(checkpointStatePath(runDir, s.state.checkpoint)).recipe;
        } catch (const Error&) { // none there either (a run older than the record)
        }
    if (!recorded.empty())
        if (const auto changed = recipeChanges(recorded, s.cfg); !changed.empty()) {
            std::string list;
            for (const auto& c : changed)
                list += (list.empty() ? "" : "; ") + c;
            throw Error(configPath(runDir), 0,
                "differs from the settings this run started with (" + list
                    + "): a resumed run keeps them (only the epochs, patience, checkpointing and device "
                      "can change); put them back, or start a new run with these");
        }
    // The state, its checkpoint and vocab.json of one run (before the corpus is compared: files
    // copied in from another run were "the corpus differs" otherwise).
    s.tok = Tokenizer::load(vocabPath(runDir));
    checkRunTokenizer(runDir, s.tok, s.cfg, /*size=*/false);
    checkRunVocabulary(s.tok, s.state);
    s.state.vocabFingerprint = vocabularyFingerprint(s.tok); // runs older than it record it from now
    const std::string recipe = recipeJson(s.cfg);
    Corpus asTrained; // the corpus as an earlier version read it, where that is what the run trained on
    if (s.cfg.corpus.empty() && s.state.step == 0 && s.state.corpusFingerprint == 0) {
        // A run that has not trained on anything yet (an imported model): this corpus becomes its
        // own, and training from here is fine-tuning.
        s.state.corpusFingerprint = corpusFingerprint(corpus.pairs);
        if (text::invalidUtf8Offset(corpus.path) != std::string::npos)
            throw Error(
                "the corpus path '" + printable(corpus.path) + "' is not valid UTF-8; rename the file or folder");
        s.cfg.corpus = absoluteCorpusPath(corpus.path);
        s.cfg.corpusFormat = corpus.format;
        s.cfg.pairing = corpus.pairing;
        writeFileAtomic(configPath(runDir), toJson(s.cfg));
        log(cb, "fine-tuning on " + (corpus.path.empty() ? std::string("the given corpus") : corpus.path));
    } else if (const uint64_t actual = corpusFingerprint(corpus.pairs);
               sameCorpusFingerprint(s.state.corpusFingerprint, actual)) {
        s.state.corpusFingerprint = actual; // exact again where a JSON tool had rounded it
    } else if (asTrained = corpusReadAsEarlier(corpus.path, s.cfg, s.state.corpusFingerprint);
               !asTrained.pairs.empty()) {
        // Trained on texts holding a CR or U+FEFF escape before they were read as line breaks:
        // it goes on with the pairs as it read them then.
        s.state.corpusFingerprint = corpusFingerprint(asTrained.pairs);
        log(cb,
            "the corpus holds a CR or U+FEFF escape inside a text, which this version reads as a line break (or "
            "drops); the run goes on with its texts as it was trained on them");
    } else {
        throw Error(runDir, 0,
            "the corpus differs from the one this run started with (" + s.cfg.corpus
                + "); resume needs the same pairs (where the file has not changed, this version reads some of its "
                  "records otherwise: `corpus validate --verbose` says which it skips)");
    }
    if (epochs > 0 && epochs < s.state.epoch)
        throw Error(runDir, 0,
            "the run has trained " + std::to_string(s.state.epoch) + " epochs; --epochs " + std::to_string(epochs)
                + " is fewer: give more to train further (config.json keeps " + std::to_string(s.cfg.epochs) + ")");
    {
        TrainConfig changed = s.cfg;
        if (epochs > 0)
            changed.epochs = epochs;
        const auto set = [](auto& field, const auto& value) {
            if (value)
                field = *value;
        };
        set(changed.patience, changes.patience);
        set(changed.checkpointEverySteps, changes.checkpointEverySteps);
        set(changed.keepCheckpoints, changes.keepCheckpoints);
        set(changed.threads, changes.threads);
        set(changed.device, changes.device);
        set(changed.tf32, changes.tf32);
        validate(changed);
        // 0 is whatever the process has (torch's default, or what the last run set).
        const auto used = [](int threads) { return threads > 0 ? threads : torch::get_num_threads(); };
        // (An imported model's run has no step to differ from.)
        if (s.state.step > 0 && s.cfg.device == "cpu" && changed.device == "cpu"
            && used(changed.threads) != used(s.cfg.threads))
            log(cb,
                "threads " + std::to_string(used(s.cfg.threads)) + " -> " + std::to_string(used(changed.threads))
                    + ": sums are rounded in another order, so the losses may differ in the last digits from an "
                      "uninterrupted run");
        if (epochs > 0 && epochs != s.cfg.epochs)
            s.state.finished = s.state.epoch >= epochs;
        if (toJson(changed) != toJson(s.cfg)) {
            s.cfg = changed;
            writeFileAtomic(configPath(runDir), toJson(s.cfg));
        }
    }
    // Finished means all epochs done or stopped early; a resume that raised the epochs and then
    // failed (a full disk) leaves config.json ahead of state.json: not finished.
    if (s.state.finished && s.state.epoch < s.cfg.epochs && !stoppedEarly(s))
        s.state.finished = false;
    const int64_t vocab = s.cfg.model.vocabSize;
    prepare(s, asTrained.pairs.empty() ? corpus : asTrained, cb);
    if (s.cfg.model.vocabSize != vocab)
        throw Error(vocabPath(runDir), 0, "vocabulary size does not match config.json");
    // The newest checkpoint, or (corrupt or missing) the newest older one that loads, with its state.
    std::string fellBack;
    const bool finished = s.state.finished;
    s.state = loadUsableCheckpoint(runDir, s.state, s.step.model, s.step.optimizer.get(), &fellBack);
    if (!fellBack.empty()) {
        s.state.vocabFingerprint = vocabularyFingerprint(s.tok); // as above: recorded from now
        log(cb, fellBack);
        s.state.finished = finished && s.state.epoch >= s.cfg.epochs;
    }
    s.state.recipe = recipe; // recorded from here on in runs that started without it
    // The step history continues from the checkpoint loaded (no rows from a save cut short).
    writeFollowing(s, cb, [&] { keepRunSteps(s.runDir, s.state.step); }); // loading can take a while
    if (s.state.finished && stoppedEarly(s)) // more epochs would not start it
        log(cb,
            "the run stopped early after " + std::to_string(s.state.epoch) + " of its " + std::to_string(s.cfg.epochs)
                + " epochs: its validation loss had not improved for " + std::to_string(s.state.badEpochs)
                + " epochs (patience " + std::to_string(s.cfg.patience)
                + "); give a larger --patience, or 0 for none, to train further");
    else if (s.state.finished)
        log(cb,
            "the run already finished " + std::to_string(s.state.epoch)
                + " epoch(s); give more epochs to train further");
    else
        log(cb, "resuming at epoch " + std::to_string(s.state.epoch + 1) + ", step " + std::to_string(s.state.step));
    return loop(s, cb);
}

TrainResult resume(const std::string& runDir, const TrainCallbacks& cb, const ResumeChanges& changes)
{
    return resume(runDir, loadRunCorpus(runDir), cb, changes);
}

TrainResult resume(const std::string& runDir, const Corpus& corpus, const TrainCallbacks& cb, int epochs)
{
    ResumeChanges changes;
    changes.epochs = epochs;
    return resume(runDir, corpus, cb, changes);
}

TrainResult resume(const std::string& runDir, const TrainCallbacks& cb, int epochs)
{
    ResumeChanges changes;
    changes.epochs = epochs;
    return resume(runDir, cb, changes);
}

std::string describe(const TrainResult& r)
{
    std::ostringstream o;
    o << std::fixed << trainStatusWord(r.status) << " after " << r.epochsDone << " epoch(s), " << r.steps
      << " steps in " << std::setprecision(1) << r.seconds << " s";
    if (!r.device.empty())
        o << " on " << r.device << " " << precisionName(r.precision);
    o << std::setprecision(4);
    if (std::isfinite(r.finalTrainLoss))
        o << "; final train loss " << r.finalTrainLoss;
    if (std::isfinite(r.bestValidationLoss))
        o << ", best validation loss " << r.bestValidationLoss;
    return o.str();
}

} // namespace chatbench
