#pragma once
// Embedding lookups whose weight gradient is sparse (private: Torch types).
//
// A batch reads a few hundred of a vocabulary's rows; the dense gradient of nn::Embedding is zero
// everywhere else, and the optimizer, the clipping and the slices' sums all walk those zeros. The
// lookup here gives a coalesced sparse COO gradient instead: the touched rows (sorted, the padding
// row left out as padding_idx does) and their gradients summed in the order of the positions
// that read them, so the same batch gives the same numbers every time.

#include <torch/torch.h>

#include <vector>

namespace chatbench {

// weight (V, E) rows at ids (any shape, int64, values in [0, V)): (ids…, E), as nn::Embedding's
// forward. Its gradient w.r.t. weight is sparse COO (V, E), coalesced, without row `paddingRow`.
torch::Tensor sparseGradLookup(const torch::Tensor& weight, const torch::Tensor& ids, int64_t paddingRow);

// The gradient of a lookup whose rows another operation took (an LSTM layer gathering its own
// inputs): rows[at[k]] (rows (·, E) fp32, contiguous) added into row ids[k], in the order k runs,
// row `paddingRow` left out; sparse COO (V, E), coalesced, as sparseGradLookup's.
torch::Tensor sparseRowsGradient(const std::vector<int64_t>& ids, const torch::Tensor& rows,
    const std::vector<int64_t>& at, int64_t V, int64_t paddingRow);

// The rows of several sparse COO gradients of one (V, E) parameter (coalesced or not) added up:
// one coalesced sparse gradient whose touched rows are sorted and each summed in the order the
// parts, and the entries within each part, come. CPU fp32.
torch::Tensor sumSparseRows(const std::vector<torch::Tensor>& parts);

} // namespace chatbench
