#pragma once
// Batch-1 encoding and decoding without autograd or modules (private: Torch types).
//
// A server answering one question at a time, and the chat pane tracing one reply, need one
// sequence stepped token by token. Such a step reads every weight once for a handful of FLOPs,
// so it runs at the speed weights come from memory (3.1 MB a step for the seed preset, three
// times a 1 MB L2). This path reads as few as it can: layer 0's input product depends only on
// the token, so it is tabled per vocabulary entry once (V × 4H, embedding · W_ihᵀ plus both
// biases; a row is looked up instead of W_ih being read), deeper layers keep W_ih and W_hh as one
// (4H, I+H) matrix, so each step of each layer is one matrix-vector product into a preallocated
// buffer, the gates one vectorised pass over 4H floats, and the projection one more product; the
// products read their matrices laid out once in panels (PanelMatrix), front to back. It
// computes what Seq2Seq::encode/decode compute (tested against them); models with attention use
// the general path.
//
//   FastDecoder fast(*model);
//   auto ws = fast.workspace();
//   fast.encode(sourceIds, ws);                 // ws.h, ws.c: the encoder's final state
//   fast.decodeStep(Tokenizer::kStart, ws);     // ws.h, ws.c carried; ws.logits: V logits

#include "model.h"
#include "scopedthreads.h"

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace chatbench {

// A matrix laid out for batch-1 products (kernels::packPanels): about twice the speed of the
// library's matrix-vector product on a CPU where that one is not tuned (docs/performance.md).
class PanelMatrix {
public:
    PanelMatrix() = default;
    explicit PanelMatrix(const torch::Tensor& w); // (rows, cols), any device and dtype; copied as fp32
    int64_t rows() const { return m_rows; }
    int64_t cols() const { return m_cols; }
    // y (rows) = (b ? b : y) + w · x (cols), the panels shared out among the threads (each
    // output's sum is the same whichever thread computes it). b may be y; x must not overlap y.
    void product(const float* x, const float* b, float* y) const;

private:
    torch::Tensor m_panels;
    int64_t m_rows = 0;
    int64_t m_cols = 0;
};

class FastDecoder {
public:
    // The most one input table may take; larger vocabularies and widths read W_ih every step.
    static constexpr int64_t kMaxTableBytes = int64_t { 64 } << 20;
    // The most threads a reply's products and gate loops run on (reply() and the traced reply
    // cap theirs while they run; the caller's setting is put back). A batch-1 step's products are
    // a few hundred thousand multiply-adds, too little to share among many threads: on a 16-core
    // Xeon host, 20-token replies took 2.39 / 0.89 / 0.65 / 0.52 ms on 1 / 2 / 4 / 8 threads and
    // 2.09 ms on 16 (seed preset, V = 2287; the traced reply 4.19 / 2.27 / 1.70 / 1.53 / 4.56 ms).
    static constexpr int kMaxThreads = 8;
    // The threads a reply started now runs on: the caller's, at most kMaxThreads.
    static int replyThreads();

    // Copies the weights it needs from `model` (CPU, fp32), tabling layer 0's input product
    // where a table takes at most `maxTableBytes`. Throws Error for attention models.
    explicit FastDecoder(Seq2SeqImpl& model, int64_t maxTableBytes = kMaxTableBytes);

    // Buffers for one sequence being stepped (one per thread; the decoder itself is read-only).
    struct Workspace {
        std::vector<float> h; // (L × H), layer by layer
        std::vector<float> c; // (L × H)
        torch::Tensor logits; // (V) after decodeStep
        torch::Tensor xh; // scratch: [x; h]
        torch::Tensor gates; // scratch: 4H pre-activations, then activations
        std::vector<float> cNew, tanhC; // scratch: H each
    };
    Workspace workspace() const;

    int64_t hidden() const { return m_hidden; }
    int layers() const { return m_layers; }
    int64_t vocabulary() const { return m_out.rows(); }
    // Whether the decoder's layer 0 reads its input product from a table (the encoder's likewise
    // unless its vocabulary is larger).
    bool tabled() const { return m_decoder.front().table.defined(); }

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
        PanelMatrix w; // (4H, I + H): [W_ih | W_hh], gate rows i, f, g, o; (4H, H): W_hh when tabled
        torch::Tensor b; // (4H): b_ih + b_hh
        torch::Tensor table; // layer 0, when it fits kMaxTableBytes: (V, 4H) embedding · W_ihᵀ + b
        int64_t input = 0; // I
    };
    static std::vector<Layer> layers(
        torch::nn::LSTM& lstm, int count, const torch::Tensor& embedding, int64_t maxTableBytes);
    // One step of every layer fed token `id` (layer 0's input: its embedding row or table row),
    // ws.h and ws.c updated in place; `gates` as in decodeStep.
    void step(
        const std::vector<Layer>& stack, const torch::Tensor& embedding, int64_t id, Workspace& ws, float* gates) const;

    int64_t m_hidden = 0;
    int m_layers = 0;
    torch::Tensor m_encoderEmbedding; // (V, E)
    torch::Tensor m_decoderEmbedding; // (V, E)
    std::vector<Layer> m_encoder;
    std::vector<Layer> m_decoder;
    PanelMatrix m_out; // (V, H)
    torch::Tensor m_outB; // (V)
};

// Greedy choice over `V` logits that never picks <pad> or <start>.
int64_t greedyToken(const float* logits, int64_t V);

// While it lives, the calling thread's work runs on FastDecoder::replyThreads() threads (a reply's
// scope: FastDecoder::reply and the traced reply).
class ReplyThreads {
public:
    ReplyThreads()
    {
        if (FastDecoder::replyThreads() < at::get_num_threads())
            m_cap.emplace(FastDecoder::replyThreads());
    }

private:
    std::optional<ScopedThreads> m_cap;
};

} // namespace chatbench
