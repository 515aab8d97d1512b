#pragma once
// Batch-1 encoding and decoding without autograd or modules (private: Torch types).
//
// A server answering one question at a time, and the chat pane tracing one reply, need one
// sequence stepped token by token. This path keeps the LSTM weights as one (4H, I+H) matrix per
// layer (input and recurrent kernels side by side, the two biases summed), so each step of each
// layer is one matrix-vector product into a preallocated buffer, the gates one pass over 4H
// floats, and the projection one more product. It computes what Seq2Seq::encode/decode compute
// (tested against them); models with attention use the general path.
//
//   FastDecoder fast(*model);
//   auto ws = fast.workspace();
//   fast.encode(sourceIds, ws);                 // ws.h, ws.c: the encoder's final state
//   fast.decodeStep(Tokenizer::kStart, ws);     // ws.h, ws.c carried; ws.logits: V logits

#include "model.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace chatbench {

class FastDecoder {
public:
    // Copies the weights it needs from `model` (CPU, fp32). Throws Error for attention models.
    explicit FastDecoder(Seq2SeqImpl& model);

    // Buffers for one sequence being stepped (one per thread; the decoder itself is read-only).
    struct Workspace {
        std::vector<float> h; // (L × H), layer by layer
        std::vector<float> c; // (L × H)
        torch::Tensor logits; // (V) after decodeStep
        torch::Tensor xh; // scratch: [x; h]
        torch::Tensor gates; // scratch: 4H pre-activations
    };
    Workspace workspace() const;

    int64_t hidden() const { return m_hidden; }
    int layers() const { return m_layers; }
    int64_t vocabulary() const { return m_outW.size(0); }

    // The encoder from zeros over `source` (non-empty ids): leaves its final state in ws.h, ws.c.
    // `topH`, when given, receives the top layer's h after every source token.
    void encode(
        const std::vector<int64_t>& source, Workspace& ws, std::vector<std::vector<float>>* topH = nullptr) const;
    // One decoder step fed `input`, from ws.h, ws.c (updated in place); ws.logits gets the V logits.
    // `gates`, when given (4H floats), receives the top layer's sigmoid(i), sigmoid(f), tanh(g), sigmoid(o).
    void decodeStep(int64_t input, Workspace& ws, float* gates = nullptr) const;

    // The greedy reply to `source`: at most `maxSteps` tokens, never <pad> or <start>, ending at
    // <end> (not included) unless `stopAtEnd` is false. `score` (when given) gets the mean
    // log-probability of the chosen tokens, the <end> step included.
    std::vector<int64_t> reply(
        const std::vector<int64_t>& source, int maxSteps, bool stopAtEnd = true, double* score = nullptr) const;

private:
    struct Layer {
        torch::Tensor w; // (4H, I + H): [W_ih | W_hh], gate rows i, f, g, o
        torch::Tensor b; // (4H): b_ih + b_hh
        int64_t input = 0; // I
    };
    static std::vector<Layer> layers(torch::nn::LSTM& lstm, int count);
    // One step of every layer: x (I of layer 0) in, ws.h and ws.c updated in place; `gates` as in decodeStep.
    void step(const std::vector<Layer>& stack, const float* x, Workspace& ws, float* gates) const;

    int64_t m_hidden = 0;
    int m_layers = 0;
    torch::Tensor m_encoderEmbedding; // (V, E)
    torch::Tensor m_decoderEmbedding; // (V, E)
    std::vector<Layer> m_encoder;
    std::vector<Layer> m_decoder;
    torch::Tensor m_outW; // (V, H)
    torch::Tensor m_outB; // (V)
};

// Greedy choice over `V` logits that never picks <pad> or <start>.
int64_t greedyToken(const float* logits, int64_t V);

} // namespace chatbench
