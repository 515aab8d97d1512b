#include "maskedlstm.h"

#include "cpugemm.h"
#include "kernels.h"
#include "sparselookup.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <vector>

namespace chatbench {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Which rows each step runs. Rows are sorted by length, longest first, so that the rows still
// running at step t are the first n[t]; the steps' rows are then stored one after the other
// ("packed", as torch's PackedSequence does): step t's rows start at off[t]. No step computes a
// row that has ended, so padding costs no products and no element passes.
struct Packing {
    int64_t B = 0, T = 0, N = 0; // rows, padded steps, real (row, step) pairs
    std::vector<int64_t> len; // each row's real steps (clamped to [0, T])
    std::vector<int64_t> order; // sorted position → row
    std::vector<int64_t> n, off; // per step that runs: rows, and the first packed row (off has one more)
    torch::Tensor orderT; // (B) order as a tensor
    torch::Tensor flat; // (N) the row of a (B·T, ·) batch-first view for each packed row
    // Rows of a (B + N, H) state buffer: rows 0..B hold the initial states (sorted), then the
    // packed states after each step.
    torch::Tensor prev; // (N) the state each packed row starts from
    torch::Tensor last; // (B) each row's final state, in the rows' own order

    static Packing make(const torch::Tensor& lengths, int64_t B, int64_t T)
    {
        Packing p;
        p.B = B;
        p.T = T;
        std::vector<int64_t>& len = p.len;
        len.assign(static_cast<size_t>(B), T);
        if (lengths.numel() > 0) { // empty: every row fills all T steps
            const auto l = lengths.to(torch::kInt64).contiguous();
            for (int64_t b = 0; b < B; ++b)
                len[static_cast<size_t>(b)] = std::clamp<int64_t>(l.data_ptr<int64_t>()[b], 0, T);
        }
        p.order.resize(static_cast<size_t>(B));
        std::iota(p.order.begin(), p.order.end(), int64_t(0));
        std::stable_sort(p.order.begin(), p.order.end(),
            [&](int64_t a, int64_t b) { return len[static_cast<size_t>(a)] > len[static_cast<size_t>(b)]; });
        const int64_t steps = B > 0 ? len[static_cast<size_t>(p.order[0])] : 0;
        p.off.push_back(0);
        for (int64_t t = 0; t < steps; ++t) {
            int64_t rows = 0;
            while (rows < B && len[static_cast<size_t>(p.order[static_cast<size_t>(rows)])] > t)
                ++rows;
            p.n.push_back(rows);
            p.off.push_back(p.off.back() + rows);
        }
        p.N = p.off.back();
        const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
        p.orderT = torch::tensor(p.order, i64);
        p.flat = torch::empty({ p.N }, i64);
        p.prev = torch::empty({ p.N }, i64);
        p.last = torch::empty({ B }, i64);
        int64_t* flat = p.flat.data_ptr<int64_t>();
        int64_t* prev = p.prev.data_ptr<int64_t>();
        for (size_t t = 0; t < p.n.size(); ++t)
            for (int64_t j = 0; j < p.n[t]; ++j) {
                const int64_t row = p.off[t] + j;
                flat[row] = p.order[static_cast<size_t>(j)] * T + static_cast<int64_t>(t);
                prev[row] = t == 0 ? j : B + p.off[t - 1] + j;
            }
        int64_t* last = p.last.data_ptr<int64_t>();
        for (int64_t j = 0; j < B; ++j) {
            const int64_t l = len[static_cast<size_t>(p.order[static_cast<size_t>(j)])];
            last[p.order[static_cast<size_t>(j)]] = l == 0 ? j : B + p.off[static_cast<size_t>(l - 1)] + j;
        }
        return p;
    }

    // The n[t] rows of a (B + N, ·) state buffer that step t starts from.
    int64_t prevRow(size_t t) const { return t == 0 ? 0 : B + off[t - 1]; }
};

// A (B·T, width) batch-first tensor holding the N packed rows (width floats each) at their real
// steps (flat: each packed row's place) and zeros at the padding (row b's steps len[b]..T): each
// row written once, where a zero fill and an index copy wrote the real ones twice.
torch::Tensor unpackRows(const float* packed, int64_t width, int64_t B, int64_t T, const std::vector<int64_t>& len,
    const torch::Tensor& flat, const torch::TensorOptions& options)
{
    auto out = torch::empty({ B * T, width }, options);
    float* o = out.data_ptr<float>();
    const size_t rowBytes = static_cast<size_t>(width) * sizeof(float);
    for (int64_t b = 0; b < B; ++b) {
        const int64_t l = len[static_cast<size_t>(b)];
        if (l < T)
            std::memset(o + (b * T + l) * width, 0, static_cast<size_t>(T - l) * rowBytes);
    }
    const int64_t* f = flat.data_ptr<int64_t>();
    for (int64_t r = 0, N = flat.numel(); r < N; ++r)
        std::memcpy(o + f[r] * width, packed + r * width, rowBytes);
    return out;
}

// A (rows, width) tensor whose every row is `row` (width floats): the bias a product then adds to.
torch::Tensor repeatedRow(const torch::Tensor& row, int64_t rows, int64_t width)
{
    auto out = torch::empty({ rows, width }, row.options());
    const auto r = row.contiguous();
    const float* src = r.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < rows; ++i)
        std::memcpy(o + i * width, src, static_cast<size_t>(width) * sizeof(float));
    return out;
}

// Inputs: x, h0, c0, wIh, wHh, bIh, bHh, lengths ((B) int64 on the CPU, or empty = every row
// fills all T steps), bf16 (every product on bf16 operands, fp32 sums), lookup, ids, paddingRow:
// with lookup, x is an embedding's weight (V, I) and the layer's input is its rows at ids (B, T),
// gathered straight into the packed rows; x's gradient is then sparse (sparseRowsGradient). CPU,
// fp32: the element loops are kernels.cpp's.
// Outputs: outputs (B, T, H), h (B, H), c (B, H).
class MaskedLstmFunction : public torch::autograd::Function<MaskedLstmFunction> {
public:
    static tensor_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& h0,
        const torch::Tensor& c0, const torch::Tensor& wIh, const torch::Tensor& wHh, const torch::Tensor& bIh,
        const torch::Tensor& bHh, const torch::Tensor& lengths, bool bf16, bool lookup, const torch::Tensor& ids,
        int64_t paddingRow)
    {
        c10::impl::ExcludeDispatchKeyGuard noAutocast(c10::autocast_dispatch_keyset);
        const int64_t B = (lookup ? ids : x).size(0), T = (lookup ? ids : x).size(1), I = x.size(-1), H = wHh.size(1);
        const Packing p = Packing::make(lengths, B, T);
        const int64_t N = p.N;
        // Without lengths every row runs all T steps in its own order, so packed row t·B + b is
        // (b, t): the rows are x time-major, and the outputs are the states buffer as it stands.
        const bool timeMajor = lengths.numel() == 0;
        // (N, I): the real steps only; in bf16 gathered and rounded in one pass (kept for dWih).
        // Time-major x (the outputs of a layer below) is read where it is; looked-up rows straight
        // from the embedding.
        const bool xTimeMajor = !lookup && timeMajor && x.transpose(0, 1).is_contiguous();
        const auto xc = xTimeMajor ? x.transpose(0, 1) : x.contiguous();
        torch::Tensor xp;
        torch::Tensor idsFlat, rowIds; // lookup: the ids batch-first, and the embedding row of each packed row
        if (lookup) {
            idsFlat = ids.reshape({ -1 }).to(torch::kInt64).contiguous();
            rowIds = idsFlat.index_select(0, p.flat);
            const int64_t* r = rowIds.data_ptr<int64_t>();
            const auto [lo, hi] = std::minmax_element(r, r + N);
            TORCH_CHECK(N == 0 || (*lo >= 0 && *hi < x.size(0)), "maskedLstmLayer: an id outside the embedding's ",
                x.size(0), " rows");
        }
        if (lookup && bf16) {
            xp = torch::empty({ N, I }, x.options().dtype(torch::kBFloat16));
            kernels::gatherBf16Rows(
                xc.data_ptr<float>(), I, rowIds.data_ptr<int64_t>(), N, reinterpret_cast<uint16_t*>(xp.data_ptr()));
        } else if (lookup) {
            xp = xc.index_select(0, rowIds);
        } else if (bf16) {
            xp = torch::empty({ N, I }, x.options().dtype(torch::kBFloat16));
            if (xTimeMajor)
                kernels::roundBf16(xc.data_ptr<float>(), N * I, reinterpret_cast<uint16_t*>(xp.data_ptr()));
            else
                kernels::gatherBf16Rows(
                    xc.data_ptr<float>(), I, p.flat.data_ptr<int64_t>(), N, reinterpret_cast<uint16_t*>(xp.data_ptr()));
        } else {
            xp = xTimeMajor ? xc.view({ N, I }) : xc.view({ B * T, I }).index_select(0, p.flat);
        }
        const auto bias = bIh + bHh;
        // The input projection of every real step at once: (N, I) × (I, 4H).
        torch::Tensor gates; // (N, 4H) fp32
        std::optional<RecurrentProduct> recurrent; // fp32: gates += h · wHhᵀ
        std::optional<RecurrentProductBf16> recurrentB; // bf16: the same on bf16 operands
        torch::Tensor statesB; // bf16: the states as operands
        auto states = torch::empty({ B + N, H }, x.options()); // initial states (sorted), then each step's h
        auto cstates = torch::empty({ B + N, H }, x.options()); // the same for c
        states.narrow(0, 0, B).copy_(h0.index_select(0, p.orderT));
        cstates.narrow(0, 0, B).copy_(c0.index_select(0, p.orderT));
        gates = repeatedRow(bias, N, 4 * H);
        if (bf16) {
            if (N > 0)
                gemmBf16(xp, false, bf16Weight(wIh), true, 1.0f, gates);
            recurrentB.emplace(wHh, /*transposed=*/true);
            statesB = torch::empty({ B + N, H }, xp.options());
            statesB.narrow(0, 0, B).copy_(states.narrow(0, 0, B));
        } else {
            gates.addmm_(xp, wIh.t()); // as at::addmm(bias, …): the bias, then the product added
            recurrent.emplace(wHh, /*transposed=*/true, B);
        }
        auto tanhC = torch::empty({ N, H }, x.options()); // tanh of each step's new c
        float* g = gates.data_ptr<float>();
        float* hb = states.data_ptr<float>();
        float* cb = cstates.data_ptr<float>();
        float* tc = tanhC.data_ptr<float>();
        uint16_t* hB16 = bf16 ? reinterpret_cast<uint16_t*>(statesB.data_ptr()) : nullptr; // each step's h in bf16
        for (size_t t = 0; t < p.n.size(); ++t) {
            const int64_t n = p.n[t], at = p.off[t], from = p.prevRow(t);
            auto gt = gates.narrow(0, at, n); // pre-activations, replaced by the activations i, f, g, o
            if (bf16) {
                recurrentB->accumulate(gt, statesB.narrow(0, from, n));
            } else {
                recurrent->accumulate(gt, states.narrow(0, from, n));
            }
            kernels::lstmForwardStep(n, H, g + at * 4 * H, cb + from * H, cb + (B + at) * H, tc + at * H,
                hb + (B + at) * H, bf16 ? hB16 + (B + at) * H : nullptr);
        }
        // (B, T, H): time-major, a view of the states buffer (no copy); else unpacked batch-major.
        const auto outputs = timeMajor ? states.narrow(0, B, N).view({ T, B, H }).transpose(0, 1)
                                       : unpackRows(hb + B * H, H, B, T, p.len, p.flat, x.options()).view({ B, T, H });
        // Gradients of outputs nobody read (the encoder's without attention, the decoder's final
        // state) stay undefined rather than arrive as tensors of zeros to be read.
        ctx->set_materialize_grads(false);
        // The backward pass reads the states only as operands of dWhh: bf16 keeps those.
        ctx->save_for_backward({ xp, wIh, wHh, bf16 ? statesB : states, cstates, gates, tanhC, p.flat, p.prev, p.orderT,
            torch::tensor(p.n, torch::TensorOptions().dtype(torch::kInt64)) });
        ctx->saved_data["bf16"] = bf16;
        ctx->saved_data["B"] = B;
        ctx->saved_data["T"] = T;
        ctx->saved_data["timeMajor"] = timeMajor;
        ctx->saved_data["lookup"] = lookup;
        if (lookup) {
            ctx->saved_data["ids"] = idsFlat;
            ctx->saved_data["V"] = x.size(0);
            ctx->saved_data["paddingRow"] = paddingRow;
        }
        return { outputs, states.index_select(0, p.last), cstates.index_select(0, p.last) };
    }

    static tensor_list backward(AutogradContext* ctx, tensor_list grads)
    {
        c10::impl::ExcludeDispatchKeyGuard noAutocast(c10::autocast_dispatch_keyset);
        const bool bf16 = ctx->saved_data["bf16"].toBool();
        const int64_t B = ctx->saved_data["B"].toInt(), T = ctx->saved_data["T"].toInt();
        const bool timeMajor = ctx->saved_data["timeMajor"].toBool();
        const auto saved = ctx->get_saved_variables();
        const auto &xp = saved[0], &wIh = saved[1], &wHh = saved[2], &states = saved[3], &cstates = saved[4],
                   &acts = saved[5], &tanhC = saved[6], &flat = saved[7], &prev = saved[8], &orderT = saved[9],
                   &nT = saved[10];
        const int64_t N = xp.size(0), I = xp.size(1), H = wHh.size(1);
        const int64_t steps = nT.numel();
        std::vector<int64_t> n(static_cast<size_t>(steps)), off(static_cast<size_t>(steps) + 1, 0);
        for (int64_t t = 0; t < steps; ++t) {
            n[static_cast<size_t>(t)] = nT.data_ptr<int64_t>()[t];
            off[static_cast<size_t>(t) + 1] = off[static_cast<size_t>(t)] + n[static_cast<size_t>(t)];
        }
        const auto f32 = cstates.options(); // xp and the states are bf16 in bf16 mode
        torch::Tensor gy; // (N, H): the outputs' gradient at the real steps
        if (grads[0].defined())
            gy = timeMajor ? grads[0].transpose(0, 1).contiguous().view({ N, H }) // no copy when time-major
                           : grads[0].reshape({ B * T, H }).index_select(0, flat).contiguous();
        // dh, dc per sorted row: the final state's gradient until the row's last step is reached
        // going backwards, then the gradient with respect to the state before each step.
        auto dh = grads[1].defined() ? grads[1].index_select(0, orderT).contiguous() : torch::zeros({ B, H }, f32);
        auto dc = grads[2].defined() ? grads[2].index_select(0, orderT).contiguous() : torch::zeros({ B, H }, f32);
        auto dgates = torch::empty({ N, 4 * H }, f32);
        std::optional<RecurrentProduct> recurrent; // fp32: dh += dgates · wHh
        std::optional<RecurrentProductBf16> recurrentB; // bf16: the same on bf16 operands
        torch::Tensor dgatesB; // bf16: each step's dgates as operands
        if (bf16) {
            recurrentB.emplace(wHh, /*transposed=*/false);
            dgatesB = torch::empty({ N, 4 * H }, f32.dtype(torch::kBFloat16));
        } else {
            recurrent.emplace(wHh, /*transposed=*/false, B);
        }
        const float* a = acts.data_ptr<float>();
        const float* tcs = tanhC.data_ptr<float>();
        const float* cb = cstates.data_ptr<float>();
        const float* g = gy.defined() ? gy.data_ptr<float>() : nullptr;
        float* dhp = dh.data_ptr<float>();
        for (int64_t t = steps - 1; t >= 0; --t) {
            const size_t ts = static_cast<size_t>(t);
            const int64_t rows = n[ts], at = off[ts], from = t == 0 ? 0 : B + off[ts - 1];
            // The output at step t is the state after it: its gradient joins dh. Then dh's active
            // rows become the gradient with respect to the state before step t: zero (here),
            // plus the recurrent product (below).
            kernels::lstmBackwardStep(rows, H, dhp, g ? g + at * H : nullptr, dc.data_ptr<float>(), a + at * 4 * H,
                tcs + at * H, cb + from * H, dgates.data_ptr<float>() + at * 4 * H,
                bf16 ? reinterpret_cast<uint16_t*>(dgatesB.data_ptr()) + at * 4 * H : nullptr);
            auto dhRows = dh.narrow(0, 0, rows);
            if (bf16) {
                recurrentB->accumulate(dhRows, dgatesB.narrow(0, at, rows));
            } else {
                recurrent->accumulate(dhRows, dgates.narrow(0, at, rows));
            }
        }
        auto dh0 = torch::empty({ B, H }, f32).index_copy_(0, orderT, dh);
        auto dc0 = torch::empty({ B, H }, f32).index_copy_(0, orderT, dc);
        auto db = dgates.sum(0); // (4H), the same for both biases
        const auto prevStates = states.index_select(0, prev); // (N, H): the state each step started from
        torch::Tensor dWih, dWhh, dxp;
        if (bf16) { // the three products over all real steps on bf16 operands, fp32 sums
            // Written whole by the products (beta 0); zeroed only when there are none.
            dWih = N > 0 ? torch::empty({ 4 * H, I }, f32) : torch::zeros({ 4 * H, I }, f32);
            dWhh = N > 0 ? torch::empty({ 4 * H, H }, f32) : torch::zeros({ 4 * H, H }, f32);
            dxp = torch::empty({ N, I }, f32);
            if (N > 0) {
                gemmBf16(dgatesB, true, xp, false, 0.0f, dWih);
                gemmBf16(dgatesB, true, prevStates, false, 0.0f, dWhh);
                gemmBf16(dgatesB, false, bf16Weight(wIh), false, 0.0f, dxp);
            }
        } else {
            dWih = at::mm(dgates.t(), xp); // (4H, I)
            dWhh = at::mm(dgates.t(), prevStates); // (4H, H)
            dxp = at::mm(dgates, wIh); // (N, I)
        }
        torch::Tensor dx;
        if (ctx->saved_data["lookup"].toBool()) {
            // The embedding's gradient: each position that ran, in the ids' order (b·T + t), adds its
            // packed row of dxp, as sparseGradLookup's backward adds the rows of a (B, T, I) gradient.
            const auto idsT = ctx->saved_data["ids"].toTensor();
            const int64_t* idp = idsT.data_ptr<int64_t>();
            const int64_t* f = flat.data_ptr<int64_t>();
            std::vector<int64_t> rowOf(static_cast<size_t>(B * T), -1);
            for (int64_t r = 0; r < N; ++r)
                rowOf[static_cast<size_t>(f[r])] = r;
            std::vector<int64_t> entryIds, at;
            entryIds.reserve(static_cast<size_t>(N));
            at.reserve(static_cast<size_t>(N));
            for (int64_t pos = 0; pos < B * T; ++pos)
                if (const int64_t r = rowOf[static_cast<size_t>(pos)]; r >= 0) {
                    entryIds.push_back(idp[pos]);
                    at.push_back(r);
                }
            dx = sparseRowsGradient(
                entryIds, dxp.contiguous(), at, ctx->saved_data["V"].toInt(), ctx->saved_data["paddingRow"].toInt());
        } else if (timeMajor) { // time-major like the outputs: dxp seen as (B, T, I), no copy
            dx = dxp.view({ T, B, I }).transpose(0, 1);
        } else {
            // Each row's real steps: sorted position j runs the steps whose n[t] exceeds j.
            std::vector<int64_t> len(static_cast<size_t>(B), 0);
            const int64_t* order = orderT.data_ptr<int64_t>();
            for (int64_t t = 0; t < steps; ++t)
                for (int64_t j = 0; j < n[static_cast<size_t>(t)]; ++j)
                    ++len[static_cast<size_t>(order[j])];
            dx = unpackRows(dxp.contiguous().data_ptr<float>(), I, B, T, len, flat, f32).view({ B, T, I });
        }
        return { dx, dh0, dc0, dWih, dWhh, db, db.clone(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor() };
    }
};

} // namespace

MaskedLstmOutput maskedLstmLayer(const torch::Tensor& x, const torch::Tensor& h0, const torch::Tensor& c0,
    const torch::Tensor& wIh, const torch::Tensor& wHh, const torch::Tensor& bIh, const torch::Tensor& bHh,
    const torch::Tensor& lengths, torch::ScalarType gemmType)
{
    return maskedLstmLayer(LayerInput { x, torch::Tensor(), -1 }, h0, c0, wIh, wHh, bIh, bHh, lengths, gemmType);
}

MaskedLstmOutput maskedLstmLayer(const LayerInput& in, const torch::Tensor& h0, const torch::Tensor& c0,
    const torch::Tensor& wIh, const torch::Tensor& wHh, const torch::Tensor& bIh, const torch::Tensor& bHh,
    const torch::Tensor& lengths, torch::ScalarType gemmType)
{
    const bool lookup = in.ids.defined();
    const auto& x = in.x;
    TORCH_CHECK(gemmType == torch::kFloat32 || gemmType == torch::kBFloat16, "maskedLstmLayer: fp32 or bf16 products");
    TORCH_CHECK(!lookup
            || (in.ids.dim() == 2 && in.ids.device().is_cpu() && x.dim() == 2 && x.device().is_cpu()
                && x.scalar_type() == torch::kFloat32),
        "maskedLstmLayer: a lookup takes (B, T) ids and a (V, I) fp32 weight, on the CPU");
    const int64_t B = (lookup ? in.ids : x).size(0);
    TORCH_CHECK(!lengths.defined() || (lengths.dim() == 1 && lengths.size(0) == B && lengths.device().is_cpu()),
        "maskedLstmLayer: lengths (B) on the CPU");
    // fp32 in (its buffers and element loops are fp32), whatever a caller's autocast made of x.
    const auto f32 = [](const torch::Tensor& t) { return t.to(torch::kFloat32).contiguous(); };
    const auto none = torch::empty({ 0 }, torch::TensorOptions().dtype(torch::kInt64)); // every step real; no ids
    auto out = MaskedLstmFunction::apply(x.to(torch::kFloat32), f32(h0), f32(c0), // x in any layout (time-major too)
        wIh, wHh, bIh, bHh, lengths.defined() ? lengths : none, gemmType == torch::kBFloat16, lookup,
        lookup ? in.ids : none, in.paddingRow);
    return { out[0], out[1], out[2] };
}

} // namespace chatbench
