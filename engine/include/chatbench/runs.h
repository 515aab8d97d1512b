#pragma once
// The run folder: one training run on disk, written by the trainer and read by everyone else.
// This header (with runs.cpp) is the only code that knows the files' names and formats.
//
//   for (const auto& run : chatbench::listRuns("runs"))           // newest first
//       std::cout << run.name << " " << run.config.preset << "\n";
//   auto history = chatbench::readRunHistory("runs/demo");       // every finished epoch
//   chatbench::Corpus c = chatbench::loadRunCorpus("runs/demo");  // the corpus it trained on
//
// A run folder holds config.json (TrainConfig), vocab.json (the tokenizer), state.json (where
// training stands, written after the checkpoint it names), metrics.csv (one row per epoch),
// steps.csv (one row per optimizer step, appended at each checkpoint) and
// ckpt-<step>.pt (model + optimizer) with ckpt-<step>.json (the state as of it), and, once an
// epoch has a validation loss, best-<step>.pt with best.json: the weights of the lowest validation
// loss. Each file is replaced atomically (temporary file + rename).

#include "chatbench/config.h"
#include "chatbench/corpus.h"
#include "chatbench/metrics.h"

#include <string>
#include <vector>

namespace chatbench {

// True when `dir` holds a run that has saved at least one checkpoint (chat and resume work).
// Throws Error when `dir` exists but cannot be listed (its checkpoints could not be seen).
bool isRun(const std::string& dir);
// True when `dir` holds any part of a run (a new run may not start there).
bool holdsRun(const std::string& dir);

// Throws Error naming `runDir` unless a new run (a training or an import) may start there: it is
// missing, empty, or a start killed before its first checkpoint, and no writer holds it. The
// trainer and the importer check again under the folder's lock; a front end calls this first, so
// that a refused folder is said before a corpus or a model is read. `advice` ends the message for
// a folder that holds a run.
inline const std::string kResumeOrChooseAnother = "resume it or choose another folder";
void requireNewRunPlace(const std::string& runDir, const std::string& advice = kResumeOrChooseAnother);

// The config.json of a run folder. Throws Error naming the file.
TrainConfig loadRunConfig(const std::string& runDir);
// The run's corpus, loaded from the path, format and encoding its config.json names.
// Throws Error naming the config and the corpus problem.
Corpus loadRunCorpus(const std::string& runDir);

// Every epoch in the run's metrics.csv, oldest first; empty when there is none yet.
// Rows that cannot be read are skipped (the file is rewritten whole after every epoch).
std::vector<EpochMetrics> readRunHistory(const std::string& runDir);
// Every optimizer step saved with the run's checkpoints (steps.csv), oldest first, so curves
// survive Stop, Resume and reopening; rows past state.json's step (a save that did not finish)
// are left out.
std::vector<StepMetrics> readRunSteps(const std::string& runDir);

// The epoch with the lowest validation loss (an index into `history`); -1 when no epoch has one.
int bestEpochIndex(const std::vector<EpochMetrics>& history);
// A sentence when the validation loss has stayed above its best for at least `risingEpochs`
// epochs while the training loss fell below its value at the best epoch (the model is memorising
// its training pairs), naming the best epoch and suggesting early stopping; empty otherwise.
std::string overfittingNote(const std::vector<EpochMetrics>& history, int risingEpochs = 3);

// The weights kept at the best validation loss (best.json + best-<step>.pt, written by training).
struct BestWeights {
    bool available = false; // false when the run has none (no validation set, or not one epoch yet)
    int epoch = 0; // 1-based epoch after which they were kept
    int64_t step = 0;
    double validationLoss = 0;
};
// Never throws: an unreadable best.json reads as not available.
BestWeights readBestWeights(const std::string& runDir);

struct RunInfo {
    std::string dir; // the run folder
    std::string name; // its last path component
    TrainConfig config; // from config.json (defaults when it cannot be read)
    bool configOk = false; // config.json was read
    int64_t modified = 0; // seconds since the epoch of the last checkpoint
};
// The runs directly inside `runsDir` (folders for which isRun holds), newest first.
std::vector<RunInfo> listRuns(const std::string& runsDir);

// A fresh folder name inside `runsDir` for a new run: <yyyyMMdd-HHmmss>-<preset>, with -2, -3 …
// appended when taken. Nothing is created.
std::string newRunDir(const std::string& runsDir, const std::string& preset);

} // namespace chatbench
