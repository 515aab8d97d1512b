#pragma once
// Examples and batches for training (private: Torch types).
//
// Pairs become id sequences once; each epoch plans batches of similar lengths (bucketing) and
// pads each batch only to its own longest sequence, with masks for the loss.

#include "chatbench/config.h"
#include "chatbench/corpus.h"
#include "chatbench/tokenizer.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace chatbench {

struct Example {
    std::vector<int64_t> source; // prompt ids, at most maxSourceLength
    std::vector<int64_t> target; // <start> response ids <end>, at most maxTargetLength
};

// Pairs whose prompt or response has no words are skipped and counted in `skipped`.
std::vector<Example> makeExamples(
    const std::vector<Pair>& pairs, const Tokenizer& tok, const ModelConfig& cfg, int64_t* skipped = nullptr);

// Index lists, one per batch. With bucketing, pairs are shuffled, cut into pools of 50 batches,
// each pool sorted by response length (then prompt length) and cut into batches, and the batch
// order shuffled; without it,
// a plain shuffle. The same seed gives the same plan.
std::vector<std::vector<size_t>> planBatches(
    const std::vector<Example>& examples, int batchSize, bool bucketing, uint64_t seed);

struct Batch {
    torch::Tensor source; // (B, S) int64, 0-padded to this batch's longest prompt
    torch::Tensor lengths; // (B) int64 on the CPU
    torch::Tensor input; // (B, T) decoder input: target without its last token
    torch::Tensor target; // (B, T) decoder target: target without <start>
    torch::Tensor mask; // (B, T) bool, true where target is a real token
    int64_t tokens = 0; // real target tokens (mask.sum())
};

Batch collate(const std::vector<Example>& examples, const std::vector<size_t>& indices, const torch::Device& device);

// Rows [begin, end) of a batch, its padding trimmed to the slice's own longest prompt and response
// (a pass over fewer pairs when a whole batch does not fit in device memory).
Batch rowSlice(const Batch& batch, int64_t begin, int64_t end);

// Rows first, first + step, first + 2·step, … of a batch, its padding trimmed the same way (one
// of `step` slices of similar lengths: a batch's rows are ordered by length).
Batch rowStride(const Batch& batch, int64_t first, int64_t step);

} // namespace chatbench
