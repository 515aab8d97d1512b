#pragma once
// Greedy replies at batch 1 without autograd, modules or a trace (private: Torch types).
//
// The chat pane's reply() records a full state trace; a server answering one question at a time
// needs only the words. This path keeps the LSTM weights as one (4H, I+H) matrix per layer
// (input and recurrent kernels side by side, the two biases summed), so each step of each layer
// is one matrix-vector product into a preallocated buffer, the gates one pass over 4H floats, and
// the projection one more product and an argmax. It computes what Seq2Seq::encode/decode compute
// (tested against them); models with attention use the general path.

#include "model.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace chatbench {

class FastGreedy {
public:
    // Copies the weights it needs from `model` (CPU, fp32). Throws Error for attention models.
    explicit FastGreedy(Seq2SeqImpl& model);

    // The greedy reply to `source` (non-empty ids): at most `maxSteps` tokens, never <pad> or
    // <start>, ending at <end> (not included) unless `stopAtEnd` is false. `score` (when given)
    // gets the mean log-probability of the chosen tokens, the <end> step included.
    std::vector<int64_t> reply(
        const std::vector<int64_t>& source, int maxSteps, bool stopAtEnd = true, double* score = nullptr) const;

private:
    struct Layer {
        torch::Tensor w; // (4H, I + H): [W_ih | W_hh], gate rows i, f, g, o
        torch::Tensor b; // (4H): b_ih + b_hh
        int64_t input = 0; // I
    };
    static std::vector<Layer> layers(torch::nn::LSTM& lstm, int count);
    // One step of every layer: x (I of layer 0) in, h and c (L × H each) updated in place.
    void step(const std::vector<Layer>& stack, const float* x, float* h, float* c, torch::Tensor& xh,
        torch::Tensor& gates) const;

    int64_t m_hidden = 0;
    int m_layers = 0;
    torch::Tensor m_encoderEmbedding; // (V, E)
    torch::Tensor m_decoderEmbedding; // (V, E)
    std::vector<Layer> m_encoder;
    std::vector<Layer> m_decoder;
    torch::Tensor m_outW; // (V, H)
    torch::Tensor m_outB; // (V)
};

} // namespace chatbench
