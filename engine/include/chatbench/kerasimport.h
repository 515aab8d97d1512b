#pragma once
// Importing a Keras seq2seq chatbot trained elsewhere into a run folder.
//
//   chatbench::KerasImportOptions opt;
//   opt.model = "chatbot.keras";                 // Keras 3 .keras, or a legacy .h5
//   opt.tokenizer = "tokenizer.json";            // tokenizer.to_json()
//   opt.prompts = {"hi", "how are you", …};      // for the handoff diagnosis (optional)
//   chatbench::KerasImport r = chatbench::importKeras(opt, "runs/imported");
//   std::cout << chatbench::describe(r);         // what was mapped, and the diagnosis
//   auto bot = chatbench::Chatbot::load("runs/imported");   // every --run command works on it
//
// The weights map exactly: Keras' kernel (in, 4u) and recurrent kernel (u, 4u) become PyTorch's
// weight_ih (4u, in) and weight_hh (4u, u) transposed — the gate order i, f, c, o is PyTorch's
// i, f, g, o — and the single Keras bias becomes bias_ih with bias_hh = 0. Vocabulary rows are
// reordered so Keras' padding, oov, start and end words land on chatbench's <pad>, <unk>,
// <start>, <end>. A tokenizer without oov_token drops unknown words, as Keras does.

#include "chatbench/chatbot.h"
#include "chatbench/config.h"

#include <string>
#include <vector>

namespace chatbench {

struct KerasImportOptions {
    std::string model; // .keras (zip) or legacy .h5 (HDF5) file
    std::string tokenizer; // the Keras Tokenizer's to_json() output
    // The recipe's start and end words as the Keras tokenizer keeps them ('<START>' becomes 'start').
    std::string startWord = "start";
    std::string endWord = "end";
    int maxSourceLength = 0; // 0: the model's declared input length, else the seed preset's
    int maxTargetLength = 0; // likewise for replies (start and end included)
    std::vector<std::string> prompts; // diagnosis prompts; empty: no diagnosis
};

struct KerasImport {
    std::string runDir;
    TrainConfig config; // as written to config.json
    int64_t kerasVocabulary = 0; // rows of the Keras embeddings
    std::vector<std::string> notes; // what was read and mapped, and anything approximated
    HandoffDiagnosis diagnosis; // empty modes when no prompts were given
};

// Writes `runDir` (config.json, vocab.json, the checkpoint, state.json and keras-import.json).
// Throws Error naming the file, layer or option for anything outside the supported architecture,
// malformed files, or a folder that already holds a run; a half-written folder is removed.
KerasImport importKeras(const KerasImportOptions& options, const std::string& runDir);

std::string describe(const KerasImport& r);

// The model and tokenizer paths name regular files, or the Error importKeras would give: for a
// caller with slower work to do first (loading the diagnosis corpus).
void checkKerasInputFiles(const KerasImportOptions& options);

// Up to `n` different prompts spread evenly over `pairs` (for the diagnosis).
std::vector<std::string> samplePrompts(const std::vector<Pair>& pairs, int n);

} // namespace chatbench
