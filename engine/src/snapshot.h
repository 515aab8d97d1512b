#pragma once
// A chat-ready copy of a model being trained (private: Torch types).

#include "chatbench/chatbot.h"
#include "model.h"

namespace chatbench {

// Copies the weights, so the copy can answer on another thread while training changes `model`.
Chatbot makeSnapshot(const TrainConfig& cfg, const Tokenizer& tok, Seq2Seq& model, int64_t step);

} // namespace chatbench
