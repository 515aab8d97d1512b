#pragma once
// Model and training configuration, the presets, and their JSON form (config.json of a run).
//
//   chatbench::TrainConfig cfg = chatbench::preset("seed");   // the Keras recipe
//   cfg.epochs = 40;
//   chatbench::validate(cfg);                                  // throws Error naming the field
//   std::string json = chatbench::toJson(cfg);

#include "chatbench/corpus.h"
#include "chatbench/names.h"
#include "chatbench/tokenizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace chatbench {

struct ModelConfig {
    int64_t vocabSize = 0; // set from the tokenizer when training starts
    int embedDim = 200; // embedding width
    int hidden = 200; // LSTM units per layer
    int layers = 1; // stacked LSTM layers (encoder and decoder alike)
    double dropout = 0.0; // between stacked layers and on embeddings while training
    bool attention = false; // Luong (general) attention over the encoder outputs
    bool sharedEmbedding = false; // one embedding table for encoder and decoder
    int maxSourceLength = 22; // prompt words kept (the rest are cut)
    int maxTargetLength = 74; // response tokens kept, <start> and <end> included
};

struct TrainConfig {
    std::string preset = "seed"; // the preset these values started from
    ModelConfig model;
    TokenizerOptions tokenizer;
    OptimizerKind optimizer = OptimizerKind::RMSprop;
    double learningRate = 1e-3;
    double clipNorm = 5.0; // gradient-norm clipping; 0 = off
    double teacherForcing = 1.0; // probability of feeding the true previous token
    int batchSize = 50;
    int epochs = 150;
    double validationFraction = 0.1;
    int patience = 0; // early stopping after this many epochs without a better validation loss; 0 = off
    uint64_t seed = 42;
    bool deterministic = true; // deterministic algorithms only
    bool bucketing = true; // group pairs of similar length into batches
    int checkpointEverySteps = 0; // extra checkpoints between epochs; 0 = at epoch ends only
    int keepCheckpoints = 2; // the newest checkpoints kept, to fall back to when the newest is corrupt
    std::string device = "cpu"; // "cpu" or "cuda:N"
    Precision precision = Precision::FP32;
    // CUDA: let fp32 matmuls and cuDNN's LSTM use TF32 tensor cores (10-bit mantissa, faster).
    // Off: IEEE fp32 everywhere, which is not torch's default for cuDNN. No effect on the CPU.
    bool tf32 = false;
    int threads = 0; // CPU threads; 0 = the library default
    std::string corpus; // corpus path the run trains on (for resume and the record)
    CorpusFormat corpusFormat = CorpusFormat::Auto;
    bool latin1 = false;
    Pairing pairing = Pairing::Consecutive; // how the corpus' turns were paired
    bool strictCorpus = false; // the corpus was loaded strictly (no skipped records)
};

// The options the run's corpus is (re)loaded with (a .csv read as dialog text, as when a run
// could train on one).
LoadOptions corpusLoadOptions(const TrainConfig& c);

// "seed" (the Keras recipe: E=200, H=200, 1 layer, RMSprop, batch 50, lengths 22/74),
// "quick" (small and fast), "large" (2 layers, attention). Throws Error for other names.
TrainConfig preset(const std::string& name);
std::vector<std::string> presetNames();
// One line saying what a preset is for ("the Keras recipe"); empty for an unknown name.
std::string presetDescription(const std::string& name);

// Throws Error naming the first field that is out of range.
void validate(const TrainConfig& cfg);

std::string toJson(const TrainConfig& cfg);
// The settings that fix a run's course (all but epochs, patience, checkpointing and where it
// runs), as one flat JSON object ({"model.hidden": 200, "train.seed": 42, ...}): state.json
// records them when a run starts, and a resume compares config.json with them.
std::string recipeJson(const TrainConfig& cfg);
// The recorded settings `cfg` differs in, each as "train.seed was 42, now 7"; empty when none.
std::vector<std::string> recipeChanges(const std::string& recordedRecipe, const TrainConfig& cfg);
// Throws Error(file, line) for malformed JSON, unknown values or out-of-range fields.
TrainConfig trainConfigFromJson(const std::string& json, const std::string& file);

} // namespace chatbench
