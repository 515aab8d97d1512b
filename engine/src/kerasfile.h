#pragma once
// Reading a Keras seq2seq chatbot and its tokenizer (private; no Torch).
//
// Keras 3 `.keras` files (a zip of config.json and model.weights.h5) and legacy HDF5 `.h5` files
// (Keras 2 or 3: the config in the `model_config` attribute, weights under `model_weights/`) are
// told apart by their first bytes, not their names. The config is walked from the output back:
// Dense (softmax) ← decoder LSTM(s) ← decoder Embedding ← input, each decoder LSTM started from
// the states of the encoder LSTM at the same depth ← encoder Embedding ← input. Anything else on
// that path is refused with a message naming the layer. Every weight's shape is checked against
// the config before it is read, so a file declaring huge sizes cannot make us allocate them.

#include "childprocess.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace chatbench {

struct KerasTensor {
    std::vector<int64_t> shape;
    std::vector<float> data; // row-major, as Keras stores it
};

struct KerasLstm {
    std::string name;
    KerasTensor kernel; // (input, 4u), gates i, f, c, o
    KerasTensor recurrent; // (u, 4u)
    KerasTensor bias; // (4u); zeros when the layer has use_bias = false
};

struct KerasSeq2Seq {
    std::string file;
    int64_t vocabulary = 0; // rows of the embeddings = units of the output Dense
    int64_t embed = 0;
    int64_t hidden = 0;
    int layers = 0;
    bool sharedEmbedding = false; // one Embedding layer feeds both LSTMs
    bool encoderMask = false; // mask_zero on the encoder's embedding
    std::optional<int> sourceLength; // from the encoder input's declared shape, when fixed
    std::optional<int> targetLength; // from the decoder input's declared shape, when fixed
    KerasTensor encoderEmbedding; // (V, E)
    KerasTensor decoderEmbedding; // (V, E)
    std::vector<KerasLstm> encoder; // bottom first
    std::vector<KerasLstm> decoder;
    KerasTensor denseKernel; // (H, V)
    KerasTensor denseBias; // (V)
    std::vector<std::string> notes; // what was read and anything worth knowing
};

// Throws Error naming the file (and the layer, dataset or option) when it is not a supported
// Keras seq2seq model or is malformed. The file is read in a child process: HDF5 reads out of
// bounds on some malformed files, and a crash there becomes an Error here; a child that runs past
// `limits` (HDF5 loops, or waits on a lock its own overrun made, on others) is killed, with an Error.
KerasSeq2Seq readKerasSeq2Seq(const std::string& path, const ChildLimits& limits = {});
// The same in this process (what the child runs; the fuzz harness calls it directly).
KerasSeq2Seq readKerasSeq2SeqInProcess(const std::string& path);
// The model config alone (a .keras file's config.json, an .h5 file's model_config attribute): the
// structure, sizes and notes readKerasSeq2Seq gives, with no weights read (the tensors stay empty).
// Errors name `file`. The fuzz harness reaches the config walk through it without HDF5.
KerasSeq2Seq readKerasConfig(const std::string& configJson, const std::string& file);
// `path` names a regular file (the checks readKerasSeq2Seq starts with), or an Error.
void requireModelFile(const std::string& path);

// What `tokenizer.to_json()` holds that decides how text becomes ids.
struct KerasTokenizer {
    std::string file;
    // index → word, for the ids the word index names (Keras reserves 0 for padding): held sparse,
    // so a file naming id 16 000 000 costs what the file holds, not 16 million empty words.
    std::map<int64_t, std::string> words;
    int64_t maxId = 0; // the largest id the word index names
    std::optional<std::string> oovToken;
    int64_t numWords = 0; // 0 = no limit
};

// Throws Error naming the file and option for malformed JSON or options chatbench's Keras-mode
// tokenizer does not reproduce (lower = false, other filters or split, char_level).
KerasTokenizer readKerasTokenizer(const std::string& path);

} // namespace chatbench
