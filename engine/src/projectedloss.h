#pragma once
// The output projection and the cross-entropy over the real target tokens in one autograd
// function (private: Torch types), computed in row chunks that stay in the L2 cache.
//
// Per chunk of rows: logits = h·Wᵀ + b, log-softmax, the loss of the targets, and at once the
// gradient softmax − onehot, which goes straight into dH (rows) and dW, db (accumulated). No
// (N, V) tensor outlives a chunk, nothing is zero-filled, and backward only scales the stored
// gradients. Same maths as linear + cross_entropy(reduction sum), checked against them.

#include <torch/torch.h>

namespace chatbench {

// Σ over rows of −log softmax(h·Wᵀ + b)[target]. hidden (N, H), weight (V, H), bias (V),
// target (N) int64; CPU fp32. gemmType kBFloat16 runs the three products (logits, dH, dW) on bf16
// operands with fp32 sums into fp32 results; the softmax, the loss and every gradient stay
// fp32. Autocast is ignored either way.
torch::Tensor projectedCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& bias,
    const torch::Tensor& target, torch::ScalarType gemmType = torch::kFloat32);
// The same over the rows `rows` (N, int64, distinct) of states (M, H, contiguous): the sum over
// states.index_select(0, rows) without that copy (each chunk's rows gathered while it is made, in
// bf16 gathered and rounded in one pass), and the gradient with respect to states written
// straight into its rows, the rows not named zero.
torch::Tensor projectedCrossEntropy(const torch::Tensor& states, const torch::Tensor& rows, const torch::Tensor& weight,
    const torch::Tensor& bias, const torch::Tensor& target, torch::ScalarType gemmType);

// Scoring (validation, no gradients): the same sum, the logits made and scored chunk by chunk as
// above and never as one (N, V) tensor, and *hits += the rows whose target is their logits'
// argmax (the first largest). bf16 runs the product on bf16 operands with fp32 sums.
torch::Tensor projectedCrossEntropyScore(const torch::Tensor& hidden, const torch::Tensor& weight,
    const torch::Tensor& bias, const torch::Tensor& target, torch::ScalarType gemmType, int64_t* hits);

} // namespace chatbench
