#pragma once
// The seq2seq LSTM (private: Torch types).
//
// embedding → LSTM encoder → handoff → LSTM decoder → optional Luong attention → linear.
// The handoff is the point of the product: the decoder's initial (h, c) for every layer is the
// encoder's final (h, c) taken at each sequence's true last token. The encoder runs on packed
// sequences, so padding never moves the state (the padded-batch pitfall of nn::LSTM).

#include "chatbench/config.h"

#include <torch/torch.h>

namespace chatbench {

struct EncoderOutput {
    torch::Tensor outputs; // (B, S, H) top-layer h per source step, zeros past each length
    torch::Tensor h; // (L, B, H) final h at each sequence's last real token
    torch::Tensor c; // (L, B, H) final c likewise
    torch::Tensor mask; // (B, S) bool, true on real tokens
};

struct DecoderOutput {
    torch::Tensor logits; // (B, T, V); undefined from decodeHidden
    // (B, T, H) what the output projection reads (after dropout). From the engine's LSTM layer
    // it may be stored time-major (a view of the layer's states): reshape it, not view.
    torch::Tensor top;
    torch::Tensor h; // (L, B, H) state after the last step
    torch::Tensor c; // (L, B, H)
    torch::Tensor attention; // (B, T, S) when attention is on, else undefined
};

class Seq2SeqImpl : public torch::nn::Module {
public:
    explicit Seq2SeqImpl(const ModelConfig& cfg);

    // src (B, S) int64 padded with 0; lengths (B) int64 on the CPU, every length >= 1.
    EncoderOutput encode(const torch::Tensor& src, const torch::Tensor& lengths);
    // Teacher-forced (or one-step, T = 1) decoding from (h0, c0), each (L, B, H).
    DecoderOutput decode(
        const torch::Tensor& input, const torch::Tensor& h0, const torch::Tensor& c0, const EncoderOutput& enc);
    // The same without the output projection: training projects only the real target tokens.
    DecoderOutput decodeHidden(
        const torch::Tensor& input, const torch::Tensor& h0, const torch::Tensor& c0, const EncoderOutput& enc);

    const ModelConfig& config() const { return m_cfg; }
    // Training on the CPU runs both LSTMs through maskedLstmLayer (same maths, own backward,
    // true-last-token state without packing), its bulk products on `gemmType` operands (fp32, or
    // bf16 for bf16 training); off: torch::nn::LSTM (inference, CUDA).
    void setMaskedLstm(bool on, torch::ScalarType gemmType = torch::kFloat32)
    {
        m_maskedLstm = on;
        m_gemmType = gemmType;
    }
    bool maskedLstm() const { return m_maskedLstm; }
    // The operand type of the masked layers' bulk products (and the trainer's projected loss).
    torch::ScalarType gemmType() const { return m_gemmType; }
    // On: the embedding weights' gradients come out sparse (sparseGradLookup: the rows a batch
    // read, coalesced), for a training step that updates only those rows (CPU fp32 weights).
    void setSparseEmbedding(bool on) { m_sparseEmbedding = on; }
    bool sparseEmbedding() const { return m_sparseEmbedding; }

    torch::nn::Embedding encoderEmbedding { nullptr };
    torch::nn::Embedding decoderEmbedding { nullptr }; // the same module as encoderEmbedding when shared
    torch::nn::LSTM encoder { nullptr };
    torch::nn::LSTM decoder { nullptr };
    torch::nn::Linear attentionKey { nullptr }; // Luong "general" score W_a
    torch::nn::Linear attentionCombine { nullptr }; // tanh(W_c [h; context])
    torch::nn::Linear output { nullptr };
    torch::nn::Dropout dropout { nullptr };

private:
    // Runs `lstm` layer by layer through maskedLstmLayer on embedding(ids); returns top-layer
    // outputs and (L, B, H) states.
    std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> runMasked(torch::nn::LSTM& lstm,
        torch::nn::Embedding& embedding, const torch::Tensor& ids, const torch::Tensor& h0, const torch::Tensor& c0,
        const torch::Tensor& lengths);

    // embedding(ids), through sparseGradLookup when sparse embedding gradients are on.
    torch::Tensor embed(torch::nn::Embedding& embedding, const torch::Tensor& ids);

    ModelConfig m_cfg;
    bool m_maskedLstm = false;
    bool m_sparseEmbedding = false;
    torch::ScalarType m_gemmType = torch::kFloat32;
};
TORCH_MODULE(Seq2Seq);

// The parameters Seq2Seq(cfg) holds, counted without building it.
int64_t parameterCount(const ModelConfig& cfg);

} // namespace chatbench
