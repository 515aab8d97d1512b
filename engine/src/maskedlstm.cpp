#include "maskedlstm.h"

#include "kernels.h"

#include <dlfcn.h>

namespace chatbench {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// MKL's packed GEMM (sgemm_pack / sgemm_compute, LP64), which LibTorch's x86 builds export:
// null where this LibTorch has none (then the products go through at::addmm_).
struct PackedGemm {
    using GetSize = size_t (*)(const char*, const int*, const int*, const int*);
    using Pack = void (*)(
        const char*, const char*, const int*, const int*, const int*, const float*, const float*, const int*, float*);
    using Compute = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const int*,
        const float*, const int*, const float*, float*, const int*);
    GetSize getSize = nullptr;
    Pack pack = nullptr;
    Compute compute = nullptr;

    static const PackedGemm& get()
    {
        static const PackedGemm api = [] {
            PackedGemm a;
            a.getSize = reinterpret_cast<GetSize>(::dlsym(RTLD_DEFAULT, "sgemm_pack_get_size_"));
            a.pack = reinterpret_cast<Pack>(::dlsym(RTLD_DEFAULT, "sgemm_pack_"));
            a.compute = reinterpret_cast<Compute>(::dlsym(RTLD_DEFAULT, "sgemm_compute_"));
            if (!a.getSize || !a.pack || !a.compute)
                a = PackedGemm {};
            return a;
        }();
        return api;
    }
};

// c (M, N) += a (M, K) · op(w) for one weight and the M rows of every step, all row-major fp32
// and contiguous; op(w) = wᵀ for w (N, K) (transposed), or w (K, N). With MKL's packed GEMM the
// weight is packed once for all the steps instead of inside every product (measured 15% off
// the 50×200×800 and 50×800×200 products at 2 threads).
class RecurrentProduct {
public:
    RecurrentProduct(const torch::Tensor& w, bool transposed, int64_t M)
        : m_w(w.contiguous())
        , m_transposed(transposed)
        , m_m(static_cast<int>(M))
        , m_n(static_cast<int>(transposed ? w.size(0) : w.size(1)))
        , m_k(static_cast<int>(transposed ? w.size(1) : w.size(0)))
    {
        const PackedGemm& mkl = PackedGemm::get();
        if (!mkl.pack || M == 0)
            return;
        // Column-major, as MKL sees it: cᵀ (N, M) += op(w)ᵀ (N, K) · aᵀ (K, M).
        const int ld = m_transposed ? m_k : m_n;
        const float one = 1.0f;
        const size_t bytes = mkl.getSize("A", &m_n, &m_m, &m_k);
        m_packed = torch::empty({ static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float)) }, m_w.options());
        mkl.pack("A", m_transposed ? "T" : "N", &m_n, &m_m, &m_k, &one, m_w.data_ptr<float>(), &ld,
            m_packed.data_ptr<float>());
    }

    void accumulate(torch::Tensor& c, const torch::Tensor& a) const
    {
        if (!m_packed.defined()) {
            c.addmm_(a, m_transposed ? m_w.t() : m_w);
            return;
        }
        const float one = 1.0f;
        PackedGemm::get().compute("P", "N", &m_n, &m_m, &m_k, m_packed.data_ptr<float>(), &m_n, a.data_ptr<float>(),
            &m_k, &one, c.data_ptr<float>(), &m_n);
    }

private:
    torch::Tensor m_w;
    bool m_transposed;
    int m_m, m_n, m_k;
    torch::Tensor m_packed; // undefined: at::addmm_
};

// Inputs: x, h0, c0, wIh, wHh, bIh, bHh, mask ((T, B) bool on the CPU, or empty = every step real),
// bf16 (the bulk products on bf16 operands). CPU, fp32, contiguous: the element loops are kernels.cpp's.
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
        const RecurrentProduct recurrent(wHh * twice, /*transposed=*/true, B); // gates += h · (2·wHh)ᵀ
        const auto bias = (bIh + bHh) * twice.squeeze(1);
        // The input projection of every step at once: (T·B, I) × (I, 4H).
        torch::Tensor gates; // (T, B, 4H) fp32
        if (bf16) {
            xt = xt.to(torch::kBFloat16); // kept for dWih in the backward pass
            const auto wIhT = (wIh * twice).to(torch::kBFloat16).t();
            gates = at::add(at::mm(xt.view({ T * B, I }), wIhT), bias).view({ T, B, 4 * H }); // bf16 + fp32 → fp32
        } else {
            gates = at::addmm(bias, xt.view({ T * B, I }), (wIh * twice).t()).view({ T, B, 4 * H });
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
            recurrent.accumulate(gt, h[t]);
            gt.sigmoid_();
            const bool* k = keep ? keep + t * B : nullptr;
            kernels::lstmCell(B, H, gt.data_ptr<float>(), c[t].data_ptr<float>(), k, c[t + 1].data_ptr<float>());
            auto tct = tc[t];
            at::tanh_out(tct, c[t + 1]);
            kernels::lstmHidden(B, H, gt.data_ptr<float>(), tct.data_ptr<float>(), h[t].data_ptr<float>(), k,
                h[t + 1].data_ptr<float>());
        }
        auto outputs = hs.narrow(0, 1, T); // (T, B, H)
        if (masked)
            outputs = outputs * mask.unsqueeze(2);
        ctx->save_for_backward({ xt, wIh, wHh, hs, cs, gates, tanhC, mask });
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
        const auto f32 = hs.options(); // xt is bf16 in bf16 mode
        auto dh = grads[1].defined() ? grads[1].contiguous().clone() : torch::zeros({ B, H }, f32);
        auto dc = grads[2].defined() ? grads[2].contiguous().clone() : torch::zeros({ B, H }, f32);
        auto dhKeep = torch::empty({ B, H }, f32);
        auto dgates = torch::empty({ T, B, 4 * H }, f32); // (T, B, 4H)
        const auto d = dgates.unbind(0);
        std::vector<torch::Tensor> gys;
        if (gy.defined())
            gys = gy.unbind(0);
        const RecurrentProduct recurrent(wHh, /*transposed=*/false, B); // dh += dgates · wHh
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
            recurrent.accumulate(dh, d[t]);
        }
        auto d2 = dgates.view({ T * B, 4 * H });
        auto db = d2.sum(0); // (4H), the same for both biases
        auto prev = hs.narrow(0, 0, T).reshape({ T * B, H }); // the state each step started from
        torch::Tensor dWih, dWhh, dx;
        if (bf16) { // the three products over all steps on bf16 operands, the results back in fp32
            const auto d2b = d2.to(torch::kBFloat16);
            dWih = at::mm(d2b.t(), xt.view({ T * B, I })).to(torch::kFloat32); // (4H, I)
            dWhh = at::mm(d2b.t(), prev.to(torch::kBFloat16)).to(torch::kFloat32); // (4H, H)
            dx = at::mm(d2b, wIh.to(torch::kBFloat16)).view({ T, B, I }).transpose(0, 1).to(torch::kFloat32);
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
    auto out = MaskedLstmFunction::apply(x, h0, c0, wIh, wHh, bIh, bHh, mask, gemmType == torch::kBFloat16);
    return { out[0], out[1], out[2] };
}

} // namespace chatbench
