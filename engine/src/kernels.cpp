#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

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

// The helpers below are inlined into each clone, so that they are built for its instructions
// too (a helper left out of line is built once, for baseline x86-64).
#define CHATBENCH_INLINE inline __attribute__((always_inline))

namespace chatbench::kernels {

namespace {

// Sixteen and eight floats as one value (GCC's vector extension), written once: each clone
// compiles them to its own registers (one AVX-512 register, two AVX ones, four SSE ones). The
// compiler's loop vectoriser left these element loops scalar in the AVX2 clone ("control flow in
// loop": the selects), so they are written over vectors; results do not depend on the width, as
// every lane computes what a float does.
typedef float F8 __attribute__((vector_size(32)));
typedef float F16 __attribute__((vector_size(64)));
typedef uint32_t U8 __attribute__((vector_size(32)));
typedef uint32_t U16 __attribute__((vector_size(64)));

template <typename T> struct BitsOf; // the unsigned integers of T's shape
template <> struct BitsOf<float> {
    using type = uint32_t;
};
template <> struct BitsOf<F8> {
    using type = U8;
};
template <> struct BitsOf<F16> {
    using type = U16;
};

template <typename T> CHATBENCH_INLINE T load(const float* p)
{
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

template <typename T> CHATBENCH_INLINE void store(float* p, T v)
{
    std::memcpy(p, &v, sizeof v);
}

// body<T>(k) for the elements [k, k + lanes of T) of [0, n): sixteen at a time, then eight, then one.
template <typename Body> CHATBENCH_INLINE void inLanes(int64_t n, Body&& body)
{
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        body.template operator()<F16>(k);
    for (; k + 8 <= n; k += 8)
        body.template operator()<F8>(k);
    for (; k < n; ++k)
        body.template operator()<float>(k);
}

// No float comparison of two F16: GCC 12 builds one (and the select on it) as sixteen scalar
// comparisons with spills in the AVX2 clone, where sixteen floats are two registers; the element
// loops ran 2–4× slower there for it (the cell's loops 267 → 142 µs at B = 50, H = 200; the
// softmax of 64 rows of 2287 logits 1083 → 413 µs). The helpers below make the lanes' choices with
// masks and shifts of the bits, or on the two F8 halves, which every clone but the baseline one
// builds as vector instructions; each gives, lane by lane, what the comparison it stands for gives,
// NaN included.
template <typename T> struct SignedBitsOf; // the signed integers of T's shape
template <> struct SignedBitsOf<float> {
    using type = int32_t;
};
template <> struct SignedBitsOf<F8> {
    using type = int32_t __attribute__((vector_size(32)));
};
template <> struct SignedBitsOf<F16> {
    using type = int32_t __attribute__((vector_size(64)));
};

template <typename To, typename From> CHATBENCH_INLINE To bitsAs(From from)
{
    static_assert(sizeof(To) == sizeof(From));
    To to;
    std::memcpy(&to, &from, sizeof to);
    return to;
}

// mask ? a : b, lane by lane, for a mask of all ones or all zeros in each lane.
template <typename T, typename S> CHATBENCH_INLINE T pick(S mask, T a, T b)
{
    const S a1 = bitsAs<S>(a), b1 = bitsAs<S>(b);
    return bitsAs<T>(static_cast<S>((mask & a1) | (~mask & b1)));
}

// x > 0 ? −x : x, i.e. −|x| (a NaN stays a NaN).
template <typename T> CHATBENCH_INLINE T negativeAbs(T x)
{
    using S = typename SignedBitsOf<T>::type;
    return bitsAs<T>(static_cast<S>(bitsAs<S>(x) | static_cast<int32_t>(0x80000000u)));
}

// x >= 0 ? a : b, where a and b are equal at x = −0 (the sign bit decides; a NaN's result is a
// NaN from either side in this file's uses).
template <typename T> CHATBENCH_INLINE T pickNonNegative(T x, T a, T b)
{
    using S = typename SignedBitsOf<T>::type;
    if constexpr (std::is_same_v<T, float>)
        return x >= 0.0f ? a : b;
    else
        return pick<T, S>(bitsAs<S>(x) >> 31, b, a); // all ones where the sign bit is set
}

// x < −87 ? −87 : x, without a comparison: x + 87 is negative exactly when x < −87 (near −87 the
// sum is exact, so its sign is right), and a NaN (whose sum keeps its sign bit) is told by its
// bits: |x|'s bits + 0x007FFFFF reach the top bit only past +∞'s. GCC folded the integer
// comparisons this was first written with back into "<", which the AVX2 clone builds as scalars
// again; and the two F8 halves, which it builds well, went through memory in the AVX-512 clone.
template <typename T> CHATBENCH_INLINE T clampBelowMinus87(T x)
{
    if constexpr (std::is_same_v<T, float>) {
        return x < -87.0f ? -87.0f : x;
    } else {
        using S = typename SignedBitsOf<T>::type;
        using U = typename BitsOf<T>::type;
        const U nan = (bitsAs<U>(x) & 0x7FFFFFFFu) + 0x007FFFFFu; // top bit: x is a NaN
        const S below = (bitsAs<S>(x + 87.0f) & ~bitsAs<S>(nan)) >> 31; // all ones: clamp
        return pick<T, S>(below, T {} + -87.0f, x);
    }
}

// e^x for x ≤ 0 (softmax arguments; below −87 it is 0 as far as a float sum can tell), lane by
// lane: x = k·ln 2 + r with |r| ≤ ln 2 / 2, e^r by its Taylor series to r⁷/7! (truncation error
// < 2e-9 relative), 2^k put into the exponent bits. Within 1 ulp of the correctly rounded e^x at
// every float in [−87, 0] (checked against double-precision exp).
template <typename T> CHATBENCH_INLINE T expNonPositive(T x)
{
    x = clampBelowMinus87<T>(x);
    constexpr float kLog2e = 1.44269504f, kLn2Hi = 0.693145752f, kLn2Lo = 1.42860677e-6f;
    constexpr float kRound = 12582912.0f; // 1.5·2^23: adding and subtracting it rounds to an integer
    const T shifted = x * kLog2e + kRound;
    const T k = shifted - kRound;
    const T r = (x - k * kLn2Hi) - k * kLn2Lo;
    T p = T {} + 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // 2^k from the low bits of `shifted` (0x4B400000 + k): no float-to-int conversion, which a
    // NaN (a diverged step, to be reported as such) would make undefined.
    using U = typename BitsOf<T>::type;
    U kBits;
    std::memcpy(&kBits, &shifted, sizeof kBits);
    const U bits = (kBits - 0x4B400000u + 127u) << 23;
    T scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

// 1 / (1 + e^−x), from e^−|x| on either side.
template <typename T> CHATBENCH_INLINE T sigmoidOf(T x)
{
    const T e = expNonPositive<T>(negativeAbs<T>(x));
    const T r = 1.0f / (1.0f + e);
    return pickNonNegative<T>(x, r, e * r);
}

// sigmoid over [0, n) in place.
CHATBENCH_INLINE void sigmoidInPlace(float* a, int64_t n)
{
    inLanes(n, [&]<typename T>(int64_t k) { store<T>(a + k, sigmoidOf<T>(load<T>(a + k))); });
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

// x rounded to bf16, to nearest even as ATen's conversion rounds (a NaN stays a NaN), with
// integer operations only: it vectorises in every clone.
CHATBENCH_INLINE uint16_t toBf16(float x)
{
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u : rounded);
}

// n floats rounded to bf16 (toBf16), while they are still in L1.
CHATBENCH_INLINE void roundToBf16(const float* __restrict x, uint16_t* __restrict out, int64_t n)
{
    for (int64_t k = 0; k < n; ++k)
        out[k] = toBf16(x[k]);
}

// Sixteen rounded pairs from 32 consecutive floats' bits (lo: the first 16, hi: the next):
// pair j = bf16(x[2j]) | bf16(x[2j + 1]) << 16, each rounded as toBf16.
CHATBENCH_INLINE U16 roundedPairs(U16 lo, U16 hi)
{
    auto round = [](U16 b) {
        const U16 rounded = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
        const U16 nan = -((b & 0x7FFFFFFFu) > 0x7F800000u); // all ones where a NaN
        return (nan & 0x7FC0u) | (~nan & rounded);
    };
    const U16 a = round(lo), b = round(hi);
    const U16 even = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const U16 odd = __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return even | (odd << 16);
}

// Lane j of the two halves one stage of transpose16 makes of rows a and b (the shuffle's lanes
// 0–15 are a's, 16–31 b's): the first keeps a's lanes outside each b-wide block and takes b's
// inside it, the second the other way round.
template <int B> constexpr int firstHalf(int j)
{
    return (j & B) == 0 ? j : 16 + j - B;
}
template <int B> constexpr int secondHalf(int j)
{
    return (j & B) == 0 ? j + B : 16 + j;
}

// One stage: the off-diagonal B × B blocks of every 2B × 2B block swapped.
template <int B> CHATBENCH_INLINE void transposeStage(U16* t)
{
#define CHATBENCH_LANES(f)                                                                                             \
    f(0), f(1), f(2), f(3), f(4), f(5), f(6), f(7), f(8), f(9), f(10), f(11), f(12), f(13), f(14), f(15)
    for (int i = 0; i < 16; ++i)
        if ((i & B) == 0) {
            const U16 x = __builtin_shufflevector(t[i], t[i + B], CHATBENCH_LANES(firstHalf<B>));
            const U16 y = __builtin_shufflevector(t[i], t[i + B], CHATBENCH_LANES(secondHalf<B>));
            t[i] = x;
            t[i + B] = y;
        }
#undef CHATBENCH_LANES
}

// t (16 × 16) transposed in place, in four stages (B = 8, 4, 2, 1).
CHATBENCH_INLINE void transpose16(U16* t)
{
    transposeStage<8>(t);
    transposeStage<4>(t);
    transposeStage<2>(t);
    transposeStage<1>(t);
}

CHATBENCH_CLONES void bf16RowsAndPairs(
    const float* __restrict w, int64_t N, int64_t K, int64_t np, uint16_t* __restrict rows, uint16_t* __restrict pairs)
{
    constexpr int64_t kBlock = 16; // rows per block, and pairs per tile: one 64-byte line a pair
    const int64_t half = K / 2, wholeTiles = half / kBlock * kBlock;
    auto pairOf = [&](int64_t n, int64_t j) {
        return n < N ? static_cast<uint32_t>(toBf16(w[n * K + 2 * j]))
                | (static_cast<uint32_t>(toBf16(w[n * K + 2 * j + 1])) << 16)
                     : 0u;
    };
    for (int64_t n0 = 0; n0 < np; n0 += kBlock) {
        const int64_t real = std::clamp<int64_t>(N - n0, 0, kBlock), width = std::min(kBlock, np - n0);
        // Tiles of 16 rows × 16 pairs: rounded a row at a time, transposed in registers, stored
        // as 16 lines of pairs.
        for (int64_t j0 = 0; j0 < wholeTiles; j0 += kBlock) {
            U16 tile[kBlock];
            for (int64_t r = 0; r < kBlock; ++r) {
                if (r >= real) {
                    tile[r] = U16 {};
                    continue;
                }
                U16 lo, hi;
                std::memcpy(&lo, w + (n0 + r) * K + 2 * j0, sizeof lo);
                std::memcpy(&hi, w + (n0 + r) * K + 2 * j0 + kBlock, sizeof hi);
                tile[r] = roundedPairs(lo, hi);
                if (rows)
                    std::memcpy(rows + (n0 + r) * K + 2 * j0, &tile[r], sizeof tile[r]);
            }
            transpose16(tile);
            for (int64_t j = 0; j < kBlock; ++j)
                if (width == kBlock) // one store (a copy of a variable length is a string move)
                    std::memcpy(pairs + 2 * ((j0 + j) * np + n0), &tile[j], sizeof tile[j]);
                else
                    std::memcpy(
                        pairs + 2 * ((j0 + j) * np + n0), &tile[j], static_cast<size_t>(width) * sizeof(uint32_t));
        }
        for (int64_t j = wholeTiles; j < half; ++j) // the last pairs, one at a time
            for (int64_t r = 0; r < width; ++r) {
                const uint32_t v = pairOf(n0 + r, j);
                std::memcpy(pairs + 2 * (j * np + n0 + r), &v, sizeof v);
                if (rows && r < real)
                    std::memcpy(rows + (n0 + r) * K + 2 * j, &v, sizeof v);
            }
    }
}

// One row's element loops, each block (gate, state) a parameter of its own marked restrict (the
// blocks never overlap).
CHATBENCH_INLINE void cellRow(int64_t H, const float* __restrict i, const float* __restrict f, float* __restrict g,
    const float* __restrict o, const float* __restrict cPrev, float* __restrict c, float* __restrict tanhC,
    float* __restrict h)
{
    inLanes(H, [&]<typename T>(int64_t k) {
        const T gk = 2.0f * sigmoidOf<T>(2.0f * load<T>(g + k)) - 1.0f; // tanh(z) = 2·sigmoid(2z) − 1
        const T cell = load<T>(f + k) * load<T>(cPrev + k) + load<T>(i + k) * gk;
        const T t = 2.0f * sigmoidOf<T>(2.0f * cell) - 1.0f;
        store<T>(g + k, gk);
        store<T>(c + k, cell);
        store<T>(tanhC + k, t);
        store<T>(h + k, load<T>(o + k) * t);
    });
}

template <bool withOut>
CHATBENCH_INLINE void backwardRow(int64_t H, const float* __restrict i, const float* __restrict f,
    const float* __restrict g, const float* __restrict o, const float* __restrict tanhC, const float* __restrict cPrev,
    float* __restrict dh, const float* __restrict dOut, float* __restrict dc, float* __restrict di,
    float* __restrict df, float* __restrict dg, float* __restrict dout)
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
    int64_t B, int64_t H, float* acts, const float* cPrev, float* c, float* tanhC, float* h, uint16_t* hBf16)
{
    for (int64_t b = 0; b < B; ++b) {
        float* a = acts + b * 4 * H;
        sigmoidInPlace(a, 2 * H); // i and f
        sigmoidInPlace(a + 3 * H, H); // o (the cell candidate's tanh comes in cellRow)
        cellRow(H, a, a + H, a + 2 * H, a + 3 * H, cPrev + b * H, c + b * H, tanhC + b * H, h + b * H);
        if (hBf16)
            roundToBf16(h + b * H, hBf16 + b * H, H);
    }
}

CHATBENCH_CLONES void lstmBackwardStep(int64_t B, int64_t H, float* dh, const float* dOut, float* dc, const float* acts,
    const float* tanhC, const float* cPrev, float* dgates, uint16_t* dgatesBf16)
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
        if (dgatesBf16)
            roundToBf16(d, dgatesBf16 + b * 4 * H, 4 * H);
    }
}

CHATBENCH_CLONES void roundBf16(const float* x, int64_t n, uint16_t* out)
{
    roundToBf16(x, out, n);
}

CHATBENCH_CLONES void gatherBf16Rows(const float* x, int64_t width, const int64_t* rows, int64_t n, uint16_t* out)
{
    for (int64_t r = 0; r < n; ++r)
        roundToBf16(x + rows[r] * width, out + r * width, width);
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

CHATBENCH_CLONES void addBf16Into(
    float* __restrict dst, int64_t ldDst, const uint16_t* __restrict src, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; ++r) {
        float* d = dst + r * ldDst;
        const uint16_t* s = src + r * cols;
        for (int64_t k = 0; k < cols; ++k) {
            const uint32_t bits = static_cast<uint32_t>(s[k]) << 16; // bf16 is float's upper half
            float v;
            std::memcpy(&v, &bits, sizeof v);
            d[k] += v;
        }
    }
}

namespace {

int64_t roundUp8(int64_t m)
{
    return (m + 7) / 8 * 8;
}

// acc (8·A floats) += x[j] · (row j of the panel: 8·A floats) for j = 0 … n − 1 in turn: A
// independent sums of eight lanes each, enough of them that the multiply-adds' latency is hidden.
template <int A> CHATBENCH_INLINE void panelSums(const float* panel, int64_t n, const float* x, float* acc)
{
    F8 a[A];
    for (int k = 0; k < A; ++k)
        a[k] = load<F8>(acc + 8 * k);
    for (int64_t j = 0; j < n; ++j) {
        const F8 xj = F8 {} + x[j];
        const float* row = panel + j * 8 * A;
        for (int k = 0; k < A; ++k)
            a[k] += xj * load<F8>(row + 8 * k);
    }
    for (int k = 0; k < A; ++k)
        store<F8>(acc + 8 * k, a[k]);
}

} // namespace

int64_t panelFloats(int64_t m, int64_t n)
{
    return roundUp8(m) * n;
}

void packPanels(const float* w, int64_t m, int64_t n, float* panels)
{
    const int64_t padded = roundUp8(m);
    for (int64_t first = 0; first < padded; first += kPanelRows) {
        const int64_t width = std::min(kPanelRows, padded - first);
        float* p = panels + first * n;
        for (int64_t j = 0; j < n; ++j)
            for (int64_t r = 0; r < width; ++r)
                p[j * width + r] = first + r < m ? w[(first + r) * n + j] : 0.0f;
    }
}

CHATBENCH_CLONES void panelMatVec(
    const float* panels, int64_t m, int64_t n, const float* x, const float* b, float* y, int64_t begin, int64_t end)
{
    const int64_t padded = roundUp8(m);
    for (int64_t first = begin; first < end; first += kPanelRows) {
        const int64_t width = std::min(kPanelRows, padded - first);
        const int64_t rows = std::min(width, m - first);
        alignas(32) float acc[kPanelRows];
        for (int64_t r = 0; r < width; ++r)
            acc[r] = r < rows ? (b ? b[first + r] : y[first + r]) : 0.0f;
        const float* p = panels + first * n;
        switch (width / 8) {
        case 8: panelSums<8>(p, n, x, acc); break;
        case 7: panelSums<7>(p, n, x, acc); break;
        case 6: panelSums<6>(p, n, x, acc); break;
        case 5: panelSums<5>(p, n, x, acc); break;
        case 4: panelSums<4>(p, n, x, acc); break;
        case 3: panelSums<3>(p, n, x, acc); break;
        case 2: panelSums<2>(p, n, x, acc); break;
        default: panelSums<1>(p, n, x, acc); break;
        }
        std::copy_n(acc, rows, y + first);
    }
}

CHATBENCH_CLONES bool allFinite(const float* x, int64_t n)
{
    // A float is NaN or ±inf when its exponent bits are all ones. One pass of compares and ors a
    // block at a time (0.2 ms for the seed preset's weights, where isfinite().all() took 3 ms).
    constexpr int64_t kBlock = 4096;
    for (int64_t start = 0; start < n; start += kBlock) {
        const int64_t end = start + kBlock < n ? start + kBlock : n;
        uint32_t bad = 0;
        for (int64_t i = start; i < end; ++i) {
            uint32_t bits;
            std::memcpy(&bits, x + i, sizeof bits);
            bad |= static_cast<uint32_t>((bits & 0x7F800000u) == 0x7F800000u);
        }
        if (bad)
            return false;
    }
    return true;
}

CHATBENCH_CLONES double sumSquares(const float* x, int64_t n)
{
    // 64 float partial sums (four F16), each over at most 64 terms of one block, then added in
    // double in lane order. Four independent chains of adds keep the adder busy; eight partials
    // were one chain (2.9 floats/ns whether the data sat in L1 or in L3, now 17–20 in L1 and L2).
    constexpr int64_t kBlock = 4096;
    double total = 0;
    for (int64_t start = 0; start < n; start += kBlock) {
        const int64_t end = start + kBlock < n ? start + kBlock : n;
        F16 p0 {}, p1 {}, p2 {}, p3 {};
        int64_t k = start;
        for (; k + 64 <= end; k += 64) {
            const F16 a = load<F16>(x + k), b = load<F16>(x + k + 16), c = load<F16>(x + k + 32),
                      d = load<F16>(x + k + 48);
            p0 += a * a;
            p1 += b * b;
            p2 += c * c;
            p3 += d * d;
        }
        float tail = 0;
        for (; k < end; ++k)
            tail += x[k] * x[k];
        // In double from here: a float sum of the 64 partials overflowed at |x| ≈ 1e18.
        double sum = tail;
        for (int64_t j = 0; j < 16; ++j)
            sum += (static_cast<double>(p0[j]) + p1[j]) + (static_cast<double>(p2[j]) + p3[j]);
        total += sum;
    }
    return total;
}

namespace {

// The max and the sums in 16 partial results each (one F16; the compiler keeps to the order
// written, so only explicit partials vectorise).
constexpr int64_t kLanes = 16;

// The 16 partial maxima are two F8 (lanes 0–7 and 8–15 of one F16, taken in that order at the
// end): a comparison of two F16 is scalar in the AVX2 clone (above), one of two F8 is one
// instruction in every clone but the baseline one.
CHATBENCH_INLINE float laneMax(F8 lo, F8 hi, float m)
{
    for (int64_t j = 0; j < 8; ++j)
        m = lo[j] > m ? lo[j] : m;
    for (int64_t j = 0; j < 8; ++j)
        m = hi[j] > m ? hi[j] : m;
    return m;
}

// rowMax after z += bias, in the same pass (the bias' copy into the logits was a pass of its own).
CHATBENCH_INLINE float rowAddMax(float* zr, const float* bias, int64_t V)
{
    F8 lo = F8 {} + (zr[0] + bias[0]), hi = lo;
    int64_t v = 0;
    for (; v + kLanes <= V; v += kLanes) {
        const F8 a = load<F8>(zr + v) + load<F8>(bias + v), b = load<F8>(zr + v + 8) + load<F8>(bias + v + 8);
        store<F8>(zr + v, a);
        store<F8>(zr + v + 8, b);
        lo = a > lo ? a : lo;
        hi = b > hi ? b : hi;
    }
    float m = zr[0] + bias[0];
    for (; v < V; ++v) {
        zr[v] += bias[v];
        m = zr[v] > m ? zr[v] : m;
    }
    return laneMax(lo, hi, m);
}

CHATBENCH_INLINE float rowMax(const float* zr, int64_t V)
{
    F8 lo = F8 {} + zr[0], hi = lo;
    int64_t v = 0;
    for (; v + kLanes <= V; v += kLanes) {
        const F8 a = load<F8>(zr + v), b = load<F8>(zr + v + 8);
        lo = a > lo ? a : lo;
        hi = b > hi ? b : hi;
    }
    float m = zr[0];
    for (; v < V; ++v)
        m = zr[v] > m ? zr[v] : m;
    return laneMax(lo, hi, m);
}

// Σ e^(z − m) over a row: in the 16 partials, then the tail, then the partials added in lane
// order. With `keep`, each e^(z − m) is also written over z.
template <bool keep> CHATBENCH_INLINE float sumExp(float* z, int64_t V, float m)
{
    F16 part {};
    int64_t v = 0;
    for (; v + kLanes <= V; v += kLanes) {
        const F16 e = expNonPositive<F16>(load<F16>(z + v) - m);
        if constexpr (keep)
            store<F16>(z + v, e);
        part += e;
    }
    float sum = 0;
    for (; v < V; ++v) {
        const float e = expNonPositive<float>(z[v] - m);
        if constexpr (keep)
            z[v] = e;
        sum += e;
    }
    for (int64_t j = 0; j < kLanes; ++j)
        sum += part[j];
    return sum;
}

} // namespace

CHATBENCH_CLONES double logSumExp(const float* z, int64_t V)
{
    const float m = rowMax(z, V);
    const float sum = sumExp<false>(const_cast<float*>(z), V, m); // read only: keep is false
    return static_cast<double>(m) + std::log(static_cast<double>(sum));
}

namespace {

// The rows' last pass: p = e^(z − m) / Σ into colSum, and into z (fp32) or zb (bf16).
template <bool Bf16> CHATBENCH_INLINE void scaleRow(float* zr, uint16_t* zb, float* colSum, int64_t V, float inv)
{
    for (int64_t v = 0; v < V; ++v) {
        const float p = zr[v] * inv;
        colSum[v] += p;
        if constexpr (Bf16)
            zb[v] = toBf16(p);
        else
            zr[v] = p;
    }
}

} // namespace

CHATBENCH_CLONES double crossEntropyRows(
    int64_t n, int64_t V, int64_t ldz, float* z, const float* bias, const int64_t* target, int64_t* hits)
{
    double loss = 0;
    for (int64_t row = 0; row < n; ++row) {
        float* zr = z + row * ldz;
        const float m = bias ? rowAddMax(zr, bias, V) : rowMax(zr, V);
        const int64_t t = target[row];
        const float zt = zr[t];
        const float sum = sumExp<false>(zr, V, m);
        loss += static_cast<double>(m) + std::log(static_cast<double>(sum)) - static_cast<double>(zt);
        if (zt == m) { // a hit when no word before the target ties with it (argmax takes the first)
            int64_t v = 0;
            while (zr[v] != m)
                ++v;
            *hits += v == t ? 1 : 0;
        }
    }
    return loss;
}

CHATBENCH_CLONES double softmaxCrossEntropyRows(
    int64_t n, int64_t V, int64_t ldz, float* z, const float* bias, const int64_t* target, float* colSum, uint16_t* zb)
{
    double loss = 0;
    for (int64_t row = 0; row < n; ++row) {
        float* zr = z + row * ldz;
        const float m = bias ? rowAddMax(zr, bias, V) : rowMax(zr, V);
        const float zt = zr[target[row]];
        const float sum = sumExp<true>(zr, V, m);
        loss += static_cast<double>(m) + std::log(static_cast<double>(sum)) - static_cast<double>(zt);
        const float inv = 1.0f / sum;
        const int64_t t = target[row];
        if (zb) {
            uint16_t* zbr = zb + row * V;
            scaleRow<true>(zr, zbr, colSum, V, inv); // leaves zr as it was
            const float pt = zr[t] * inv;
            zr[t] = pt; // a second use of the product: it is rounded on its own, as in the fp32 path,
                        // never fused with the − 1 below into one multiply-subtract
            zbr[t] = toBf16(pt - 1.0f);
        } else {
            scaleRow<false>(zr, nullptr, colSum, V, inv);
            zr[t] -= 1.0f;
        }
        colSum[t] -= 1.0f;
    }
    return loss;
}

} // namespace chatbench::kernels
