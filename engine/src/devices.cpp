#include "chatbench/devices.h"

#include "chatbench/error.h"
#include "cpugemm.h"
#include "torchutil.h"

#include <ATen/Config.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <pthread.h>
#include <sstream>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#define CHATBENCH_HAVE_CUDART 1
#endif

namespace chatbench {

namespace {

#ifdef __GLIBC__
// prepareProcess(): buffers up to glibc's largest mmap threshold (32 MiB on 64-bit) come from the
// heap, and the heap is trimmed only when 256 MiB at its top are free.
constexpr int kMmapThresholdBytes = 32 << 20;
constexpr int kTrimThresholdBytes = 256 << 20;
#endif

std::string cpuModel()
{
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("model name", 0) == 0) {
            const auto pos = line.find(':');
            return pos == std::string::npos ? line : line.substr(pos + 2);
        }
    return "CPU";
}

int64_t ramBytes()
{
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long size = ::sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? static_cast<int64_t>(pages) * size : 0;
}

const char* kBf16Cpus = "bf16 in hardware needs AVX512-BF16 or AMX-BF16 (Intel Xeon Cooper Lake, Sapphire Rapids or "
                        "later; AMD Zen 4 or later)";

// "; but its products ran at 0.68× fp32's here …" when a bf16 product is slower than an fp32 one
// on this CPU (seen on a 2-core Xeon with AVX512-BF16 and no AMX: bf16 training there was 1.5×
// slower than fp32); empty when bf16 is the faster. Best of five 512³ products each, ~40 ms.
std::string bf16Speed()
{
    torch::NoGradGuard noGrad;
    // The engine's own bf16 product (gemmBf16: the path named above) against ATen's fp32 one.
    auto best = [](torch::ScalarType type) {
        const auto a = torch::randn({ 512, 512 }).to(type), b = torch::randn({ 512, 512 }).to(type);
        auto c = torch::empty({ 512, 512 });
        double fastest = 1e30;
        for (int i = 0; i < 6; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            if (type == torch::kBFloat16)
                gemmBf16(a, false, b, false, 0.0f, c);
            else
                at::mm_out(c, a, b);
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (i > 0) // the first warms up
                fastest = std::min(fastest, s);
        }
        return fastest;
    };
    const double ratio = best(torch::kFloat32) / best(torch::kBFloat16);
    if (!(ratio < 1.0))
        return {};
    std::ostringstream o;
    o.precision(2);
    o << std::fixed << "; but its products ran at " << ratio
      << "× fp32's on this CPU (512³, best of 5): fp32 trains faster here";
    return o.str();
}

// Runs one forward + backward of a tiny LSTM in the given precision; the exception text is the
// reason when the pair does not work. For bf16 on the CPU the reason also says whether the
// instructions are there (supported without them means emulated: slower than fp32).
PrecisionSupport probe(const torch::Device& device, Precision p)
{
    PrecisionSupport s { p, false, {} };
    if (device.is_cpu() && p == Precision::FP16) {
        s.reason = "fp16 needs a CUDA GPU (on CPU use bf16)";
        return s;
    }
    try {
        torch::manual_seed(0);
        torch::nn::LSTM lstm(torch::nn::LSTMOptions(8, 8).batch_first(true));
        lstm->to(device);
        auto x = torch::randn({ 2, 3, 8 }, torch::TensorOptions().device(device));
        AutocastScope autocast(device, p);
        auto out = std::get<0>(lstm->forward(x));
        out.sum().backward();
        s.supported = true;
    } catch (const std::exception& e) {
        std::string what = e.what();
        const auto nl = what.find('\n');
        s.reason = what.substr(0, nl);
    }
    if (device.is_cpu() && p == Precision::BF16) {
        const auto flags = cpuBf16Flags();
        std::string have;
        for (const auto& f : flags)
            have += (have.empty() ? "" : ", ") + f;
        if (s.supported)
            s.reason = flags.empty() ? std::string("emulated, slower than fp32: ") + kBf16Cpus
                                     : "in hardware (" + have + "); " + bf16GemmDescription();
        else
            s.reason += std::string(" — ") + kBf16Cpus + (flags.empty() ? "; this CPU has neither" : "");
    }
    return s;
}

} // namespace

AutocastScope::AutocastScope(const torch::Device& device, Precision p)
    : m_type(device.type())
{
    if (p == Precision::FP32)
        return;
    m_active = true;
    m_wasEnabled = at::autocast::is_autocast_enabled(m_type);
    m_oldType = at::autocast::get_autocast_dtype(m_type);
    at::autocast::set_autocast_enabled(m_type, true);
    at::autocast::set_autocast_dtype(m_type, scalarType(p));
}

AutocastScope::~AutocastScope()
{
    if (!m_active)
        return;
    at::autocast::set_autocast_enabled(m_type, m_wasEnabled);
    at::autocast::set_autocast_dtype(m_type, m_oldType);
    at::autocast::clear_cache();
}

c10::ScalarType scalarType(Precision p)
{
    switch (p) {
    case Precision::BF16: return torch::kBFloat16;
    case Precision::FP16: return torch::kHalf;
    default: return torch::kFloat32;
    }
}

torch::Device parseDevice(const std::string& name)
{
    if (name == "cpu")
        return torch::Device(torch::kCPU);
    if (name == "cuda")
        return torch::Device(torch::kCUDA, 0);
    if (name.rfind("cuda:", 0) == 0) {
        const std::string idx = name.substr(5);
        if (!idx.empty() && idx.size() < 4 && idx.find_first_not_of("0123456789") == std::string::npos)
            return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(std::stoi(idx)));
    }
    throw Error("unknown device '" + name + "' (use cpu, cuda or cuda:N)");
}

std::vector<DeviceInfo> listDevices(bool timeBf16)
{
    static std::mutex mutex;
    static std::map<std::string, std::vector<PrecisionSupport>> cache;
    std::lock_guard lock(mutex);
    auto probed = [&](const std::string& id, const torch::Device& dev) {
        auto it = cache.find(id);
        if (it == cache.end()) {
            std::vector<PrecisionSupport> v;
            for (auto p : { Precision::FP32, Precision::BF16, Precision::FP16 })
                v.push_back(probe(dev, p));
            it = cache.emplace(id, std::move(v)).first;
        }
        return it->second;
    };

    std::vector<DeviceInfo> out;
    DeviceInfo cpu;
    cpu.id = "cpu";
    cpu.name = cpuModel();
    cpu.memoryBytes = ramBytes();
    cpu.threads = torch::get_num_threads();
    cpu.precisions = probed("cpu", torch::Device(torch::kCPU));
    if (timeBf16) {
        static const std::string speed = cpuBf16Flags().empty() ? std::string() : bf16Speed();
        for (auto& p : cpu.precisions)
            if (p.precision == Precision::BF16 && p.supported)
                p.reason += speed;
    }
    out.push_back(cpu);

    const int n = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
    for (int i = 0; i < n; ++i) {
        DeviceInfo d;
        d.id = "cuda:" + std::to_string(i);
        d.name = "CUDA device " + std::to_string(i);
#ifdef CHATBENCH_HAVE_CUDART
        cudaDeviceProp prop {};
        if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
            d.name = prop.name;
            d.memoryBytes = static_cast<int64_t>(prop.totalGlobalMem);
        }
#endif
        d.precisions = probed(d.id, torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(i)));
        out.push_back(d);
    }
    return out;
}

ResolvedDevice resolveDevice(const std::string& name, Precision precision)
{
    const torch::Device dev = parseDevice(name);
    ResolvedDevice r { dev.is_cpu() ? "cpu" : "cuda:" + std::to_string(dev.index()), precision, {} };
    if (dev.is_cuda()) {
        const int n = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
        if (n == 0) {
            r.device = "cpu";
            r.note = "no CUDA device is available ("
                + std::string(torch::cuda::is_available() ? "" : "CUDA reports none") + "); using cpu";
        } else if (dev.index() >= n) {
            r.device = "cpu";
            r.note = name + " does not exist (" + std::to_string(n) + " CUDA device(s)); using cpu";
        }
    }
    // fp32 runs everywhere: only another precision is probed (the probe trains a tiny LSTM in
    // every precision, bf16's product micro-kernel included, which is work and memory an fp32 run
    // does not need).
    for (const auto& d : r.precision == Precision::FP32 ? std::vector<DeviceInfo> {} : listDevices()) {
        if (d.id != r.device)
            continue;
        for (const auto& s : d.precisions)
            if (s.precision == r.precision && !s.supported) {
                r.note += std::string(r.note.empty() ? "" : "; ") + precisionName(r.precision) + " is not supported on "
                    + r.device + " (" + s.reason + "); using fp32";
                r.precision = Precision::FP32;
            }
    }
    return r;
}

EnvironmentInfo environmentInfo()
{
    EnvironmentInfo e;
    e.torchVersion = TORCH_VERSION;
    const auto& hooks = at::detail::getCUDAHooks();
    e.cudaBuilt = hooks.isBuilt();
    e.cudaAvailable = torch::cuda::is_available();
    e.cudaDeviceCount = e.cudaAvailable ? static_cast<int>(torch::cuda::device_count()) : 0;
    e.buildConfig = at::show_config();
    auto grab = [&](const std::string& key) {
        // show_config() lines look like "  - CUDA Runtime 13.0" / "  - CuDNN 91.0" / "  - MKL-DNN v3.7.1 ..."
        const auto pos = e.buildConfig.find(key);
        if (pos == std::string::npos)
            return std::string();
        const auto end = e.buildConfig.find('\n', pos);
        return e.buildConfig.substr(pos + key.size(), end - pos - key.size());
    };
    auto dotted = [](long v, long major, long minor) {
        return std::to_string(v / major) + "." + std::to_string(v % major / minor) + "." + std::to_string(v % minor);
    };
    if (e.cudaBuilt) {
        try {
            e.cudaVersion = dotted(hooks.versionCUDART(), 1000, 10);
            e.cudnnVersion = dotted(hooks.versionCuDNN(), 10000, 100);
        } catch (const std::exception&) {
            // versions stay empty: doctor prints "unknown"
        }
    }
    e.onednnVersion = grab("Intel(R) MKL-DNN ");
    if (e.onednnVersion.empty())
        e.onednnVersion = grab("oneDNN ");
#ifdef CHATBENCH_HAVE_CUDART
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
        e.driverVersion = std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
#endif
    e.threads = torch::get_num_threads();
    e.interopThreads = torch::get_num_interop_threads();
    if (const char* ws = std::getenv("CUBLAS_WORKSPACE_CONFIG"))
        e.cublasWorkspaceConfig = ws;
    e.tf32Matmul = at::globalContext().allowTF32CuBLAS();
    e.tf32Lstm = at::globalContext().allowTF32CuDNN(at::Float32Op::RNN);
    return e;
}

void prepareProcess()
{
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
#ifdef __GLIBC__
    // A training step allocates and frees the same few-MB buffers every step. With glibc's
    // defaults they are unmapped (or the heap trimmed) on free and faulted in, zeroed, on the next
    // allocation: about a thousand page faults a step at the seed sizes. Keep them in the heap
    // unless the user tuned malloc themselves.
    const char* tunables = std::getenv("GLIBC_TUNABLES");
    const bool userTuned = (tunables && std::strstr(tunables, "glibc.malloc.")) || std::getenv("MALLOC_MMAP_THRESHOLD_")
        || std::getenv("MALLOC_TRIM_THRESHOLD_");
    if (!userTuned) {
        ::mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
        ::mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes);
    }
#endif
}

void setThreads(int threads)
{
    if (threads > 0)
        torch::set_num_threads(threads);
    requireThreadsStart(torch::get_num_threads());
}

namespace {

// OMP_STACKSIZE as libgomp reads it: a size with an optional B, K, M or G (K when there is none);
// 0 when unset or not a size (libgomp then says so and keeps the default, as pthreads' here).
size_t ompStackBytes()
{
    const char* text = std::getenv("OMP_STACKSIZE");
    if (!text)
        return 0;
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(text, &end, 10);
    if (end == text || errno == ERANGE)
        return 0;
    while (*end == ' ' || *end == '\t')
        ++end;
    int shift = 10;
    switch (std::tolower(static_cast<unsigned char>(*end))) {
    case '\0': break;
    case 'b': shift = 0; break;
    case 'k': shift = 10; break;
    case 'm': shift = 20; break;
    case 'g': shift = 30; break;
    default: return 0; // libgomp takes no other suffix (T included)
    }
    if (*end != '\0')
        ++end;
    while (*end == ' ' || *end == '\t')
        ++end;
    if (*end != '\0' || n > (std::numeric_limits<size_t>::max() >> shift))
        return 0;
    return static_cast<size_t>(n) << shift;
}

// ", or the memory limit (ulimit -v, N MiB)" where one is set: a thread's stack counts against it.
std::string memoryLimitNote()
{
    struct rlimit limit { };
    if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
        return {};
    return " or the memory limit (ulimit -v, now " + std::to_string(limit.rlim_cur >> 20) + " MiB)";
}

} // namespace

void requireThreadsStart(int threads)
{
    static std::mutex m;
    static int checked = 1; // thread counts up to this one have started
    const std::lock_guard lock(m);
    if (threads <= checked)
        return;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    // Below the system's minimum libgomp refuses the size (with a message of its own) and keeps
    // the default stack: so does this check.
    const size_t askedBytes = ompStackBytes(), stack = askedBytes >= size_t(PTHREAD_STACK_MIN) ? askedBytes : 0;
    if (stack > 0)
        pthread_attr_setstacksize(&attr, stack);
    std::vector<pthread_t> started;
    int err = 0;
    for (int i = 1; i < threads && err == 0; ++i) {
        pthread_t t;
        err = pthread_create(
            &t, &attr, [](void*) -> void* { return nullptr; }, nullptr);
        if (err == 0)
            started.push_back(t);
    }
    pthread_attr_destroy(&attr);
    for (pthread_t t : started)
        pthread_join(t, nullptr);
    if (err != 0) {
        const char* asked = std::getenv("OMP_STACKSIZE");
        throw Error("the system would not start " + std::to_string(threads - 1) + " worker thread(s) for "
            + std::to_string(threads) + " CPU threads (" + std::strerror(err) + ", " + std::to_string(started.size())
            + " started"
            + (stack > 0 ? "; OMP_STACKSIZE=" + printable(asked) + " asks that much stack for each" : std::string())
            + "): run with OMP_NUM_THREADS=1"
            + (stack == 0           ? ""
                    : err == EINVAL ? ", or a larger OMP_STACKSIZE (this one leaves a thread no room for its own data)"
                                    : ", or a smaller OMP_STACKSIZE")
            + ", or raise the limit on processes (ulimit -u)" + memoryLimitNote());
    }
    checked = threads;
}

} // namespace chatbench
