#pragma once
// An LSTM layer for training on the CPU (private: Torch types), with its backward pass written
// out, and variable lengths handled as torch's packed sequences do: rows sorted by length, each
// step runs only the rows still going, so padding costs nothing and each row's final state is
// its true last step's.
//
// Why not torch::nn::LSTM: on the CPU a packed batch (the only way nn::LSTM returns the state at
// each sequence's true end) runs a generic per-step path, and the padded oneDNN path cannot stop
// at each length. Here the input projection of all steps is one matrix product, each step adds
// one recurrent product and a few pointwise passes over its running rows, and the backward pass
// runs the same steps in reverse, leaving the weight gradients to one product each at the end
// (over the real steps only). The maths is
// torch::nn::LSTM's (gate order i, f, g, o; two biases), checked against it forward and backward.
//
// bf16 (in hardware on CPUs with AVX512-BF16 or AMX, emulated elsewhere): every product (the input projection of all
// steps, the recurrent one of each step, the weight and input gradients) takes bf16 operands and sums in fp32 into fp32
// results; the state, the gates and every element loop stay fp32, and so do the weights (master copies).

#include <torch/torch.h>

namespace chatbench {

struct MaskedLstmOutput {
    // (B, T, H) h at every step, zero past each sequence's length. Without lengths it is stored
    // time-major, (T, B, H) seen as (B, T, H): a view of the layer's own states, not a copy (so
    // not contiguous where B and T exceed 1); its gradient may come in either layout.
    torch::Tensor outputs;
    torch::Tensor h; // (B, H) h at each sequence's last real step (h0 where the length is 0)
    torch::Tensor c; // (B, H) c likewise
};

// One layer. x (B, T, I) batch-first; h0, c0 (B, H); weights as torch::nn::LSTM names them;
// lengths (B) int64 on the CPU, or undefined when every sequence fills all T steps. gemmType:
// kFloat32, or kBFloat16 for the products' operands (above). Runs outside autocast whatever
// the caller's: the outputs are fp32 either way.
MaskedLstmOutput maskedLstmLayer(const torch::Tensor& x, const torch::Tensor& h0, const torch::Tensor& c0,
    const torch::Tensor& wIh, const torch::Tensor& wHh, const torch::Tensor& bIh, const torch::Tensor& bHh,
    const torch::Tensor& lengths, torch::ScalarType gemmType = torch::kFloat32);

// A layer's input: x (B, T, I), or the rows of an embedding's weight x (V, I) at ids (B, T)
// int64 on the CPU, gathered by the layer into its packed rows without the (B, T, I) tensor in
// between. The weight's gradient is then sparse COO, coalesced, without row paddingRow (−1: none),
// as sparseGradLookup's: where the caller keeps dense embedding gradients, it passes x looked up.
struct LayerInput {
    torch::Tensor x;
    torch::Tensor ids; // undefined: x is the input itself
    int64_t paddingRow = -1;
};
MaskedLstmOutput maskedLstmLayer(const LayerInput& input, const torch::Tensor& h0, const torch::Tensor& c0,
    const torch::Tensor& wIh, const torch::Tensor& wHh, const torch::Tensor& bIh, const torch::Tensor& bHh,
    const torch::Tensor& lengths, torch::ScalarType gemmType = torch::kFloat32);

} // namespace chatbench
