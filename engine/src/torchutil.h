#pragma once
// LibTorch helpers shared by the engine's sources (private: includes Torch).

#include "chatbench/config.h"

#include <torch/torch.h>

namespace chatbench {

// "cpu", "cuda", "cuda:N" → torch::Device. Throws Error for anything else.
torch::Device parseDevice(const std::string& name);
c10::ScalarType scalarType(Precision p);

// Turns autocast on for one device type and precision for the scope's lifetime (fp32: nothing).
class AutocastScope {
public:
    AutocastScope(const torch::Device& device, Precision p);
    ~AutocastScope();
    AutocastScope(const AutocastScope&) = delete;
    AutocastScope& operator=(const AutocastScope&) = delete;

private:
    c10::DeviceType m_type;
    bool m_active = false;
    bool m_wasEnabled = false;
    c10::ScalarType m_oldType = c10::ScalarType::Float;
};

// Deterministic algorithms on or off for this process (cuDNN, cuBLAS workspace included).
void setDeterminism(bool deterministic);
// TF32 tensor-core maths for CUDA fp32 work, on or off for this process, set for cuBLAS (matmuls)
// and cuDNN (the LSTM) alike: torch's defaults differ (cuBLAS off, cuDNN on). (oneDNN's TF32 is
// for Intel GPUs; this torch warns when it is set, so it is left at its default, off.)
void setTf32(bool on);
// Puts back the TF32 switches (cuBLAS and cuDNN's LSTM) it found when it ends; given a value, sets
// both to it (setTf32) meanwhile.
class Tf32Scope {
public:
    Tf32Scope();
    explicit Tf32Scope(bool on);
    ~Tf32Scope();
    Tf32Scope(const Tf32Scope&) = delete;
    Tf32Scope& operator=(const Tf32Scope&) = delete;

private:
    bool m_cublas;
    bool m_cudnn;
};

// Frees the CUDA caching allocator's unused blocks after a failure (nothing for other devices).
// After a sticky CUDA error (an illegal address, a device assert) even that throws; nothing may
// leave a handler that keeps the rest of the work, so this swallows it.
void releaseCachedMemory(const torch::Device& dev) noexcept;
// An exception's first line (c10::Error appends a C++ backtrace to its message).
std::string firstLine(const std::string& what);

// A tensor's values as a flat float vector (copied to the CPU).
std::vector<float> toVector(const torch::Tensor& t);
// Largest absolute element-wise difference.
double maxAbsDiff(const torch::Tensor& a, const torch::Tensor& b);

} // namespace chatbench
