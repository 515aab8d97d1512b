// chatbench-cli train — a new run into a folder, or --resume one; Ctrl-C stops with a checkpoint.

#include "chatbench/config.h"
#include "chatbench/error.h"
#include "chatbench/runs.h"
#include "chatbench/trainer.h"
#include "common.h"

#include <unistd.h>

#include <cmath>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <set>

namespace cli {

namespace {

using namespace chatbench;

struct TrainArgs {
    std::string corpus;
    CorpusFlags corpusFlags;
    std::string preset = "seed";
    std::string run = "runs/latest";
    bool resume = false;
    bool quiet = false;
    std::optional<int> epochs, batchSize, hidden, embed, layers, maxSource, maxTarget, patience, threads, minFreq,
        maxVocab, checkpointEvery, keepCheckpoints;
    std::optional<double> lr, dropout, teacherForcing, clip, valFraction;
    std::optional<uint64_t> seed;
    std::optional<std::string> optimizer, device, precision, tokenizer;
    bool attention = false, noAttention = false, sharedEmbedding = false, nondeterministic = false, noBucketing = false,
         tf32 = false;
};

// The preset, then every option the user gave.
TrainConfig configFrom(const TrainArgs& a)
{
    TrainConfig c = preset(a.preset);
    auto set = [](auto& field, const auto& value) {
        if (value)
            field = *value;
    };
    set(c.epochs, a.epochs);
    set(c.batchSize, a.batchSize);
    set(c.model.hidden, a.hidden);
    set(c.model.embedDim, a.embed);
    set(c.model.layers, a.layers);
    set(c.model.maxSourceLength, a.maxSource);
    set(c.model.maxTargetLength, a.maxTarget);
    set(c.patience, a.patience);
    set(c.threads, a.threads);
    set(c.tokenizer.minFrequency, a.minFreq);
    set(c.tokenizer.maxSize, a.maxVocab);
    set(c.checkpointEverySteps, a.checkpointEvery);
    set(c.keepCheckpoints, a.keepCheckpoints);
    set(c.learningRate, a.lr);
    set(c.model.dropout, a.dropout);
    set(c.teacherForcing, a.teacherForcing);
    set(c.clipNorm, a.clip);
    set(c.validationFraction, a.valFraction);
    set(c.seed, a.seed);
    set(c.device, a.device);
    if (a.optimizer)
        c.optimizer = *parseOptimizer(*a.optimizer);
    if (a.precision)
        c.precision = *parsePrecision(*a.precision);
    if (a.tokenizer)
        c.tokenizer.mode = *parseTokenizerMode(*a.tokenizer);
    if (a.attention)
        c.model.attention = true;
    if (a.noAttention)
        c.model.attention = false;
    if (a.sharedEmbedding)
        c.model.sharedEmbedding = true;
    if (a.nondeterministic)
        c.deterministic = false;
    if (a.tf32)
        c.tf32 = true;
    if (a.noBucketing)
        c.bucketing = false;
    c.corpus = a.corpus;
    const LoadOptions opt = a.corpusFlags.options();
    c.corpusFormat = opt.format;
    c.latin1 = opt.latin1;
    c.pairing = opt.pairing;
    c.strictCorpus = opt.strict;
    return c;
}

int run(const TrainArgs& a)
{
    const bool tty = progressTerminal(STDOUT_FILENO);
    TrainCallbacks cb;
    cb.cancel = &cancelFlag();
    // Standard output gone (its reader ended: `train | head`): stop as a closed terminal does, with
    // a checkpoint, rather than train on unseen (a signal used to end it without a word).
    const auto outputLost = [] {
        if (!std::cout)
            cancelFlag().store(true);
    };
    cb.onLog = [&](const std::string& m) {
        if (tty && !a.quiet)
            std::cout << "\r\033[K"; // over the progress line, not after it
        std::cout << "note: " << m << std::endl;
        outputLost();
    };
    double lastLoss = NAN;
    cb.onStep = [&](const StepMetrics& m) { lastLoss = m.loss; };
    cb.onProgress = [&](const TrainProgress& p) {
        if (!tty || a.quiet)
            return;
        std::cout << "\r\033[Kepoch " << p.epoch + 1 << "/" << p.epochs << "  step " << p.step << "/" << p.totalSteps
                  << "  loss " << fixed(lastLoss, 3) << "  elapsed " << formatDuration(p.elapsedSeconds) << "  ETA "
                  << formatDuration(p.etaSeconds) << std::flush;
        outputLost();
    };
    cb.onEpoch = [&](const EpochMetrics& m) {
        if (tty && !a.quiet)
            std::cout << "\r\033[K";
        if (!a.quiet)
            std::cout << "epoch " << std::setw(3) << m.epoch + 1 << "  train loss " << fixed(m.trainLoss, 4)
                      << "  val loss " << (std::isfinite(m.validationLoss) ? fixed(m.validationLoss, 4) : "-")
                      << "  val acc "
                      << (std::isfinite(m.validationAccuracy) ? fixed(100 * m.validationAccuracy, 1) + "%" : "-")
                      << "  " << fixed(m.seconds, 2) << " s  " << fixed(m.tokensPerSecond, 0) << " tok/s" << std::endl;
        outputLost();
    };

    TrainResult r;
    if (a.resume) {
        ResumeChanges changes;
        changes.epochs = a.epochs.value_or(0);
        changes.patience = a.patience;
        changes.checkpointEverySteps = a.checkpointEvery;
        changes.keepCheckpoints = a.keepCheckpoints;
        changes.threads = a.threads;
        changes.device = a.device;
        if (a.tf32)
            changes.tf32 = true;
        // The run's own corpus, unless the user names another (then the fingerprint must match).
        if (a.corpus.empty()) {
            const CancelWatch watch;
            r = resume(a.run, cb, changes);
        } else {
            const Corpus corpus = loadCorpusArg(a.corpus, a.corpusFlags);
            const CancelWatch watch;
            r = resume(a.run, corpus, cb, changes);
        }
    } else {
        TrainArgs args = a;
        if (args.corpus.empty())
            args.corpus = defaultCorpusPath();
        const TrainConfig cfg = configFrom(args);
        validate(cfg);
        requireNewRunPlace(a.run); // said before the corpus is read and the start announced
        const Corpus corpus = loadCorpusArg(args.corpus, args.corpusFlags, a.corpus.empty());
        std::cout << "training preset '" << cfg.preset << "' on " << chatbench::printable(args.corpus) << " ("
                  << corpus.pairs.size() << (corpus.pairs.size() == 1 ? " pair) into " : " pairs) into ")
                  << chatbench::printable(a.run) << std::endl;
        const CancelWatch watch;
        r = train(cfg, corpus, a.run, cb);
    }
    if (tty && !a.quiet)
        std::cout << "\r\033[K";
    // Where the output went away, the outcome goes to standard error (the end of the command
    // reports the output that failed).
    std::ostream& out = std::cout ? std::cout : std::cerr;
    if (!std::cout)
        out << "standard output could not be written (its reader ended, or its disk is full: the reason is below)"
            << (r.status == TrainStatus::Cancelled ? ": training stopped" : "") << "\n";
    const std::string& folder = r.runDir.empty() ? a.run : r.runDir; // moved while training: where it went
    out << describe(r) << "\nrun folder: " << chatbench::printable(folder) << "\n";
    if (r.status == TrainStatus::Cancelled)
        out << "continue with: chatbench-cli train --resume --run " << shellWord(folder) << "\n";
    return r.status == TrainStatus::Cancelled ? 130 : 0;
}

} // namespace

void addTrainCommand(CLI::App& app, int& exitCode)
{
    auto a = std::make_shared<TrainArgs>();
    auto* cmd = app.add_subcommand("train", "Train a chatbot into a run folder (Ctrl-C stops and checkpoints)");
    cmd->add_option("--corpus", a->corpus, std::string("Corpus file or folder (") + kDefaultCorpusHelp + ")");
    addCorpusFlags(cmd, a->corpusFlags);
    cmd->add_option("--preset", a->preset, "seed (the Keras recipe), quick, large")->check(oneOf(presetNames()));
    cmd->add_option("--run", a->run, "Run folder")->capture_default_str();
    cmd->add_flag("--resume", a->resume, "Continue the run in --run from its last checkpoint");
    cmd->add_flag("--quiet", a->quiet, "Only the summary");
    cmd->add_option("--epochs", a->epochs, "Epochs (with --resume: the new total)")->check(CLI::Range(1, 100000));
    cmd->add_option("--batch-size", a->batchSize, "Pairs per batch")->check(CLI::Range(1, 65536));
    cmd->add_option("--lr", a->lr, "Learning rate")->check(finiteIn(1e-12, 10));
    cmd->add_option("--optimizer", a->optimizer, joinNames(optimizerNames()))->check(oneOf(optimizerNames()));
    cmd->add_option("--embed", a->embed, "Embedding width");
    cmd->add_option("--hidden", a->hidden, "LSTM units");
    cmd->add_option("--layers", a->layers, "LSTM layers");
    cmd->add_option("--dropout", a->dropout, "Dropout")->check(finiteIn(0, 0.999));
    auto* attention = cmd->add_flag("--attention", a->attention, "Luong attention");
    cmd->add_flag("--no-attention", a->noAttention, "No attention")->excludes(attention);
    cmd->add_flag("--shared-embedding", a->sharedEmbedding, "One embedding for encoder and decoder");
    cmd->add_option("--max-source", a->maxSource, "Prompt words kept");
    cmd->add_option("--max-target", a->maxTarget, "Response tokens kept (with <start>/<end>)");
    cmd->add_option("--teacher-forcing", a->teacherForcing, "Teacher-forcing ratio 0..1")->check(finiteIn(0, 1));
    cmd->add_option("--clip", a->clip, "Gradient-norm clip (0 = off)")->check(finiteIn(0, 1e9));
    cmd->add_option("--val-fraction", a->valFraction, "Validation fraction")->check(finiteIn(0, 0.99));
    cmd->add_option("--patience", a->patience, "Early-stopping patience in epochs (0 = off)");
    cmd->add_option("--seed", a->seed, "Random seed")->check(unsignedNumber());
    cmd->add_flag("--nondeterministic", a->nondeterministic, "Allow nondeterministic kernels");
    cmd->add_flag("--no-bucketing", a->noBucketing, "Plain shuffled batches");
    cmd->add_option("--checkpoint-every", a->checkpointEvery, "Also checkpoint every N steps");
    cmd->add_option("--keep-checkpoints", a->keepCheckpoints,
           "Newest checkpoints kept to fall back to when the newest is corrupt (default 2)")
        ->check(CLI::Range(1, 1000));
    cmd->add_option("--device", a->device, "cpu, cuda, cuda:N");
    cmd->add_option("--precision", a->precision, joinNames(precisionNames()))->check(oneOf(precisionNames()));
    cmd->add_flag("--tf32", a->tf32, "CUDA fp32: allow TF32 tensor-core maths (matmuls and cuDNN's LSTM)");
    cmd->add_option("--threads", a->threads, "CPU threads (0 = default)");
    cmd->add_option("--min-freq", a->minFreq, "Minimum word frequency");
    cmd->add_option("--max-vocab", a->maxVocab, "Vocabulary size limit (0 = none)");
    cmd->add_option("--tokenizer", a->tokenizer, joinNames(tokenizerModeNames()))->check(oneOf(tokenizerModeNames()));
    cmd->callback([a, cmd, &exitCode] {
        if (a->resume) {
            // What config.json fixes cannot change on resume: refused rather than ignored.
            // The corpus options describe --corpus; the run's own corpus is read as config.json says.
            static const std::set<std::string> corpusOptions { "--format", "--latin1", "--pairing", "--strict",
                "--verbose", "--max-corpus-mb", "--max-line-kb" };
            // Where and how long it runs may change (config.json is rewritten with them).
            static const std::set<std::string> kept { "--corpus", "--run", "--resume", "--quiet", "--epochs",
                "--patience", "--checkpoint-every", "--keep-checkpoints", "--threads", "--device", "--tf32" };
            std::string given, withoutCorpus;
            for (const CLI::Option* o : cmd->get_options()) {
                if (o->count() == 0 || kept.count(o->get_name()))
                    continue;
                if (!corpusOptions.count(o->get_name()))
                    given += (given.empty() ? "" : ", ") + o->get_name();
                else if (a->corpus.empty())
                    withoutCorpus += (withoutCorpus.empty() ? "" : ", ") + o->get_name();
            }
            if (!given.empty())
                throw Error("--resume continues the run with the settings in its config.json; " + given
                    + " cannot change there (only --epochs, --patience, --checkpoint-every, --keep-checkpoints, "
                      "--threads, --device, --tf32 and, with --corpus, the corpus options can)");
            if (!withoutCorpus.empty())
                throw Error(withoutCorpus + (withoutCorpus.find(',') == std::string::npos ? " applies" : " apply")
                    + " to --corpus; without it the run's own corpus is read as its config.json says (give "
                      "--corpus with the same file to read it otherwise)");
        }
        exitCode = run(*a);
    });
}

} // namespace cli
