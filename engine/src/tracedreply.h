#pragma once
// A reply with its whole state trace, stepped on the fast batch-1 path (private: Torch types).
//
// The chat pane shows every step's states and gates, so each reply is traced. Stepping the
// modules one token at a time and replaying the gates by hand costs ~10 tensor operations per
// step; here the steps run on FastDecoder, which hands out the states and gates it computes
// anyway, and the checks compare them with the model's own modules in batched calls: one
// teacher-forced pass from the encoder's state (the logits), and the gates written out from the
// decoder module's weights for all recorded input states at once (the gates, h and c).

#include "chatbench/chatbot.h"
#include "fastdecode.h"
#include "model.h"

#include <random>

namespace chatbench {

// Fills `r` (whose trace already holds the input words) with a greedy or sampled reply to
// `source` of at most `maxSteps` tokens, its trace and its checks. `stopAtEnd` false keeps
// decoding past <end> (a benchmark's fixed number of steps). `model` is in eval mode, on the CPU.
void tracedReply(const FastDecoder& fast, Seq2SeqImpl& model, const Tokenizer& tok, const std::vector<int64_t>& source,
    const DecodeOptions& opt, int maxSteps, bool stopAtEnd, Reply& r);

// Throws Error("reply cancelled") once opt.cancel is set; called at every decoder step.
void throwIfCancelled(const DecodeOptions& opt);

// A token drawn from softmax(logits / temperature) among the top-k (all when topK is 0), never
// <pad> or <start>.
int64_t sampleToken(const torch::Tensor& logits, const DecodeOptions& opt, std::mt19937_64& rng);

} // namespace chatbench
