#pragma once
// What the benchmark measures besides time (private: Torch types): peak memory, energy, the
// machine, and the report's timestamp.

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace chatbench {

// Peak memory over an interval: the process' peak RSS on the CPU (libraries included), the
// caching allocator's peak on a CUDA device.
class MemoryProbe {
public:
    explicit MemoryProbe(const torch::Device& device);
    void reset(); // starts the interval
    int64_t peak() const; // bytes since reset()

private:
    torch::Device m_device;
};

// NVML's name for a GPU ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx") from the 16 bytes of the
// UUID CUDA reports for it (cudaDeviceProp::uuid).
std::string nvmlUuid(const unsigned char bytes[16]);

// Cumulative energy counters: RAPL (package 0) on the CPU, NVML on a GPU (found by UUID, so the
// right one under CUDA_VISIBLE_DEVICES). joules() < 0: none.
class EnergyMeter {
public:
    explicit EnergyMeter(const torch::Device& device);
    ~EnergyMeter();
    EnergyMeter(const EnergyMeter&) = delete;
    EnergyMeter& operator=(const EnergyMeter&) = delete;

    const std::string& source() const { return m_source; } // "rapl", "nvml" or "not available"
    double joules() const;
    // Joules between two readings, across one RAPL wrap-around; -1 when either is missing.
    double between(double before, double after) const;

private:
    using EnergyFn = int (*)(void*, unsigned long long*);
    void* m_nvml = nullptr;
    bool m_initialised = false;
    int (*m_shutdown)() = nullptr;
    void* m_device = nullptr;
    EnergyFn m_energy = nullptr;
    std::string m_source = "not available";
    double m_range = 0;
};

// Now, as ISO 8601 UTC ("2026-11-30T08:40:00Z").
std::string isoNow();

} // namespace chatbench
