#include "torchutil.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <cmath>
#include <cstdlib>

namespace chatbench {

std::vector<float> toVector(const torch::Tensor& t)
{
    auto flat = t.detach().to(torch::kCPU, torch::kFloat32).contiguous().reshape({ -1 });
    return std::vector<float>(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
}

void releaseCachedMemory(const torch::Device& dev) noexcept
{
    if (!dev.is_cuda())
        return;
    try {
        c10::cuda::CUDACachingAllocator::emptyCache();
    } catch (...) {
        // the device is unusable; what runs on it next fails and says so
    }
}

std::string firstLine(const std::string& what)
{
    return what.substr(0, what.find('\n'));
}

double maxAbsDiff(const torch::Tensor& a, const torch::Tensor& b)
{
    if (a.numel() == 0)
        return 0.0;
    // Two fp32 CPU tensors of one shape (every check of a traced reply): one pass in double, where
    // the tensor expression below allocates and walks five tensors (a traced reply makes eight
    // such comparisons). A NaN is the answer, as torch's max gives it.
    if (a.device().is_cpu() && b.device().is_cpu() && a.scalar_type() == torch::kFloat32
        && b.scalar_type() == torch::kFloat32 && a.sizes() == b.sizes() && a.is_contiguous() && b.is_contiguous()) {
        const float* x = a.data_ptr<float>();
        const float* y = b.data_ptr<float>();
        double most = 0;
        for (int64_t k = 0, n = a.numel(); k < n; ++k) {
            const double d = std::abs(static_cast<double>(x[k]) - static_cast<double>(y[k]));
            if (std::isnan(d))
                return d;
            most = d > most ? d : most;
        }
        return most;
    }
    return (a.to(torch::kFloat64) - b.to(a.device(), torch::kFloat64)).abs().max().item<double>();
}

void setTf32(bool on)
{
    auto& ctx = at::globalContext();
    ctx.setAllowTF32CuBLAS(on);
    ctx.setAllowTF32CuDNN(on);
}

Tf32Scope::Tf32Scope()
    : m_cublas(at::globalContext().allowTF32CuBLAS())
    , m_cudnn(at::globalContext().allowTF32CuDNN(at::Float32Op::RNN))
{
}

Tf32Scope::Tf32Scope(bool on)
    : Tf32Scope()
{
    setTf32(on);
}

Tf32Scope::~Tf32Scope()
{
    auto& ctx = at::globalContext();
    ctx.setAllowTF32CuBLAS(m_cublas);
    ctx.setAllowTF32CuDNN(m_cudnn);
}

void setDeterminism(bool deterministic)
{
    // cuBLAS also needs CUBLAS_WORKSPACE_CONFIG, read once when CUDA starts: prepareProcess() sets
    // it first thing in main(), before anything can start CUDA.
    at::globalContext().setDeterministicAlgorithms(deterministic, /*warn_only=*/true);
    // Deterministic mode also fills every new uninitialised tensor with NaN, a debugging aid that
    // changes no result of a correct kernel; on the CPU it was 9% of a seed-preset step (13k fills
    // per epoch), most of what determinism cost. Results stay bit-for-bit repeatable without it.
    at::globalContext().setDeterministicFillUninitializedMemory(false);
    at::globalContext().setDeterministicCuDNN(deterministic);
    at::globalContext().setBenchmarkCuDNN(false);
}

} // namespace chatbench
