#pragma once
// Run-folder files without Torch (private): the paths, state.json and metrics.csv. The Torch
// side (ckpt-<step>.pt) is in checkpoint.h.

#include "chatbench/metrics.h"

#include <cstdint>
#include <string>
#include <vector>

namespace chatbench {

// Where training stands; written after the checkpoint it names, so it always points at a
// complete file. The CPU's random numbers need no stored state: every step reseeds the CPU
// generator from (seed, step). A CUDA device's generator is kept in the checkpoint instead.
struct RunState {
    int epoch = 0; // epoch in progress (== epochs when done)
    int64_t batchInEpoch = 0; // batches of `epoch` already done
    int64_t step = 0; // optimizer steps done
    double epochLossSum = 0; // token-weighted loss sum of the partial epoch
    int64_t epochTokens = 0;
    double epochSeconds = 0; // wall time of the partial epoch
    double elapsedSeconds = 0; // training wall time so far
    double bestValidationLoss = 0;
    bool haveBest = false;
    int badEpochs = 0; // epochs since the best validation loss
    bool finished = false;
    uint64_t corpusFingerprint = 0;
    // Of vocab.json's words in id order (vocabularyFingerprint): state and checkpoints copied in
    // from another run are told apart by it. 0: not recorded (runs older than it).
    uint64_t vocabFingerprint = 0;
    double lossScale = 65536.0; // fp16 dynamic loss scale
    int64_t lossScaleGoodSteps = 0; // fp16 steps since the scale last changed (it doubles at 2000)
    std::string checkpoint; // file name of the matching ckpt-<step>.pt
    uint32_t checkpointCrc = 0; // CRC-32 of that file (runs older than checksums have none)
    bool haveCrc = false;
    // The settings the run started with (recipeJson in config.h); empty in runs older than it.
    std::string recipe;
    std::vector<EpochMetrics> history;
    std::string file; // the file this state was read from (not saved; empty for one built here)
};

std::string configPath(const std::string& runDir);
std::string vocabPath(const std::string& runDir);
std::string statePath(const std::string& runDir);
// "ckpt-00000240.pt" for step 240.
std::string checkpointName(int64_t step);

void saveState(const std::string& runDir, const RunState& state);
// state.json; when it is missing or malformed, the state kept with the newest checkpoint that has
// one (said in `note`). Throws Error naming state.json when there is none of either.
RunState loadState(const std::string& runDir, std::string* note = nullptr);
// The state as of one checkpoint, kept beside it (ckpt-<step>.json) so an older checkpoint can
// be fallen back to with the state that goes with it.
std::string checkpointStatePath(const std::string& runDir, const std::string& checkpoint);
void saveCheckpointState(const std::string& runDir, const RunState& state);
RunState loadStateFile(const std::string& path);
// best.json: the state as of the best weights (best-<step>.pt); see keepBestCheckpoint.
std::string bestStatePath(const std::string& runDir);
void saveBestState(const std::string& runDir, const RunState& state);
// The ckpt-<step>.pt files of a run, newest (highest step) first.
// Throws Error naming the folder when it exists but cannot be listed.
std::vector<std::string> checkpointFiles(const std::string& runDir);
// Undoes a start (a training or an import) that failed before its run was whole (no state.json):
// the folder goes if the start made it (`made`: the topmost folder it made, the run folder or one
// above it; empty when the run folder was there), with the folders it made on the way while they
// are empty, else the files a start writes, its checkpoints included. Otherwise a checkpoint
// without its state (a disk that filled between the two) made the folder "a run" that neither a
// new start nor a resume or chat could use.
void removeFailedStart(const std::string& runDir, const std::string& made);
void writeMetricsCsv(const std::string& runDir, const std::vector<EpochMetrics>& history);
// steps.csv: rows appended before each checkpoint; keepRunSteps rewrites it with the rows up to
// `upToStep` only (a resume from an older checkpoint).
void appendRunSteps(const std::string& runDir, const std::vector<StepMetrics>& rows);
void keepRunSteps(const std::string& runDir, int64_t upToStep);

class Tokenizer;
struct TrainConfig;

// Throws Error naming vocab.json when `tok` (read from it) disagrees with config.json: its mode,
// and its size unless a resume is about to rebuild the model from it.
void checkRunTokenizer(const std::string& runDir, const Tokenizer& tok, const TrainConfig& cfg, bool size);
// text::Fingerprint of the words in id order.
uint64_t vocabularyFingerprint(const Tokenizer& tok);
// An Error naming the state's file when `state` was saved with another vocabulary than `tok` (a state
// and its checkpoints copied in from another run of the same sizes answered through this run's
// words, without a word); nothing when the state recorded none.
void checkRunVocabulary(const Tokenizer& tok, const RunState& state);

// For a new run (training or an import) in the folder `runDir`, before its lock is taken
// (requireNewRunPlace) and again under it: refuses a folder that holds a run (the message ends
// with `advice`) or anything but a run killed before its first checkpoint (recognised by its own
// config.json; its files are replaced). Another program's files are never overwritten.
void requireNewRunFolder(const std::string& runDir, const std::string& advice);
// Makes the run folder (and those above it); an Error naming it when it cannot be made, or when it
// is a link to a folder that does not exist (requireFolderCanBeMade). Returns the topmost folder
// it made (empty when the run folder was there).
std::string createRunFolder(const std::string& runDir);
// An Error naming `runDir` when it cannot be a folder: it, or a folder on the way to it, is a
// file, or it is a link to a folder that does not exist. Nothing is made.
void requireFolderCanBeMade(const std::string& runDir);

// Throws Error naming the first of the files a run writes (state.json, metrics.csv, steps.csv,
// checkpoints and their states, the best weights) that is there but not a regular file (a
// folder, a FIFO): checked when a run is opened for writing, not found after an epoch's work.
void requireRunFilesPlain(const std::string& runDir);

// Throws RunLock's "in use by process N" when another process holds the folder's lock; checked
// before a folder's files are judged (a writer's files half made are not another run's).
void requireRunNotInUse(const std::string& runDir);

// One writer per run folder: an advisory lock on <run>/.lock, held while an object lives and
// released by the system when the process ends, killed or not. Taking it removes temporary files
// that writers killed mid-save left behind. Throws Error "in use by process N" when held.
class RunLock {
public:
    explicit RunLock(const std::string& runDir);
    ~RunLock();
    RunLock(const RunLock&) = delete;
    RunLock& operator=(const RunLock&) = delete;

    // Where the locked folder is now: runDir while that path still names it; its new path when it
    // was moved (renamed) while the lock was held; empty when it was removed. A writer saves by
    // path, so without asking it would write into whatever folder took the old name.
    std::string currentFolder(const std::string& runDir) const;
    // Whether runDir/.lock is still the lock file this object holds (not deleted, not replaced).
    bool lockFileIntact(const std::string& runDir) const;

private:
    int m_fd = -1;
    int m_dirFd = -1; // the folder itself (O_PATH), followed wherever it is renamed to
};

// The folder of a new run: created where it is not there (createRunFolder) and locked. A folder
// this made and could not lock (made without write permission, by a umask such as 222) is
// removed again, with those made on the way; `made` is the topmost folder it made (empty: none).
RunLock lockNewRunFolder(const std::string& runDir, std::string& made);

} // namespace chatbench
