#include "bench_probes.h"

#include "chatbench/bench.h"

#include "chatbench/devices.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdio>
#include <ctime>
#include <dlfcn.h>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#define CHATBENCH_HAVE_CUDART 1
#endif

namespace chatbench {

MemoryProbe::MemoryProbe(const torch::Device& device)
    : m_device(device)
{
}

void MemoryProbe::reset()
{
    if (m_device.is_cuda())
        c10::cuda::CUDACachingAllocator::resetPeakStats(m_device.index());
    else
        std::ofstream("/proc/self/clear_refs") << "5"; // resets VmHWM to the current RSS
}

int64_t MemoryProbe::peak() const
{
    if (m_device.is_cuda())
        return c10::cuda::CUDACachingAllocator::getDeviceStats(m_device.index())
            .allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
            .peak;
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmHWM:", 0) == 0)
            return std::stoll(line.substr(6)) * 1024;
    return 0;
}

std::string nvmlUuid(const unsigned char bytes[16])
{
    char out[64];
    std::snprintf(out, sizeof out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", bytes[0],
        bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10], bytes[11],
        bytes[12], bytes[13], bytes[14], bytes[15]);
    return out;
}

EnergyMeter::EnergyMeter(const torch::Device& dev)
{
    if (dev.is_cuda()) {
#ifdef CHATBENCH_HAVE_CUDART
        // NVML numbers every GPU of the machine; CUDA only those CUDA_VISIBLE_DEVICES lets through,
        // in its own order. The device's UUID names the same GPU to both.
        cudaDeviceProp prop {};
        if (cudaGetDeviceProperties(&prop, dev.index()) != cudaSuccess)
            return;
        const std::string uuid = nvmlUuid(reinterpret_cast<const unsigned char*>(prop.uuid.bytes));
        m_nvml = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!m_nvml)
            return;
        using InitFn = int (*)();
        using HandleFn = int (*)(const char*, void**);
        auto init = reinterpret_cast<InitFn>(::dlsym(m_nvml, "nvmlInit_v2"));
        auto handle = reinterpret_cast<HandleFn>(::dlsym(m_nvml, "nvmlDeviceGetHandleByUUID"));
        m_shutdown = reinterpret_cast<InitFn>(::dlsym(m_nvml, "nvmlShutdown"));
        m_energy = reinterpret_cast<EnergyFn>(::dlsym(m_nvml, "nvmlDeviceGetTotalEnergyConsumption"));
        if (!init || !handle || !m_energy || init() != 0)
            return;
        m_initialised = true;
        unsigned long long mj = 0;
        if (handle(uuid.c_str(), &m_device) == 0 && m_energy(m_device, &mj) == 0)
            m_source = "nvml";
#endif
    } else if (std::ifstream("/sys/class/powercap/intel-rapl:0/energy_uj")) {
        m_source = "rapl";
        std::ifstream("/sys/class/powercap/intel-rapl:0/max_energy_range_uj") >> m_range;
    }
}

EnergyMeter::~EnergyMeter()
{
    if (m_initialised && m_shutdown)
        m_shutdown(); // NVML counts its users; each init is matched before the library goes
    if (m_nvml)
        ::dlclose(m_nvml);
}

double EnergyMeter::joules() const
{
    if (m_source == "nvml") {
        unsigned long long mj = 0;
        return m_energy(m_device, &mj) == 0 ? static_cast<double>(mj) / 1e3 : -1;
    }
    if (m_source == "rapl") {
        double uj = -1;
        std::ifstream("/sys/class/powercap/intel-rapl:0/energy_uj") >> uj;
        return uj < 0 ? -1 : uj / 1e6;
    }
    return -1;
}

double EnergyMeter::between(double before, double after) const
{
    if (before < 0 || after < 0)
        return -1;
    double d = after - before;
    if (d < 0 && m_range > 0)
        d += m_range / 1e6; // the RAPL counter wrapped
    return d;
}

std::string isoNow()
{
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

MachineInfo machineInfo()
{
    MachineInfo m;
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    static const std::set<std::string> wanted = { "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
        "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8" };
    while (std::getline(in, line)) {
        if (line.rfind("flags", 0) == 0) {
            std::istringstream ss(line.substr(line.find(':') + 1));
            std::string f;
            while (ss >> f)
                if (wanted.count(f))
                    m.cpuFlags.push_back(f);
            break;
        }
    }
    m.cores = static_cast<int>(std::thread::hardware_concurrency());
    const auto devices = listDevices(); // cpu first: its name is the CPU model
    m.cpuModel = devices.front().name;
    m.memoryBytes = devices.front().memoryBytes;
    if (devices.size() > 1)
        m.gpuName = devices[1].name;
    const EnvironmentInfo env = environmentInfo();
    m.torch = env.torchVersion;
    m.cuda = env.cudaVersion;
    m.cudnn = env.cudnnVersion;
    m.onednn = env.onednnVersion;
    if (env.cudaAvailable)
        m.gpuDriver = env.driverVersion;
    return m;
}

} // namespace chatbench
