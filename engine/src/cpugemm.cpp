#include "cpugemm.h"

#include "kernels.h"

#include <ATen/native/CPUBlas.h>

#include <dlfcn.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <string>

namespace chatbench {

namespace {

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

// MKL's cblas_gemm_bf16bf16f32 (LP64): null where this LibTorch has none.
using GemmBf16 = void (*)(int layout, int transA, int transB, int m, int n, int k, float alpha, const uint16_t* a,
    int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc);

GemmBf16 mklGemmBf16()
{
    static const auto fn = reinterpret_cast<GemmBf16>(::dlsym(RTLD_DEFAULT, "cblas_gemm_bf16bf16f32"));
    return fn;
}

// A 2-D operand as MKL wants it: unit stride along one dimension. Returns the tensor to read
// (contiguous when neither stride is 1), whether it is stored transposed, and its leading dimension.
struct Operand {
    torch::Tensor t;
    bool transposed;
    int ld;
};

Operand operand(const torch::Tensor& x, bool trans)
{
    if (x.stride(1) == 1 && x.stride(0) >= std::max<int64_t>(1, x.size(1)))
        return { x, trans, static_cast<int>(x.stride(0)) };
    if (x.stride(0) == 1 && x.stride(1) >= std::max<int64_t>(1, x.size(0))) // a transposed view
        return { x.t(), !trans, static_cast<int>(x.stride(1)) };
    if (x.size(0) == 1 && x.stride(1) == 1) // one row: any stride(0) will do
        return { x, trans, static_cast<int>(std::max<int64_t>(1, x.size(1))) };
    auto c = x.contiguous();
    return { c, trans, static_cast<int>(std::max<int64_t>(1, c.size(1))) };
}

} // namespace

RecurrentProduct::RecurrentProduct(const torch::Tensor& w, bool transposed, int64_t M)
    : m_w(w.contiguous())
    , m_transposed(transposed)
    , m_m(static_cast<int>(M))
    , m_n(static_cast<int>(transposed ? w.size(0) : w.size(1)))
    , m_k(static_cast<int>(transposed ? w.size(1) : w.size(0)))
{
    const PackedGemm& mkl = PackedGemm::get();
    constexpr int64_t kMax = std::numeric_limits<int>::max(); // MKL's LP64 interface
    if (!mkl.pack || M == 0 || m_w.numel() == 0 || M > kMax || m_w.numel() > kMax)
        return;
    // Column-major, as MKL sees it: cᵀ (N, M) += op(w)ᵀ (N, K) · aᵀ (K, M).
    const int ld = m_transposed ? m_k : m_n;
    const float one = 1.0f;
    const size_t bytes = mkl.getSize("A", &m_n, &m_m, &m_k);
    if (bytes == 0)
        return;
    m_packed = torch::empty({ static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float)) }, m_w.options());
    mkl.pack(
        "A", m_transposed ? "T" : "N", &m_n, &m_m, &m_k, &one, m_w.data_ptr<float>(), &ld, m_packed.data_ptr<float>());
}

void RecurrentProduct::accumulate(torch::Tensor& c, const torch::Tensor& a) const
{
    if (!m_packed.defined()) {
        c.addmm_(a, m_transposed ? m_w.t() : m_w);
        return;
    }
    TORCH_CHECK(a.is_contiguous() && c.is_contiguous() && a.scalar_type() == torch::kFloat32
            && c.scalar_type() == torch::kFloat32 && a.size(0) <= m_m && a.size(1) == m_k && c.size(0) == a.size(0)
            && c.size(1) == m_n,
        "RecurrentProduct: contiguous fp32 (rows ≤ M, K) into (rows, N) as packed");
    const int rows = static_cast<int>(a.size(0));
    if (rows == 0)
        return;
    // The packed weight is op(w)ᵀ (N, K) alone: any number of rows up to M uses it.
    const float one = 1.0f;
    PackedGemm::get().compute("P", "N", &m_n, &rows, &m_k, m_packed.data_ptr<float>(), &m_n, a.data_ptr<float>(), &m_k,
        &one, c.data_ptr<float>(), &m_n);
}

bool mklBf16Gemm()
{
    return mklGemmBf16() != nullptr;
}

std::vector<std::string> cpuBf16Flags()
{
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("flags", 0) == 0) {
            std::vector<std::string> out;
            std::istringstream words(line.substr(line.find(':') + 1));
            for (std::string w; words >> w;)
                if (w == "avx512_bf16" || w == "amx_bf16")
                    out.push_back(w);
            return out;
        }
    return {};
}

bool cpuIsIntel()
{
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("vendor_id", 0) == 0)
            return line.find("GenuineIntel") != std::string::npos;
    return false;
}

Bf16Gemm bf16GemmPath()
{
    static const Bf16Gemm path = [] {
        const auto flags = cpuBf16Flags();
        const bool avx512Bf16 = std::find(flags.begin(), flags.end(), "avx512_bf16") != flags.end();
        if (!cpuIsIntel() && avx512Bf16 && at::globalContext().userEnabledMkldnn())
            return Bf16Gemm::OneDnn;
        return mklGemmBf16() ? Bf16Gemm::Mkl : Bf16Gemm::Fp32;
    }();
    return path;
}

std::string bf16GemmDescription()
{
    switch (bf16GemmPath()) {
    case Bf16Gemm::Mkl:
        return std::string("products through MKL, summed in fp32")
            + (bf16MicroKernel() ? " (the recurrent ones and the output projection's forward through oneDNN's "
                                   "micro-kernel on AMX tiles)"
                                 : "");
    case Bf16Gemm::OneDnn:
        return std::string("products through oneDNN, summed in fp32 and rounded to bf16")
            + (bf16MicroKernel() ? " (the recurrent ones and the output projection's forward through its micro-kernel, "
                                   "summed in fp32 unrounded)"
                                 : "");
    case Bf16Gemm::Fp32: return "products in fp32 from the bf16 operands";
    }
    return {};
}

void gemmBf16(const torch::Tensor& a, bool transA, const torch::Tensor& b, bool transB, float beta, torch::Tensor& c)
{
    TORCH_CHECK(a.scalar_type() == torch::kBFloat16 && b.scalar_type() == torch::kBFloat16
            && c.scalar_type() == torch::kFloat32 && a.dim() == 2 && b.dim() == 2 && c.dim() == 2,
        "gemmBf16: bf16 (2-D) operands into an fp32 result");
    const int64_t M = c.size(0), N = c.size(1), K = transA ? a.size(0) : a.size(1);
    TORCH_CHECK((transA ? a.size(1) : a.size(0)) == M && (transB ? b.size(1) : b.size(0)) == K
            && (transB ? b.size(0) : b.size(1)) == N,
        "gemmBf16: shapes do not match");
    constexpr int64_t kMax = std::numeric_limits<int>::max(); // MKL's LP64 interface
    // c's rows as MKL wants them: unit stride along a row and a leading dimension ≥ N (a single
    // row may carry any stride(0)).
    const bool rowsOk = c.stride(1) == 1 && (M == 1 || c.stride(0) >= N);
    const Bf16Gemm path = bf16GemmPath();
    if (path == Bf16Gemm::OneDnn) {
        // The (M, N) bf16 product lands in this thread's buffer (no allocation once it is large
        // enough), then is widened into c: copied, or added in one pass.
        thread_local torch::Tensor buffer;
        if (!buffer.defined())
            buffer = torch::empty({ 0 }, a.options());
        if (buffer.numel() < M * N)
            buffer.resize_({ M * N });
        auto prod = buffer.narrow(0, 0, M * N).view({ M, N });
        at::mm_out(prod, transA ? a.t() : a, transB ? b.t() : b);
        if (beta == 0.0f)
            c.copy_(prod);
        else if (rowsOk && M > 0 && N > 0)
            kernels::addBf16Into(c.data_ptr<float>(), M == 1 ? N : c.stride(0),
                reinterpret_cast<const uint16_t*>(prod.data_ptr()), M, N);
        else
            c.add_(prod);
        return;
    }
    const GemmBf16 fn = path == Bf16Gemm::Mkl ? mklGemmBf16() : nullptr;
    if (!fn || !rowsOk || M == 0 || N == 0 || std::max({ M, N, K, c.stride(0), a.numel(), b.numel() }) > kMax) {
        auto prod = at::mm(transA ? a.t().to(torch::kFloat32) : a.to(torch::kFloat32),
            transB ? b.t().to(torch::kFloat32) : b.to(torch::kFloat32));
        if (beta == 0.0f)
            c.copy_(prod);
        else
            c.add_(prod);
        return;
    }
    if (K == 0) {
        if (beta == 0.0f)
            c.zero_();
        return;
    }
    const Operand A = operand(a, transA), B = operand(b, transB);
    constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
    fn(kRowMajor, A.transposed ? kTrans : kNoTrans, B.transposed ? kTrans : kNoTrans, static_cast<int>(M),
        static_cast<int>(N), static_cast<int>(K), 1.0f, reinterpret_cast<const uint16_t*>(A.t.data_ptr()), A.ld,
        reinterpret_cast<const uint16_t*>(B.t.data_ptr()), B.ld, beta, c.data_ptr<float>(),
        static_cast<int>(M == 1 ? std::max<int64_t>(c.stride(0), N) : c.stride(0)));
}

namespace {

// Whether oneDNN's micro-kernel runs on AMX tiles here: an Intel CPU with AMX-BF16, on the MKL path.
bool amxTiles()
{
    const auto flags = cpuBf16Flags();
    return bf16GemmPath() == Bf16Gemm::Mkl && std::find(flags.begin(), flags.end(), "amx_bf16") != flags.end();
}

// The columns of op(w) as the micro-kernel takes them. On AMX a width that is not a multiple of
// 16 (one tile's columns) runs its tail off the tiles, and the whole product at a third of the
// speed (25 × 800 × 200: 17.3 µs against 5.1 µs at 208 columns, 1 core of a Sapphire Rapids
// Xeon): there the weight gets zero columns up to the next multiple and the sums land in a
// scratch block first.
int64_t paddedWidth(int64_t n)
{
    static const bool amx = amxTiles();
    return amx ? (n + 15) / 16 * 16 : n;
}

// op(w) (K, N) as bf16 in pairs along K, with zero columns up to np ≥ N: (K/2, np, 2), element
// [k / 2][n][k % 2].
torch::Tensor inPairs(const torch::Tensor& w, bool transposed, int64_t np)
{
    if (transposed && w.scalar_type() == torch::kFloat32 && w.is_contiguous()) { // one pass of the engine's
        auto pairs = torch::empty({ w.size(1) / 2, np, 2 }, w.options().dtype(torch::kBFloat16));
        kernels::bf16RowsAndPairs(
            w.data_ptr<float>(), w.size(0), w.size(1), np, nullptr, reinterpret_cast<uint16_t*>(pairs.data_ptr()));
        return pairs;
    }
    const auto wb = w.to(torch::kBFloat16).contiguous();
    torch::Tensor pairs;
    if (transposed) { // w (N, K): the pair (k, k + 1) of row n is already adjacent; move the pairs
        const int64_t n = wb.size(0), k = wb.size(1);
        pairs = wb.view(torch::kInt32).t().contiguous().view(torch::kBFloat16).view({ k / 2, n, 2 });
    } else { // w (K, N): interleave rows 2j and 2j + 1
        const int64_t k = wb.size(0), n = wb.size(1);
        pairs = wb.view({ k / 2, 2, n }).permute({ 0, 2, 1 }).contiguous();
    }
    if (np == pairs.size(1))
        return pairs;
    auto padded = torch::zeros({ pairs.size(0), np, 2 }, pairs.options());
    padded.narrow(1, 0, pairs.size(1)).copy_(pairs);
    return padded;
}

// c (m, n) += a (m, K) · B with B in pairs along K ((K/2, np, 2) bf16, np ≥ n), fp32 sums. The
// micro-kernel's context (on AMX, the tile configuration) is released after every call: anything
// else in this thread (MKL's bf16 GEMM among them) may reconfigure or release the tiles, and a
// call on a stale configuration faults (SIGILL). Releasing costs ≈ 0.3 µs a call.
void microKernel(const torch::Tensor& a, const torch::Tensor& pairs, int64_t n, torch::Tensor& c)
{
    const int64_t m = a.size(0), k = a.size(1), np = pairs.size(1);
    const auto* A = reinterpret_cast<const at::BFloat16*>(a.data_ptr());
    const auto* B = reinterpret_cast<const at::BFloat16*>(pairs.data_ptr());
    const int64_t lda = m == 1 ? k : a.stride(0), ldc = m == 1 ? n : c.stride(0);
    if (np == n) {
        at::native::cpublas::brgemm(m, n, k, lda, np, ldc, /*add_C=*/true, A, B, c.data_ptr<float>(), /*is_vnni=*/true);
    } else {
        thread_local std::vector<float> scratch; // (m, np): grows to the largest block, then stays
        if (scratch.size() < static_cast<size_t>(m * np))
            scratch.resize(static_cast<size_t>(m * np));
        at::native::cpublas::brgemm(m, np, k, lda, np, np, /*add_C=*/false, A, B, scratch.data(), /*is_vnni=*/true);
        float* out = c.data_ptr<float>();
        for (int64_t r = 0; r < m; ++r)
            kernels::addInto(out + r * ldc, scratch.data() + r * np, n);
    }
    at::native::cpublas::brgemm_release(true);
}

} // namespace

bool bf16MicroKernel()
{
    static const bool ok = [] {
        if (bf16GemmPath() != Bf16Gemm::OneDnn && !amxTiles())
            return false;
        try {
            // Small integers: every product and sum is exact in bf16 and fp32 alike. 20 columns:
            // on AMX, the padded layout too.
            const auto w = (torch::arange(6 * 20, torch::kFloat32).remainder(7) - 3).view({ 20, 6 }); // (N, K)
            const auto a = (torch::arange(3 * 6, torch::kFloat32).remainder(5) - 2).view({ 3, 6 });
            auto c = torch::ones({ 3, 20 });
            microKernel(a.to(torch::kBFloat16), inPairs(w, true, paddedWidth(20)), 20, c);
            return torch::equal(c, at::mm(a, w.t()) + 1);
        } catch (const std::exception&) {
            return false;
        }
    }();
    return ok;
}

namespace {

// The steps whose bf16 forms are current: more than one when two trainings run in one process
// (the window's training and its Compare benchmark). Lookups hold the lock only while they search,
// and take a reference to what they find, so a step that ends meanwhile frees nothing in use.
std::shared_mutex stepWeightsMutex;
std::vector<const StepBf16Weights*> stepWeights;

torch::Tensor stepForm(const torch::Tensor& w, int form)
{
    std::shared_lock lock(stepWeightsMutex);
    for (const auto* step : stepWeights)
        if (auto made = step->find(w, form); made.defined())
            return made;
    return {};
}

bool microKernelFits(int64_t k, int64_t n, int64_t numel)
{
    return bf16MicroKernel() && k % 2 == 0 && k > 0 && n > 0 && numel <= std::numeric_limits<int>::max();
}

} // namespace

StepBf16Weights::StepBf16Weights(const std::vector<torch::Tensor>& plain, const std::vector<torch::Tensor>& recurrent,
    const std::vector<torch::Tensor>& wide,
    const std::function<void(int64_t, const std::function<void(int64_t)>&)>& share)
{
    // A task per entry (its first and last entry), but one for both forms of a wide weight: the
    // bf16 copy and the layout come from one pass over it.
    std::vector<std::pair<size_t, size_t>> tasks;
    auto add = [&](const torch::Tensor& w, int form) {
        m_entries.push_back({ w, form, {} });
        tasks.emplace_back(m_entries.size() - 1, m_entries.size() - 1);
    };
    for (const auto& w : plain)
        add(w, 0);
    // Each product's form as RecurrentProductBf16 takes it: laid out for the micro-kernel (wᵀ for
    // the forward pass, w for the backward), or the bf16 copy where it does not fit.
    for (const auto& w : recurrent) {
        if (w.dim() != 2)
            continue;
        const bool forward = microKernelFits(w.size(1), w.size(0), w.numel()),
                   backward = microKernelFits(w.size(0), w.size(1), w.numel());
        if (forward)
            add(w, 1);
        if (backward)
            add(w, 2);
        if (!forward || !backward)
            add(w, 0);
    }
    for (const auto& w : wide) {
        add(w, 0);
        if (w.dim() == 2 && w.scalar_type() == torch::kFloat32 && w.is_contiguous()
            && microKernelFits(w.size(1), w.size(0), w.numel())) {
            m_entries.push_back({ w, 1, {} });
            tasks.back().second = m_entries.size() - 1;
        }
    }
    share(static_cast<int64_t>(tasks.size()), [this, &tasks](int64_t k) {
        torch::NoGradGuard noGrad; // operands, not part of any graph (each lane's thread has its own mode)
        const auto [first, last] = tasks[static_cast<size_t>(k)];
        Entry& e = m_entries[first];
        if (last != first) { // a wide weight's copy and layout
            const int64_t n = e.source.size(0), kk = e.source.size(1), np = paddedWidth(n);
            e.made = torch::empty({ n, kk }, e.source.options().dtype(torch::kBFloat16));
            Entry& pairs = m_entries[last];
            pairs.made = torch::empty({ kk / 2, np, 2 }, e.made.options());
            kernels::bf16RowsAndPairs(e.source.data_ptr<float>(), n, kk, np,
                reinterpret_cast<uint16_t*>(e.made.data_ptr()), reinterpret_cast<uint16_t*>(pairs.made.data_ptr()));
            return;
        }
        const bool transposed = e.form == 1;
        if (e.form == 0 && e.source.scalar_type() == torch::kFloat32 && e.source.is_contiguous()) {
            e.made = torch::empty_like(e.source, e.source.options().dtype(torch::kBFloat16));
            kernels::roundBf16(
                e.source.data_ptr<float>(), e.source.numel(), reinterpret_cast<uint16_t*>(e.made.data_ptr()));
            return;
        }
        e.made = e.form == 0 ? e.source.to(torch::kBFloat16)
                             : inPairs(e.source, transposed, paddedWidth(e.source.size(transposed ? 0 : 1)));
    });
    std::unique_lock lock(stepWeightsMutex);
    stepWeights.push_back(this);
}

StepBf16Weights::~StepBf16Weights()
{
    std::unique_lock lock(stepWeightsMutex);
    std::erase(stepWeights, this);
}

torch::Tensor StepBf16Weights::find(const torch::Tensor& w, int form) const
{
    for (const auto& e : m_entries)
        if (e.form == form && e.made.defined() && e.source.data_ptr() == w.data_ptr() && e.source.sizes() == w.sizes()
            && e.source.strides() == w.strides() && e.source.scalar_type() == w.scalar_type())
            return e.made;
    return {};
}

torch::Tensor bf16Weight(const torch::Tensor& w)
{
    if (auto made = stepForm(w, 0); made.defined())
        return made;
    return w.to(torch::kBFloat16);
}

RecurrentProductBf16::RecurrentProductBf16(const torch::Tensor& w, bool transposed)
    : m_transposed(transposed)
    , m_k(transposed ? w.size(1) : w.size(0))
    , m_n(transposed ? w.size(0) : w.size(1))
{
    if (microKernelFits(m_k, m_n, w.numel())) {
        m_pairs = stepForm(w, transposed ? 1 : 2);
        if (!m_pairs.defined())
            m_pairs = inPairs(w, transposed, paddedWidth(m_n));
    } else {
        m_w = bf16Weight(w);
    }
}

WideProductBf16::WideProductBf16(const torch::Tensor& w)
    : m_k(w.size(1))
    , m_width(w.size(0))
{
    if (microKernelFits(m_k, m_width, w.numel())) {
        m_pairs = stepForm(w, 1);
        if (!m_pairs.defined())
            m_pairs = inPairs(w, /*transposed=*/true, paddedWidth(m_width));
        m_width = m_pairs.size(1);
    } else {
        m_w = bf16Weight(w);
    }
}

void WideProductBf16::product(const torch::Tensor& a, const torch::Tensor& c) const
{
    TORCH_CHECK(a.scalar_type() == torch::kBFloat16 && c.scalar_type() == torch::kFloat32 && a.dim() == 2
            && c.dim() == 2 && a.size(1) == m_k && c.size(0) == a.size(0) && c.size(1) == m_width && a.stride(1) == 1
            && c.stride(1) == 1 && (a.size(0) <= 1 || (a.stride(0) >= m_k && c.stride(0) >= m_width)),
        "WideProductBf16: bf16 (rows, K) into fp32 (rows, width), each with unit stride along its rows");
    const int64_t m = a.size(0);
    if (m == 0)
        return;
    if (!m_pairs.defined()) {
        torch::Tensor out = c; // the same storage
        gemmBf16(a, false, m_w, true, 0.0f, out);
        return;
    }
    // The sums written straight into c, the padded columns' zeros with them.
    at::native::cpublas::brgemm(m, m_width, m_k, m == 1 ? m_k : a.stride(0), m_width, m == 1 ? m_width : c.stride(0),
        /*add_C=*/false, reinterpret_cast<const at::BFloat16*>(a.data_ptr()),
        reinterpret_cast<const at::BFloat16*>(m_pairs.data_ptr()), c.data_ptr<float>(), /*is_vnni=*/true);
    at::native::cpublas::brgemm_release(true); // as microKernel: nothing else in this thread may meet its tiles
}

void RecurrentProductBf16::accumulate(torch::Tensor& c, const torch::Tensor& a) const
{
    TORCH_CHECK(a.scalar_type() == torch::kBFloat16 && c.scalar_type() == torch::kFloat32 && a.dim() == 2
            && c.dim() == 2 && a.size(1) == m_k && c.size(0) == a.size(0) && c.size(1) == m_n && a.stride(1) == 1
            && c.stride(1) == 1 && (a.size(0) <= 1 || (a.stride(0) >= m_k && c.stride(0) >= m_n)),
        "RecurrentProductBf16: bf16 (rows, K) into fp32 (rows, N), each with unit stride along its rows");
    if (a.size(0) == 0)
        return;
    if (m_pairs.defined())
        microKernel(a, m_pairs, m_n, c);
    else
        gemmBf16(a, false, m_w, m_transposed, 1.0f, c);
}

} // namespace chatbench
