#include "sparselookup.h"

#include "chatbench/error.h"
#include "kernels.h"

#include <algorithm>
#include <utility>

namespace chatbench {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// One list of (row, gradient row) entries: `ids` (N) int64 and `rows` (N, E) fp32, contiguous;
// entry k's gradient is row at[k] of `rows` (row k where `at` is empty).
struct Entries {
    torch::Tensor ids;
    torch::Tensor rows;
    std::vector<int64_t> at;
};

// The entries' rows summed per id, `skip` (−1: none) left out: a coalesced sparse (V, E) tensor.
// The touched ids are marked in a V-sized table, numbered in increasing order, and each entry
// added to its id's row in the order the entries come.
torch::Tensor coalesce(const std::vector<Entries>& parts, int64_t V, int64_t E, int64_t skip)
{
    std::vector<int64_t> slot(static_cast<size_t>(V), -1);
    for (const auto& p : parts) {
        const int64_t* ids = p.ids.data_ptr<int64_t>();
        for (int64_t k = 0, n = p.ids.numel(); k < n; ++k) {
            if (ids[k] < 0 || ids[k] >= V)
                throw Error(
                    "sparse gradient row " + std::to_string(ids[k]) + " outside [0, " + std::to_string(V) + ")");
            slot[static_cast<size_t>(ids[k])] = 0;
        }
    }
    if (skip >= 0 && skip < V)
        slot[static_cast<size_t>(skip)] = -1;
    int64_t touched = 0;
    for (auto& s : slot)
        if (s == 0)
            s = touched++;
    auto indices = torch::empty({ 1, touched }, torch::kInt64);
    int64_t* out = indices.data_ptr<int64_t>();
    for (int64_t v = 0; v < V; ++v)
        if (slot[static_cast<size_t>(v)] >= 0)
            out[slot[static_cast<size_t>(v)]] = v;
    // Zeroed here, not by torch::zeros: on the training step's own thread, between its lanes, a
    // parallel fill would wake that thread's OpenMP team, whose worker then spins on a core the
    // next lanes need.
    auto values = torch::empty({ touched, E }, torch::kFloat32);
    float* sums = values.data_ptr<float>();
    std::fill_n(sums, touched * E, 0.0f);
    for (const auto& p : parts) {
        const int64_t* ids = p.ids.data_ptr<int64_t>();
        const float* rows = p.rows.data_ptr<float>();
        for (int64_t k = 0, n = p.ids.numel(); k < n; ++k)
            if (const int64_t s = slot[static_cast<size_t>(ids[k])]; s >= 0)
                kernels::addInto(sums + s * E, rows + (p.at.empty() ? k : p.at[static_cast<size_t>(k)]) * E, E);
    }
    return torch::_sparse_coo_tensor_unsafe(indices, values, { V, E }, torch::kFloat32)._coalesced_(true);
}

class SparseGradLookup : public torch::autograd::Function<SparseGradLookup> {
public:
    static torch::Tensor forward(
        AutogradContext* ctx, const torch::Tensor& weight, const torch::Tensor& ids, int64_t paddingRow)
    {
        auto flat = ids.reshape({ -1 }).contiguous();
        ctx->save_for_backward({ flat });
        ctx->saved_data["rows"] = weight.size(0);
        ctx->saved_data["padding"] = paddingRow;
        auto shape = ids.sizes().vec();
        shape.push_back(weight.size(1));
        return weight.index_select(0, flat).view(shape); // what nn::Embedding's forward computes
    }

    static tensor_list backward(AutogradContext* ctx, tensor_list grads)
    {
        const auto flat = ctx->get_saved_variables()[0];
        const int64_t V = ctx->saved_data["rows"].toInt();
        const auto& g = grads[0];
        const int64_t E = g.size(-1);
        Entries entries { flat, torch::Tensor(), {} };
        if (g.dim() == 3 && g.scalar_type() == torch::kFloat32 && !g.is_contiguous()
            && g.transpose(0, 1).is_contiguous()) {
            // A (B, T, E) gradient stored time-major (the engine's LSTM layer hands it back so):
            // read in place, entry b·T + t at row t·B + b, the entries in the ids' order as ever.
            const int64_t B = g.size(0), T = g.size(1);
            entries.rows = g.transpose(0, 1).view({ T * B, E });
            entries.at.resize(static_cast<size_t>(B * T));
            for (int64_t b = 0; b < B; ++b)
                for (int64_t t = 0; t < T; ++t)
                    entries.at[static_cast<size_t>(b * T + t)] = t * B + b;
        } else {
            entries.rows = g.reshape({ -1, E }).to(torch::kFloat32).contiguous();
        }
        return { coalesce({ entries }, V, E, ctx->saved_data["padding"].toInt()), torch::Tensor(), torch::Tensor() };
    }
};

} // namespace

torch::Tensor sparseGradLookup(const torch::Tensor& weight, const torch::Tensor& ids, int64_t paddingRow)
{
    TORCH_CHECK(weight.device().is_cpu() && weight.scalar_type() == torch::kFloat32 && weight.dim() == 2,
        "sparseGradLookup: a CPU fp32 (V, E) weight");
    return SparseGradLookup::apply(weight, ids.to(torch::kInt64), paddingRow);
}

torch::Tensor sparseRowsGradient(const std::vector<int64_t>& ids, const torch::Tensor& rows,
    const std::vector<int64_t>& at, int64_t V, int64_t paddingRow)
{
    TORCH_CHECK(
        rows.dim() == 2 && rows.scalar_type() == torch::kFloat32 && rows.is_contiguous() && ids.size() == at.size(),
        "sparseRowsGradient: contiguous fp32 rows, one place per id");
    for (const int64_t r : at)
        TORCH_CHECK(r >= 0 && r < rows.size(0), "sparseRowsGradient: a place outside the rows");
    auto idsT = torch::tensor(ids, torch::TensorOptions().dtype(torch::kInt64));
    return coalesce({ { idsT, rows, at } }, V, rows.size(1), paddingRow);
}

torch::Tensor sumSparseRows(const std::vector<torch::Tensor>& parts)
{
    TORCH_CHECK(!parts.empty(), "sumSparseRows: no parts");
    const int64_t V = parts.front().size(0), E = parts.front().size(1);
    std::vector<Entries> entries;
    for (const auto& p : parts) {
        TORCH_CHECK(p.is_sparse() && p.sparse_dim() == 1 && p.size(0) == V && p.size(1) == E,
            "sumSparseRows: sparse (V, E) parts of one shape");
        entries.push_back(
            { p._indices().reshape({ -1 }).contiguous(), p._values().to(torch::kFloat32).contiguous(), {} });
    }
    return coalesce(entries, V, E, -1);
}

} // namespace chatbench
