#include "maskedlstm.h"

#include "cpugemm.h"
#include "kernels.h"

#include <optional>

namespace chatbench {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Inputs: x, h0, c0, wIh, wHh, bIh, bHh, mask ((T, B) bool on the CPU, or empty = every step real),
// bf16 (every product on bf16 operands, fp32 sums). CPU, fp32, contiguous: the element loops are
// kernels.cpp's.
// Outputs: outputs (B, T, H), h (B, H), c (B, H).
class MaskedLstmFunction : public torch::autograd::Function<MaskedLstmFunction> {
public:
    static tensor_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& h0,
        const torch::Tensor& c0, const torch::Tensor& wIh, const torch::Tensor& wHh, const torch::Tensor& bIh,
        const torch::Tensor& bHh, const torch::Tensor& mask, bool bf16)
    {
        c10::impl::ExcludeDispatchKeyGuard noAutocast(c10::autocast_dispatch_keyset);
        const int64_t B = x.size(0), T = x.size(1), I = x.size(2), H = wHh.size(1);
        const bool masked = mask.numel() > 0;
        auto xt = x.transpose(0, 1).contiguous(); // (T, B, I)
        // tanh(z) = 2·sigmoid(2z) − 1: with the cell-candidate rows of the weights doubled, one
        // sigmoid pass over all four gates serves (lstmCell turns those back into tanh values).
        auto twice = torch::ones({ 4 * H, 1 }, x.options());
        twice.narrow(0, 2 * H, H).fill_(2.0);
        const auto bias = (bIh + bHh) * twice.squeeze(1);
        // The input projection of every step at once: (T·B, I) × (I, 4H).
        torch::Tensor gates; // (T, B, 4H) fp32
        std::optional<RecurrentProduct> recurrent; // fp32: gates += h · (2·wHh)ᵀ
        torch::Tensor wHhB, hsB; // bf16: the recurrent weight and each step's h as operands
        if (bf16) {
            xt = xt.to(torch::kBFloat16); // kept for dWih in the backward pass
            gates = bias.expand({ T * B, 4 * H }).contiguous();
            gemmBf16(xt.view({ T * B, I }), false, (wIh * twice).to(torch::kBFloat16), true, 1.0f, gates);
            gates = gates.view({ T, B, 4 * H });
            wHhB = (wHh * twice).to(torch::kBFloat16);
            hsB = torch::empty({ T + 1, B, H }, xt.options());
            hsB[0].copy_(h0);
        } else {
            gates = at::addmm(bias, xt.view({ T * B, I }), (wIh * twice).t()).view({ T, B, 4 * H });
            recurrent.emplace(wHh * twice, /*transposed=*/true, B);
        }
        auto hs = torch::empty({ T + 1, B, H }, x.options()); // hs[t] = state before step t
        auto cs = torch::empty({ T + 1, B, H }, x.options());
        auto tanhC = torch::empty({ T, B, H }, x.options()); // tanh of each step's new c
        hs[0].copy_(h0);
        cs[0].copy_(c0);
        // Per-step views made once (indexing inside the loop costs more than the small steps).
        const auto g = gates.unbind(0), h = hs.unbind(0), c = cs.unbind(0), tc = tanhC.unbind(0);
        const bool* keep = masked ? mask.data_ptr<bool>() : nullptr; // (T, B): false past the row's length
        for (int64_t t = 0; t < T; ++t) {
            auto gt = g[t]; // (B, 4H): pre-activations, replaced by the activations i, f, g, o
            if (bf16)
                gemmBf16(hsB[t], false, wHhB, true, 1.0f, gt);
            else
                recurrent->accumulate(gt, h[t]);
            gt.sigmoid_();
            const bool* k = keep ? keep + t * B : nullptr;
            kernels::lstmCell(B, H, gt.data_ptr<float>(), c[t].data_ptr<float>(), k, c[t + 1].data_ptr<float>());
            auto tct = tc[t];
            at::tanh_out(tct, c[t + 1]);
            kernels::lstmHidden(B, H, gt.data_ptr<float>(), tct.data_ptr<float>(), h[t].data_ptr<float>(), k,
                h[t + 1].data_ptr<float>());
            if (bf16)
                hsB[t + 1].copy_(h[t + 1]);
        }
        auto outputs = hs.narrow(0, 1, T); // (T, B, H)
        if (masked)
            outputs = outputs * mask.unsqueeze(2);
        // The backward pass reads the states only as operands of dWhh: bf16 keeps those.
        ctx->save_for_backward({ xt, wIh, wHh, bf16 ? hsB : hs, cs, gates, tanhC, mask });
        ctx->saved_data["bf16"] = bf16;
        return { outputs.transpose(0, 1), hs[T].clone(), cs[T].clone() };
    }

    static tensor_list backward(AutogradContext* ctx, tensor_list grads)
    {
        c10::impl::ExcludeDispatchKeyGuard noAutocast(c10::autocast_dispatch_keyset);
        const bool bf16 = ctx->saved_data["bf16"].toBool();
        const auto saved = ctx->get_saved_variables();
        const auto &xt = saved[0], &wIh = saved[1], &wHh = saved[2], &hs = saved[3], &cs = saved[4], &acts = saved[5],
                   &tanhC = saved[6], &mask = saved[7];
        const int64_t T = xt.size(0), B = xt.size(1), I = xt.size(2), H = wHh.size(1);
        const bool masked = mask.numel() > 0;
        torch::Tensor gy; // (T, B, H), zero past each length
        if (grads[0].defined()) {
            gy = grads[0].transpose(0, 1);
            if (masked)
                gy = gy * mask.unsqueeze(2);
        }
        const auto f32 = cs.options(); // xt and hs are bf16 in bf16 mode
        auto dh = grads[1].defined() ? grads[1].contiguous().clone() : torch::zeros({ B, H }, f32);
        auto dc = grads[2].defined() ? grads[2].contiguous().clone() : torch::zeros({ B, H }, f32);
        auto dhKeep = torch::empty({ B, H }, f32);
        auto dgates = torch::empty({ T, B, 4 * H }, f32); // (T, B, 4H)
        const auto d = dgates.unbind(0);
        std::vector<torch::Tensor> gys;
        if (gy.defined())
            gys = gy.unbind(0);
        std::optional<RecurrentProduct> recurrent; // fp32: dh += dgates · wHh
        torch::Tensor wHhB, dgatesB; // bf16: the recurrent weight and each step's dgates as operands
        if (bf16) {
            wHhB = wHh.to(torch::kBFloat16);
            dgatesB = torch::empty({ T, B, 4 * H }, f32.dtype(torch::kBFloat16));
        } else {
            recurrent.emplace(wHh, /*transposed=*/false, B);
        }
        const float* a = acts.data_ptr<float>();
        const float* tcs = tanhC.data_ptr<float>();
        const float* cprev = cs.data_ptr<float>();
        const bool* keep = masked ? mask.data_ptr<bool>() : nullptr;
        for (int64_t t = T - 1; t >= 0; --t) {
            // dh, dc: gradients w.r.t. the state after step t (hs[t + 1], cs[t + 1]).
            if (gy.defined())
                dh.add_(gys[static_cast<size_t>(t)]);
            kernels::lstmBackwardStep(B, H, dh.data_ptr<float>(), dc.data_ptr<float>(), a + t * B * 4 * H,
                tcs + t * B * H, cprev + t * B * H, keep ? keep + t * B : nullptr, d[t].data_ptr<float>(),
                dhKeep.data_ptr<float>());
            dh.copy_(dhKeep); // (B, H): what passed by, plus what went through the recurrent product
            if (bf16) {
                auto db16 = dgatesB[t];
                db16.copy_(d[t]);
                gemmBf16(db16, false, wHhB, false, 1.0f, dh);
            } else {
                recurrent->accumulate(dh, d[t]);
            }
        }
        auto d2 = dgates.view({ T * B, 4 * H });
        auto db = d2.sum(0); // (4H), the same for both biases
        auto prev = hs.narrow(0, 0, T).reshape({ T * B, H }); // the state each step started from
        torch::Tensor dWih, dWhh, dx;
        if (bf16) { // the three products over all steps on bf16 operands, fp32 sums
            const auto d2b = dgatesB.view({ T * B, 4 * H });
            dWih = torch::empty({ 4 * H, I }, f32);
            gemmBf16(d2b, true, xt.view({ T * B, I }), false, 0.0f, dWih);
            dWhh = torch::empty({ 4 * H, H }, f32);
            gemmBf16(d2b, true, prev, false, 0.0f, dWhh);
            dx = torch::empty({ T * B, I }, f32);
            gemmBf16(d2b, false, wIh.to(torch::kBFloat16), false, 0.0f, dx);
            dx = dx.view({ T, B, I }).transpose(0, 1);
        } else {
            dWih = at::mm(d2.t(), xt.view({ T * B, I })); // (4H, I)
            dWhh = at::mm(d2.t(), prev); // (4H, H)
            dx = at::mm(d2, wIh).view({ T, B, I }).transpose(0, 1); // (B, T, I)
        }
        return { dx, dh, dc, dWih, dWhh, db, db.clone(), torch::Tensor(), torch::Tensor() };
    }
};

} // namespace

MaskedLstmOutput maskedLstmLayer(const torch::Tensor& x, const torch::Tensor& h0, const torch::Tensor& c0,
    const torch::Tensor& wIh, const torch::Tensor& wHh, const torch::Tensor& bIh, const torch::Tensor& bHh,
    const torch::Tensor& lengths, torch::ScalarType gemmType)
{
    TORCH_CHECK(gemmType == torch::kFloat32 || gemmType == torch::kBFloat16, "maskedLstmLayer: fp32 or bf16 products");
    auto mask = torch::empty({ 0 }, torch::TensorOptions().dtype(torch::kBool)); // none
    if (lengths.defined()) { // (T, B): true while step t is within row b's length
        auto steps = torch::arange(x.size(1), lengths.options()).unsqueeze(1); // (T, 1)
        mask = (steps < lengths.unsqueeze(0)).contiguous(); // (T, B)
    }
    // fp32 in (its buffers and element loops are fp32), whatever a caller's autocast made of x.
    const auto f32 = [](const torch::Tensor& t) { return t.to(torch::kFloat32); };
    auto out
        = MaskedLstmFunction::apply(f32(x), f32(h0), f32(c0), wIh, wHh, bIh, bHh, mask, gemmType == torch::kBFloat16);
    return { out[0], out[1], out[2] };
}

} // namespace chatbench
