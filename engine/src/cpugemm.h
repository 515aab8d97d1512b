#pragma once
// Matrix products on the CPU through the MKL inside LibTorch (private: Torch types). LibTorch's
// x86 builds export MKL's packed fp32 GEMM and its bf16 × bf16 → fp32 GEMM; where a build has
// neither, both fall back to ATen with the same results up to rounding.

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace chatbench {

// c (m, N) += a (m, K) · op(w) for one weight and the m ≤ M rows of every step, all row-major
// fp32 and contiguous; op(w) = wᵀ for w (N, K) (transposed), or w (K, N). The weight is packed once
// for all the steps instead of inside every product (measured 15% off the 50×200×800 and
// 50×800×200 products at 2 threads).
class RecurrentProduct {
public:
    RecurrentProduct(const torch::Tensor& w, bool transposed, int64_t M);
    void accumulate(torch::Tensor& c, const torch::Tensor& a) const;
    // Whether the weight went to MKL packed (false: at::addmm_).
    bool packed() const { return m_packed.defined(); }

private:
    torch::Tensor m_w;
    bool m_transposed;
    int m_m, m_n, m_k;
    torch::Tensor m_packed; // undefined: at::addmm_
};

// The CPU's bf16 instructions from /proc/cpuinfo ("avx512_bf16", "amx_bf16"), empty when none.
std::vector<std::string> cpuBf16Flags();
// Whether /proc/cpuinfo names an Intel CPU.
bool cpuIsIntel();

// How gemmBf16 runs on this CPU. MKL's bf16 GEMM sums straight into fp32, at bf16 speed on Intel
// CPUs with AVX512-BF16 or AMX; on other CPUs it runs at about fp32's speed (its bf16 code paths
// are Intel's), and there oneDNN's AVX512-BF16 kernels, which ATen's bf16 matmul calls, are 2–3×
// faster than either (measured on a 2-core AMD EPYC: docs/performance.md).
enum class Bf16Gemm {
    Mkl, // MKL's bf16 × bf16 → fp32 GEMM: the sums land in c unrounded
    OneDnn, // ATen's bf16 matmul (oneDNN): the sums run in fp32, each product is rounded to bf16
            // once, then added into c
    Fp32, // neither: ATen in fp32 from the bf16 operands
};
// Chosen once per process from the CPU (vendor and instructions), never by timing, so that a
// run's numbers are the same each time on one machine.
Bf16Gemm bf16GemmPath();
// The path in words, for doctor and the window ("MKL, sums in fp32", …).
std::string bf16GemmDescription();

// c = beta·c + op(a) · op(b): a and b bf16, c fp32, each 2-D with unit stride along its rows
// (row slices and transposed views of such are fine); op(x) = xᵀ when trans*. The sums run in
// fp32 (AMX or AVX512-BF16 where the CPU has them); see Bf16Gemm for whether the product is
// rounded to bf16 before it lands in c. beta 0 or 1.
void gemmBf16(const torch::Tensor& a, bool transA, const torch::Tensor& b, bool transB, float beta, torch::Tensor& c);

// Whether this LibTorch exports MKL's bf16 GEMM.
bool mklBf16Gemm();

// c (m, N) += a (m, K) · op(w) on bf16 operands with fp32 sums, for one weight and the rows of
// every step (RecurrentProduct's bf16 counterpart): a bf16 with unit stride along its rows, c fp32
// likewise; op(w) = wᵀ for w (N, K) (transposed), or w (K, N). On the oneDNN path
// (Bf16Gemm::OneDnn) and on Intel CPUs with AMX-BF16, op(w) is rounded to bf16 and laid out in
// pairs along K once, and each step is one call of oneDNN's micro-kernel through ATen
// (at::native::cpublas::brgemm), which adds the fp32 sums into c: no dispatch, no per-call
// packing, no bf16 product to round and add. At the recurrent products' 25 rows, 1 core: 200 × 800
// 35 µs against 65 µs through at::mm on a Zen 4 EPYC; on a Sapphire Rapids Xeon (AMX) 6 µs against
// MKL's 29 µs, and 800 × 200 5.5 µs against 24 µs (its width padded to whole tiles). Elsewhere, or
// when K is odd or the micro-kernel is missing from this LibTorch, it is gemmBf16.
class RecurrentProductBf16 {
public:
    RecurrentProductBf16(const torch::Tensor& w, bool transposed);
    void accumulate(torch::Tensor& c, const torch::Tensor& a) const;
    // Whether the steps go through the micro-kernel (false: gemmBf16).
    bool packed() const { return m_pairs.defined(); }

private:
    torch::Tensor m_w; // op(w)'s bf16 weight as stored, for gemmBf16
    bool m_transposed;
    int64_t m_k, m_n;
    torch::Tensor m_pairs; // (K/2, N, 2) bf16: op(w) in pairs along K; undefined: gemmBf16
};
// c (m, width()) = a (m, K) · wᵀ for w (N, K) fp32 and a bf16 with unit stride along its rows,
// fp32 sums: the output projection's forward product, its rows many (a chunk of a step's target
// tokens) and its width the vocabulary. Where the micro-kernel takes it (as RecurrentProductBf16),
// wᵀ is laid out once (the step's form 1 while a StepBf16Weights holds one) and c is written
// straight from the tiles: on AMX c has N padded to whole tiles, the extra columns zero (128 ×
// 200 × 2287, one core of a Sapphire Rapids Xeon, caches flushed: 148 µs against MKL's 384 µs,
// which lays the weight out again on every call). Elsewhere width() is N and the product is
// gemmBf16's. Each row count is a micro-kernel of its own, generated once (≈ 2 ms).
class WideProductBf16 {
public:
    explicit WideProductBf16(const torch::Tensor& w);
    int64_t width() const { return m_width; }
    void product(const torch::Tensor& a, const torch::Tensor& c) const;
    bool packed() const { return m_pairs.defined(); }

private:
    torch::Tensor m_w; // bf16 as stored, for gemmBf16
    int64_t m_k, m_width;
    torch::Tensor m_pairs; // (K/2, width, 2) bf16; undefined: gemmBf16
};

// The bf16 forms of the weights one bf16 training step multiplies by, made once for the step and
// shared by its lanes, where each lane made its own in each pass (at the seed sizes ≈ 1.1 M
// weights converted, and the recurrent ones laid out twice, per lane and step). While an object
// lives, bf16Weight, RecurrentProductBf16 and WideProductBf16 take their weights from it (from any such object
// alive in the process, matched by storage, shape and strides); the objects are made before the
// lanes start and only read while they run, and must not outlive the step (the optimizer then
// changes the weights) or the evaluation they were made for. `share(tasks, task)` runs task(0 … tasks − 1), each once,
// on the caller's cores.
class StepBf16Weights {
public:
    // plain: multiplied as they are (form 0); recurrent: by RecurrentProductBf16 both ways (forms 1
    // and 2, or 0 where the micro-kernel does not fit); wide: by WideProductBf16 and as they are
    // (forms 1 and 0).
    StepBf16Weights(const std::vector<torch::Tensor>& plain, const std::vector<torch::Tensor>& recurrent,
        const std::vector<torch::Tensor>& wide,
        const std::function<void(int64_t, const std::function<void(int64_t)>&)>& share);
    ~StepBf16Weights();
    StepBf16Weights(const StepBf16Weights&) = delete;
    StepBf16Weights& operator=(const StepBf16Weights&) = delete;
    // The form of w made for this step (form 0: bf16 as stored; 1: the micro-kernel's layout of
    // wᵀ; 2: of w), or an undefined tensor.
    torch::Tensor find(const torch::Tensor& w, int form) const;

private:
    struct Entry {
        const torch::Tensor source;
        int form;
        torch::Tensor made;
    };
    std::vector<Entry> m_entries;
};
// w (fp32) as bf16: the step's copy while a StepBf16Weights holds one, else w.to(bf16).
torch::Tensor bf16Weight(const torch::Tensor& w);

// Whether RecurrentProductBf16 takes the micro-kernel in this process: the oneDNN path or AMX-BF16
// on the MKL path, and a product of known operands through it (once per process) gave the sums
// it should.
bool bf16MicroKernel();

} // namespace chatbench
