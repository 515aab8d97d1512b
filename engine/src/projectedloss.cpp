#include "projectedloss.h"

#include "cpugemm.h"

#include <algorithm>

namespace chatbench {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// 128 rows of a 2–4k vocabulary are 1–2 MB of logits: one core's L2.
constexpr int64_t kChunkRows = 128;

class ProjectedCrossEntropyFunction : public torch::autograd::Function<ProjectedCrossEntropyFunction> {
public:
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
        const torch::Tensor& bias, const torch::Tensor& target, bool bf16)
    {
        c10::impl::ExcludeDispatchKeyGuard noAutocast(c10::autocast_dispatch_keyset);
        const int64_t N = hidden.size(0), H = hidden.size(1), V = weight.size(0);
        auto dHidden = torch::empty({ N, H }, hidden.options());
        auto dWeight = torch::zeros({ V, H }, weight.options());
        auto dBias = torch::zeros({ V }, bias.options());
        const int64_t rows = std::min(N, kChunkRows);
        auto logits = torch::empty({ rows, V }, hidden.options());
        const auto minusOne = torch::full({ rows, 1 }, -1.0f, hidden.options());
        auto loss = torch::zeros({}, hidden.options().dtype(torch::kFloat64));
        torch::Tensor hb, wb, zb; // bf16: the operands once, and each chunk's p − onehot
        if (bf16) {
            hb = hidden.to(torch::kBFloat16);
            wb = weight.to(torch::kBFloat16);
            zb = torch::empty({ rows, V }, hidden.options().dtype(torch::kBFloat16));
        }
        for (int64_t r0 = 0; r0 < N; r0 += kChunkRows) {
            const int64_t n = std::min(kChunkRows, N - r0);
            auto h = hidden.narrow(0, r0, n); // (n, H)
            auto t = target.narrow(0, r0, n).unsqueeze(1); // (n, 1)
            auto z = logits.narrow(0, 0, n); // (n, V): logits, then log p, then p − onehot
            if (bf16) {
                z.copy_(bias.expand({ n, V }));
                gemmBf16(hb.narrow(0, r0, n), false, wb, true, 1.0f, z);
            } else {
                at::addmm_out(z, bias, h, weight.t());
            }
            // In place: the CPU kernel reads each row whole (max, sum of exp) before it writes it.
            // A second buffer would double the chunk's cache footprint (measured 4–8% slower per
            // epoch); projectedLossMatchesLinearCrossEntropy guards the result.
            at::_log_softmax_out(z, z, /*dim=*/1, /*half_to_float=*/false);
            loss.sub_(z.gather(1, t).sum(torch::kFloat64));
            z.exp_();
            z.scatter_add_(1, t, minusOne.narrow(0, 0, n)); // dloss/dlogits
            auto dh = dHidden.narrow(0, r0, n);
            dBias.add_(z.sum(0));
            if (bf16) {
                auto zbChunk = zb.narrow(0, 0, n);
                zbChunk.copy_(z);
                gemmBf16(zbChunk, false, wb, false, 0.0f, dh); // (n, H)
                gemmBf16(zbChunk, true, hb.narrow(0, r0, n), false, 1.0f, dWeight); // (V, H)
            } else {
                at::mm_out(dh, z, weight); // (n, H)
                dWeight.addmm_(z.t(), h); // (V, H)
            }
        }
        ctx->save_for_backward({ dHidden, dWeight, dBias });
        return loss.to(hidden.scalar_type());
    }

    static tensor_list backward(AutogradContext* ctx, tensor_list grads)
    {
        const auto saved = ctx->get_saved_variables();
        const auto& g = grads[0]; // scalar
        return { saved[0] * g, saved[1] * g, saved[2] * g, torch::Tensor(), torch::Tensor() };
    }
};

} // namespace

torch::Tensor projectedCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& bias,
    const torch::Tensor& target, torch::ScalarType gemmType)
{
    TORCH_CHECK(
        gemmType == torch::kFloat32 || gemmType == torch::kBFloat16, "projectedCrossEntropy: fp32 or bf16 products");
    TORCH_CHECK(hidden.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32
            && bias.scalar_type() == torch::kFloat32,
        "projectedCrossEntropy: fp32 hidden rows and weights");
    return ProjectedCrossEntropyFunction::apply(hidden, weight, bias, target, gemmType == torch::kBFloat16);
}

} // namespace chatbench
