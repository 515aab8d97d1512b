#include "torchutil.h"

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

} // namespace chatbench
