#include "torchutil.h"

#include <cstdlib>

namespace chatbench {

std::vector<float> toVector(const torch::Tensor& t)
{
    auto flat = t.detach().to(torch::kCPU, torch::kFloat32).contiguous().reshape({ -1 });
    return std::vector<float>(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
}

double maxAbsDiff(const torch::Tensor& a, const torch::Tensor& b)
{
    if (a.numel() == 0)
        return 0.0;
    return (a.to(torch::kFloat64) - b.to(a.device(), torch::kFloat64)).abs().max().item<double>();
}

void setDeterminism(bool deterministic)
{
    if (deterministic) // cuBLAS needs a fixed workspace to be deterministic; it reads this when CUDA starts
        ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(deterministic, /*warn_only=*/true);
    // Deterministic mode also fills every new uninitialised tensor with NaN, a debugging aid that
    // changes no result of a correct kernel; on the CPU it was 9% of a seed-preset step (13k fills
    // per epoch), most of what determinism cost. Results stay bit-for-bit repeatable without it.
    at::globalContext().setDeterministicFillUninitializedMemory(false);
    at::globalContext().setDeterministicCuDNN(deterministic);
    at::globalContext().setBenchmarkCuDNN(false);
}

} // namespace chatbench
