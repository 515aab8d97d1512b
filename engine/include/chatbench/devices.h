#pragma once
// Compute devices and what each can do.
//
//   for (const auto& d : chatbench::listDevices())           // "cpu" first, then "cuda:0", ...
//       std::cout << d.id << " " << d.name << "\n";
//   auto r = chatbench::resolveDevice("cuda:0", chatbench::Precision::BF16);
//   if (!r.note.empty()) std::cout << r.note << "\n";      // e.g. "no CUDA device; using cpu"

#include "chatbench/config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace chatbench {

struct PrecisionSupport {
    Precision precision = Precision::FP32;
    bool supported = false;
    std::string reason; // why not, when unsupported; bf16 on the CPU: also whether in hardware or emulated
};

struct DeviceInfo {
    std::string id; // "cpu" or "cuda:N"
    std::string name; // CPU model or GPU name
    int64_t memoryBytes = 0; // RAM or GPU memory
    int threads = 0; // CPU: intra-op threads in use
    std::vector<PrecisionSupport> precisions; // fp32, bf16, fp16
};

// CPU first, then each CUDA device. Precision support is probed once (a tiny LSTM step). With
// `timeBf16` (doctor, the window) the CPU's bf16 reason also says when its bf16 products are
// slower than fp32 ones, timed once (~40 ms), which starting a run or a chat does not wait for.
std::vector<DeviceInfo> listDevices(bool timeBf16 = false);

struct ResolvedDevice {
    std::string device; // what will actually be used
    Precision precision = Precision::FP32;
    std::string note; // non-empty when a fallback happened: what and why
};
// Falls back to cpu / fp32 with a note instead of failing. Throws Error for a malformed name.
ResolvedDevice resolveDevice(const std::string& device, Precision precision);

struct EnvironmentInfo {
    std::string torchVersion;
    bool cudaBuilt = false; // libtorch_cuda is linked in
    bool cudaAvailable = false; // a CUDA device and driver are usable
    int cudaDeviceCount = 0;
    std::string cudaVersion; // CUDA version torch was built with
    std::string cudnnVersion;
    std::string driverVersion; // CUDA driver, when one is installed
    std::string onednnVersion;
    int threads = 0; // intra-op threads
    int interopThreads = 0;
    std::string cublasWorkspaceConfig; // the environment's CUBLAS_WORKSPACE_CONFIG, empty when unset
    bool tf32Matmul = false; // TF32 allowed for cuBLAS matmuls (process setting)
    bool tf32Lstm = false; // TF32 allowed for cuDNN's LSTM (torch's default: on)
    std::string buildConfig; // torch's own configuration summary
};
EnvironmentInfo environmentInfo();

// Sets the CPU intra-op thread count (0 leaves the default), then requireThreadsStart for it.
void setThreads(int threads);

// Throws an Error unless the system lets `threads` - 1 worker threads start with the stack
// OMP_STACKSIZE asks for. OpenMP starts its team at the first parallel region, and when the system
// refuses (a process limit, `ulimit -u`; a huge OMP_STACKSIZE) libgomp ends the process with its
// own one line; this says it first, in words, with what to change.
void requireThreadsStart(int threads);

// Process-wide settings that must be in place before CUDA starts; the first line of every main().
// Sets CUBLAS_WORKSPACE_CONFIG=:4096:8 unless the user set it: cuBLAS reads it once, when CUDA
// initialises, and deterministic training and benchmarks need it (without it torch warns on
// every matmul and cuBLAS may pick non-deterministic reductions). With glibc, also keeps freed
// buffers of up to 32 MiB in the heap (unless GLIBC_TUNABLES or MALLOC_*_ set malloc's own), so a
// training step does not fault its buffers in afresh every step.
void prepareProcess();

} // namespace chatbench
