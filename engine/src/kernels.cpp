#include "kernels.h"

#include <cmath>
#include <cstring>

// Built for baseline x86-64 these loops are 4-wide SSE2; each also gets an AVX2 + FMA and an
// AVX-512 build, the best one the CPU has picked once when the program loads (an ifunc). Not
// under a sanitizer: the loader runs the (instrumented) resolvers before the sanitizer's runtime
// is up, and the program dies before main.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)                              \
    && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define CHATBENCH_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CHATBENCH_CLONES
#endif

namespace chatbench::kernels {

namespace {

// e^x for x ≤ 0 (softmax arguments; below −87 it is 0 as far as a float sum can tell), as loops
// that vectorise: x = k·ln 2 + r with |r| ≤ ln 2 / 2, e^r by its Taylor series to r⁷/7!
// (truncation error < 2e-9 relative), 2^k put into the exponent bits. Within 1 ulp of the
// correctly rounded e^x at every float in [−87, 0] (checked against double-precision exp).
inline float expNonPositive(float x)
{
    x = x < -87.0f ? -87.0f : x;
    constexpr float kLog2e = 1.44269504f, kLn2Hi = 0.693145752f, kLn2Lo = 1.42860677e-6f;
    constexpr float kRound = 12582912.0f; // 1.5·2^23: adding and subtracting it rounds to an integer
    const float shifted = x * kLog2e + kRound;
    const float k = shifted - kRound;
    const float r = (x - k * kLn2Hi) - k * kLn2Lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // 2^k from the low bits of `shifted` (0x4B400000 + k): no float-to-int conversion, which a
    // NaN (a diverged step, to be reported as such) would make undefined.
    uint32_t kBits;
    std::memcpy(&kBits, &shifted, sizeof kBits);
    const uint32_t bits = (kBits - 0x4B400000u + 127u) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

// 1 / (1 + e^−x), from e^−|x| on either side.
inline float sigmoidOf(float x)
{
    const float e = expNonPositive(x > 0.0f ? -x : x);
    const float r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}

} // namespace

CHATBENCH_CLONES void rmspropUpdate(
    float* w, const float* g, float* sa, int64_t n, float alpha, float eps, float lr, float scale)
{
    const float beta = 1.0f - alpha;
    for (int64_t k = 0; k < n; ++k) {
        const float gk = g[k] * scale;
        sa[k] = alpha * sa[k] + beta * gk * gk;
        w[k] -= lr * gk / (std::sqrt(sa[k]) + eps);
    }
}

// One row's element loops, each block (gate, state) a parameter of its own marked restrict: the
// blocks never overlap, and only restrict parameters (not offsets of one pointer, nor restrict
// locals) let the compiler vectorise these loops without run-time overlap checks.
inline void cellRow(int64_t H, const float* __restrict i, const float* __restrict f, float* __restrict g,
    const float* __restrict o, const float* __restrict cPrev, float* __restrict c, float* __restrict tanhC,
    float* __restrict h)
{
    for (int64_t k = 0; k < H; ++k) {
        const float gk = 2.0f * sigmoidOf(2.0f * g[k]) - 1.0f; // tanh(z) = 2·sigmoid(2z) − 1
        g[k] = gk;
        const float cell = f[k] * cPrev[k] + i[k] * gk;
        c[k] = cell;
        const float t = 2.0f * sigmoidOf(2.0f * cell) - 1.0f;
        tanhC[k] = t;
        h[k] = o[k] * t;
    }
}

template <bool withOut>
inline void backwardRow(int64_t H, const float* __restrict i, const float* __restrict f, const float* __restrict g,
    const float* __restrict o, const float* __restrict tanhC, const float* __restrict cPrev, float* __restrict dh,
    const float* __restrict dOut, float* __restrict dc, float* __restrict di, float* __restrict df,
    float* __restrict dg, float* __restrict dout)
{
    for (int64_t k = 0; k < H; ++k) {
        const float t = tanhC[k];
        const float dhk = withOut ? dh[k] + dOut[k] : dh[k];
        const float dct = dc[k] + dhk * o[k] * (1.0f - t * t);
        di[k] = dct * g[k] * i[k] * (1.0f - i[k]);
        df[k] = dct * cPrev[k] * f[k] * (1.0f - f[k]);
        dg[k] = dct * i[k] * (1.0f - g[k] * g[k]);
        dout[k] = dhk * t * o[k] * (1.0f - o[k]);
        dc[k] = dct * f[k];
        dh[k] = 0.0f;
    }
}

CHATBENCH_CLONES void lstmForwardStep(
    int64_t B, int64_t H, float* acts, const float* cPrev, float* c, float* tanhC, float* h)
{
    for (int64_t b = 0; b < B; ++b) {
        float* a = acts + b * 4 * H;
        for (int64_t k = 0; k < 2 * H; ++k) // i and f
            a[k] = sigmoidOf(a[k]);
        for (int64_t k = 3 * H; k < 4 * H; ++k) // o (the cell candidate's tanh comes in cellRow)
            a[k] = sigmoidOf(a[k]);
        cellRow(H, a, a + H, a + 2 * H, a + 3 * H, cPrev + b * H, c + b * H, tanhC + b * H, h + b * H);
    }
}

CHATBENCH_CLONES void lstmBackwardStep(int64_t B, int64_t H, float* dh, const float* dOut, float* dc, const float* acts,
    const float* tanhC, const float* cPrev, float* dgates)
{
    for (int64_t b = 0; b < B; ++b) {
        const float* a = acts + b * 4 * H;
        float* d = dgates + b * 4 * H;
        if (dOut)
            backwardRow<true>(H, a, a + H, a + 2 * H, a + 3 * H, tanhC + b * H, cPrev + b * H, dh + b * H, dOut + b * H,
                dc + b * H, d, d + H, d + 2 * H, d + 3 * H);
        else
            backwardRow<false>(H, a, a + H, a + 2 * H, a + 3 * H, tanhC + b * H, cPrev + b * H, dh + b * H, nullptr,
                dc + b * H, d, d + H, d + 2 * H, d + 3 * H);
    }
}

CHATBENCH_CLONES void scaleSquares(float* sa, int64_t n, float alpha)
{
    for (int64_t k = 0; k < n; ++k)
        sa[k] *= alpha;
}

CHATBENCH_CLONES void addInto(float* __restrict dst, const float* __restrict src, int64_t n)
{
    for (int64_t k = 0; k < n; ++k)
        dst[k] += src[k];
}

CHATBENCH_CLONES double sumSquares(const float* x, int64_t n)
{
    // Eight float partial sums vectorise; each covers at most n/8 terms of one block.
    constexpr int64_t kBlock = 4096;
    double total = 0;
    for (int64_t start = 0; start < n; start += kBlock) {
        const int64_t end = start + kBlock < n ? start + kBlock : n;
        float part[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
        int64_t k = start;
        for (; k + 8 <= end; k += 8)
            for (int j = 0; j < 8; ++j)
                part[j] += x[k + j] * x[k + j];
        for (; k < end; ++k)
            part[0] += x[k] * x[k];
        for (float p : part)
            total += p;
    }
    return total;
}

namespace {

// The max and the sums in 16 partial results each (what a vector register holds): the compiler
// keeps to the order written, so only explicit partials vectorise.
constexpr int64_t kLanes = 16;

inline float rowMax(const float* zr, int64_t V)
{
    float part[kLanes];
    for (int64_t j = 0; j < kLanes; ++j)
        part[j] = zr[0];
    int64_t v = 0;
    for (; v + kLanes <= V; v += kLanes)
        for (int64_t j = 0; j < kLanes; ++j)
            part[j] = zr[v + j] > part[j] ? zr[v + j] : part[j];
    float m = zr[0];
    for (; v < V; ++v)
        m = zr[v] > m ? zr[v] : m;
    for (int64_t j = 0; j < kLanes; ++j)
        m = part[j] > m ? part[j] : m;
    return m;
}

} // namespace

CHATBENCH_CLONES double logSumExp(const float* z, int64_t V)
{
    const float m = rowMax(z, V);
    float part[kLanes] = {};
    int64_t v = 0;
    for (; v + kLanes <= V; v += kLanes)
        for (int64_t j = 0; j < kLanes; ++j)
            part[j] += expNonPositive(z[v + j] - m);
    float sum = 0;
    for (; v < V; ++v)
        sum += expNonPositive(z[v] - m);
    for (int64_t j = 0; j < kLanes; ++j)
        sum += part[j];
    return static_cast<double>(m) + std::log(static_cast<double>(sum));
}

CHATBENCH_CLONES double softmaxCrossEntropyRows(int64_t n, int64_t V, float* z, const int64_t* target, float* colSum)
{
    double loss = 0;
    for (int64_t row = 0; row < n; ++row) {
        float* zr = z + row * V;
        const float m = rowMax(zr, V);
        const float zt = zr[target[row]];
        float part[kLanes] = {};
        int64_t v = 0;
        for (; v + kLanes <= V; v += kLanes)
            for (int64_t j = 0; j < kLanes; ++j) {
                zr[v + j] = expNonPositive(zr[v + j] - m);
                part[j] += zr[v + j];
            }
        float sum = 0;
        for (; v < V; ++v) {
            zr[v] = expNonPositive(zr[v] - m);
            sum += zr[v];
        }
        for (int64_t j = 0; j < kLanes; ++j)
            sum += part[j];
        loss += static_cast<double>(m) + std::log(static_cast<double>(sum)) - static_cast<double>(zt);
        const float inv = 1.0f / sum;
        for (v = 0; v < V; ++v) {
            zr[v] *= inv;
            colSum[v] += zr[v];
        }
        zr[target[row]] -= 1.0f;
        colSum[target[row]] -= 1.0f;
    }
    return loss;
}

} // namespace chatbench::kernels
