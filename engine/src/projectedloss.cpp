#include "projectedloss.h"

#include "cpugemm.h"
#include "kernels.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace chatbench {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// 128 rows of a 2–4k vocabulary are 1–2 MB of logits: one core's L2.
constexpr int64_t kChunkRows = 128;
constexpr int64_t kRowQuantum = 16; // divides kChunkRows
// bf16 keeps the rows' p − onehot for the weight gradient's product in up to this many bytes
// (every row of a step at the seed sizes), then makes the product and starts again.
constexpr int64_t kBf16RowsBytes = int64_t(16) << 20;

// hidden (N, H) fp32 as bf16 rows, with zero rows up to a multiple of `quantum`.
torch::Tensor bf16Rows(const torch::Tensor& hidden, int64_t quantum)
{
    const int64_t N = hidden.size(0), padded = (N + quantum - 1) / quantum * quantum;
    auto hb = torch::empty({ padded, hidden.size(1) }, hidden.options().dtype(torch::kBFloat16));
    const auto h = hidden.contiguous();
    kernels::roundBf16(h.data_ptr<float>(), h.numel(), reinterpret_cast<uint16_t*>(hb.data_ptr()));
    hb.narrow(0, N, padded - N).zero_();
    return hb;
}

// The rows WideProductBf16 runs at a time: through the micro-kernel, multiples of kRowQuantum
// (zero rows after the last), since it is generated (≈ 2 ms) for each row count it meets: 8 row
// counts, where every remainder of a chunk would be one more.
int64_t rowQuantum(const WideProductBf16& project)
{
    return project.packed() ? kRowQuantum : 1;
}

int64_t productRows(const WideProductBf16& project, int64_t n)
{
    return (n + rowQuantum(project) - 1) / rowQuantum(project) * rowQuantum(project);
}

void checkTargets(const torch::Tensor& weight, const torch::Tensor& target)
{
    if (target.numel() > 0) { // the row kernels index by them: one pass for both bounds
        const auto [lo, hi] = torch::aminmax(target);
        TORCH_CHECK(lo.item<int64_t>() >= 0 && hi.item<int64_t>() < weight.size(0),
            "projectedCrossEntropy: each target a row of the weight");
    }
}

// The rows of `states` a loss is over: `rows` (N) int64, distinct (checked), or all of them in
// order (undefined). chunk() gives rows [r0, r0 + n) as a (n, H) fp32 tensor (a view, or gathered
// into a buffer that stays in L1), bf16() all N rounded in one pass.
class LossRows {
public:
    LossRows(const torch::Tensor& states, const torch::Tensor& rows)
        : m_states(states)
        , m_index(rows.defined() ? rows.data_ptr<int64_t>() : nullptr)
        , m_n(rows.defined() ? rows.numel() : states.size(0))
        , m_h(states.size(1))
    {
        if (!m_index)
            return;
        m_named.assign(static_cast<size_t>(states.size(0)), false);
        for (int64_t r = 0; r < m_n; ++r) {
            TORCH_CHECK(m_index[r] >= 0 && m_index[r] < states.size(0) && !m_named[static_cast<size_t>(m_index[r])],
                "projectedCrossEntropy: distinct rows of the hidden states");
            m_named[static_cast<size_t>(m_index[r])] = true;
        }
        m_buffer = torch::empty({ std::min(m_n, kChunkRows), m_h }, states.options());
        m_dh = torch::empty({ std::min(m_n, kChunkRows), m_h }, states.options());
    }
    int64_t size() const { return m_n; }
    torch::Tensor chunk(int64_t r0, int64_t n) const
    {
        if (!m_index)
            return m_states.narrow(0, r0, n);
        const float* src = m_states.data_ptr<float>();
        float* dst = m_buffer.data_ptr<float>();
        for (int64_t r = 0; r < n; ++r)
            std::copy_n(src + m_index[r0 + r] * m_h, m_h, dst + r * m_h);
        return m_buffer.narrow(0, 0, n);
    }
    // (N rounded up to a multiple of `quantum`, H) bf16, the rows after N zero.
    torch::Tensor bf16(int64_t quantum) const
    {
        if (!m_index)
            return bf16Rows(m_states, quantum);
        const int64_t padded = (m_n + quantum - 1) / quantum * quantum;
        auto hb = torch::empty({ padded, m_h }, m_states.options().dtype(torch::kBFloat16));
        kernels::gatherBf16Rows(
            m_states.data_ptr<float>(), m_h, m_index, m_n, reinterpret_cast<uint16_t*>(hb.data_ptr()));
        hb.narrow(0, m_n, padded - m_n).zero_();
        return hb;
    }
    // The gradient with respect to `states`, to be filled by put(): gathered, the rows no loss
    // row names are zero.
    torch::Tensor gradient() const
    {
        auto grad = torch::empty({ m_states.size(0), m_h }, m_states.options());
        float* g = grad.data_ptr<float>();
        for (size_t row = 0; row < m_named.size(); ++row)
            if (!m_named[row])
                std::fill_n(g + static_cast<int64_t>(row) * m_h, m_h, 0.0f);
        return grad;
    }
    // Where chunk [r0, r0 + n)'s dh is written: grad's rows, or a buffer that put() scatters.
    torch::Tensor dhTarget(torch::Tensor& grad, int64_t r0, int64_t n) const
    {
        return m_index ? m_dh.narrow(0, 0, n) : grad.narrow(0, r0, n);
    }
    void put(torch::Tensor& grad, int64_t r0, int64_t n) const
    {
        if (!m_index)
            return;
        const float* src = m_dh.data_ptr<float>();
        float* dst = grad.data_ptr<float>();
        for (int64_t r = 0; r < n; ++r)
            std::copy_n(src + r * m_h, m_h, dst + m_index[r0 + r] * m_h);
    }

private:
    torch::Tensor m_states;
    const int64_t* m_index;
    int64_t m_n, m_h;
    std::vector<bool> m_named; // gathered: which rows of states the loss names
    torch::Tensor m_buffer, m_dh;
};

class ProjectedCrossEntropyFunction : public torch::autograd::Function<ProjectedCrossEntropyFunction> {
public:
    // rows: the distinct rows the loss is over (gather), or every row of `states` (rows unused:
    // autograd takes no undefined tensor among a function's inputs).
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& states, const torch::Tensor& rows,
        const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& target, bool bf16, bool gather)
    {
        c10::impl::ExcludeDispatchKeyGuard noAutocast(c10::autocast_dispatch_keyset);
        LossRows hidden(states, gather ? rows : torch::Tensor());
        const int64_t N = hidden.size(), H = states.size(1), V = weight.size(0);
        auto dStates = hidden.gradient();
        // Written by the first chunk's product, added to by the others (zeros only when N = 0).
        auto dWeight = N > 0 ? torch::empty({ V, H }, weight.options()) : torch::zeros({ V, H }, weight.options());
        auto dBias = torch::zeros({ V }, bias.options());
        const auto b = bias.contiguous();
        // bf16: the forward product through WideProductBf16, whose rows may be wider than V (the
        // extra columns zero, never read), and as many rows as productRows says.
        std::optional<WideProductBf16> project;
        if (bf16)
            project.emplace(weight);
        const int64_t chunkRows = project ? productRows(*project, std::min(N, kChunkRows)) : std::min(N, kChunkRows);
        const int64_t ldz = project ? project->width() : V;
        auto logits = torch::empty({ chunkRows, ldz }, states.options());
        const auto targets = target.to(torch::kInt64).contiguous();
        const int64_t* tgt = targets.data_ptr<int64_t>();
        double loss = 0;
        // bf16: the operands once, and the rows' p − onehot kept for the dWeight product: one
        // product over every row kept (rounded once), where one per chunk was added into dWeight
        // each. Whole chunks up to kBf16RowsBytes are kept.
        torch::Tensor hb, wb, zb;
        int64_t keptRows = 0, kept = 0, keptFrom = 0; // zb's rows; those filled; their first row
        if (bf16) {
            hb = hidden.bf16(rowQuantum(*project));
            wb = bf16Weight(weight);
            const int64_t fit = kBf16RowsBytes / static_cast<int64_t>(sizeof(uint16_t)) / std::max<int64_t>(V, 1);
            keptRows = std::min(N, std::max<int64_t>(1, fit / kChunkRows) * kChunkRows);
            zb = torch::empty({ keptRows, V }, states.options().dtype(torch::kBFloat16));
        }
        auto flushKept = [&] { // dWeight (+)= the kept rows' product
            if (kept == 0)
                return;
            gemmBf16(zb.narrow(0, 0, kept), true, hb.narrow(0, keptFrom, kept), false, keptFrom > 0 ? 1.0f : 0.0f,
                dWeight); // (V, H): written by the first part, added to by the others
            keptFrom += kept;
            kept = 0;
        };
        for (int64_t r0 = 0; r0 < N; r0 += kChunkRows) {
            const int64_t n = std::min(kChunkRows, N - r0);
            auto z = logits.narrow(0, 0, n); // (n, ldz): logits, then p − onehot
            // h · Wᵀ; the bias is added by the row kernel, in its first pass.
            torch::Tensor h; // (n, H) fp32, the chunk's rows
            if (bf16) {
                project->product(
                    hb.narrow(0, r0, productRows(*project, n)), logits.narrow(0, 0, productRows(*project, n)));
            } else {
                h = hidden.chunk(r0, n);
                at::mm_out(z, h, weight.t());
            }
            // Row by row: p − onehot, the loss and the bias gradient (three passes over each row
            // while it is in L1, where log-softmax, gather, exp, scatter and a column sum took five
            // over the chunk), in place, or in bf16 into the kept rows.
            if (bf16 && kept + n > keptRows)
                flushKept();
            loss += kernels::softmaxCrossEntropyRows(n, V, ldz, z.data_ptr<float>(), b.data_ptr<float>(), tgt + r0,
                dBias.data_ptr<float>(), bf16 ? reinterpret_cast<uint16_t*>(zb.data_ptr()) + kept * V : nullptr);
            auto dh = hidden.dhTarget(dStates, r0, n);
            const bool first = r0 == 0;
            if (bf16) {
                auto zbChunk = zb.narrow(0, kept, n);
                kept += n;
                gemmBf16(zbChunk, false, wb, false, 0.0f, dh); // (n, H)
            } else {
                at::mm_out(dh, z, weight); // (n, H)
                if (first)
                    at::mm_out(dWeight, z.t(), h); // (V, H)
                else
                    dWeight.addmm_(z.t(), h);
            }
            hidden.put(dStates, r0, n);
        }
        if (bf16)
            flushKept();
        ctx->save_for_backward({ dStates, dWeight, dBias });
        return torch::tensor(loss, states.options());
    }

    static tensor_list backward(AutogradContext* ctx, tensor_list grads)
    {
        auto saved = ctx->get_saved_variables();
        const auto& g = grads[0]; // scalar
        // Scaled in place: the gradients were made for this call alone, and no new (V, H) tensor is
        // allocated and filled each step.
        for (auto& t : saved)
            t.mul_(g);
        return { saved[0], torch::Tensor(), saved[1], saved[2], torch::Tensor(), torch::Tensor(), torch::Tensor() };
    }
};

} // namespace

torch::Tensor projectedCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& bias,
    const torch::Tensor& target, torch::ScalarType gemmType)
{
    return projectedCrossEntropy(hidden.contiguous(), torch::Tensor(), weight, bias, target, gemmType);
}

torch::Tensor projectedCrossEntropy(const torch::Tensor& states, const torch::Tensor& rows, const torch::Tensor& weight,
    const torch::Tensor& bias, const torch::Tensor& target, torch::ScalarType gemmType)
{
    TORCH_CHECK(
        gemmType == torch::kFloat32 || gemmType == torch::kBFloat16, "projectedCrossEntropy: fp32 or bf16 products");
    TORCH_CHECK(states.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32
            && bias.scalar_type() == torch::kFloat32 && states.dim() == 2 && states.is_contiguous(),
        "projectedCrossEntropy: fp32 hidden rows (contiguous) and weights");
    const int64_t n = rows.defined() ? rows.numel() : states.size(0);
    TORCH_CHECK(target.dim() == 1 && target.size(0) == n, "projectedCrossEntropy: one target per row");
    TORCH_CHECK(!rows.defined() || (rows.dim() == 1 && rows.scalar_type() == torch::kInt64 && rows.is_contiguous()),
        "projectedCrossEntropy: rows (N) int64"); // distinct, each a row of states: LossRows checks
    checkTargets(weight, target);
    const auto all = torch::empty({ 0 }, torch::kInt64);
    return ProjectedCrossEntropyFunction::apply(
        states, rows.defined() ? rows : all, weight, bias, target, gemmType == torch::kBFloat16, rows.defined());
}

torch::Tensor projectedCrossEntropyScore(const torch::Tensor& hidden, const torch::Tensor& weight,
    const torch::Tensor& bias, const torch::Tensor& target, torch::ScalarType gemmType, int64_t* hits)
{
    TORCH_CHECK(gemmType == torch::kFloat32 || gemmType == torch::kBFloat16,
        "projectedCrossEntropyScore: fp32 or bf16 products");
    TORCH_CHECK(hidden.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32
            && bias.scalar_type() == torch::kFloat32 && hidden.dim() == 2 && weight.dim() == 2
            && hidden.size(1) == weight.size(1) && bias.numel() == weight.size(0),
        "projectedCrossEntropyScore: fp32 hidden rows and weights of matching sizes");
    TORCH_CHECK(
        target.dim() == 1 && target.size(0) == hidden.size(0), "projectedCrossEntropyScore: one target per row");
    checkTargets(weight, target);
    torch::NoGradGuard noGrad;
    c10::impl::ExcludeDispatchKeyGuard noAutocast(c10::autocast_dispatch_keyset);
    const int64_t N = hidden.size(0), V = weight.size(0);
    const auto h = hidden.contiguous(), w = weight.contiguous(), b = bias.contiguous();
    const auto targets = target.to(torch::kInt64).contiguous();
    std::optional<WideProductBf16> project;
    torch::Tensor hb;
    if (gemmType == torch::kBFloat16) {
        project.emplace(w);
        hb = bf16Rows(h, rowQuantum(*project));
    }
    const int64_t ldz = project ? project->width() : V;
    auto logits = torch::empty(
        { project ? productRows(*project, std::min(N, kChunkRows)) : std::min(N, kChunkRows), ldz }, h.options());
    double loss = 0;
    int64_t hit = 0;
    for (int64_t r0 = 0; r0 < N; r0 += kChunkRows) {
        const int64_t n = std::min(kChunkRows, N - r0);
        if (project)
            project->product(hb.narrow(0, r0, productRows(*project, n)), logits.narrow(0, 0, productRows(*project, n)));
        else {
            auto z = logits.narrow(0, 0, n);
            at::mm_out(z, h.narrow(0, r0, n), w.t());
        }
        loss += kernels::crossEntropyRows(
            n, V, ldz, logits.data_ptr<float>(), b.data_ptr<float>(), targets.data_ptr<int64_t>() + r0, &hit);
    }
    if (hits)
        *hits += hit;
    return torch::tensor(loss, h.options());
}

} // namespace chatbench
