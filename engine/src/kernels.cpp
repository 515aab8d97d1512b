#include "kernels.h"

#include <cmath>

namespace chatbench::kernels {

void rmspropUpdate(float* w, const float* g, float* sa, int64_t n, float alpha, float eps, float lr, float scale)
{
    const float beta = 1.0f - alpha;
    for (int64_t k = 0; k < n; ++k) {
        const float gk = g[k] * scale;
        sa[k] = alpha * sa[k] + beta * gk * gk;
        w[k] -= lr * gk / (std::sqrt(sa[k]) + eps);
    }
}

void lstmCell(int64_t B, int64_t H, float* acts, const float* cPrev, const bool* keep, float* c)
{
    for (int64_t b = 0; b < B; ++b) {
        const float* a = acts + b * 4 * H;
        const float* cp = cPrev + b * H;
        float* cn = c + b * H;
        if (keep && !keep[b]) { // the gates of a finished row are never read again
            for (int64_t k = 0; k < H; ++k)
                cn[k] = cp[k];
            continue;
        }
        float* g = acts + b * 4 * H + 2 * H; // holds sigmoid(2z): make it tanh(z) in place
        for (int64_t k = 0; k < H; ++k) {
            g[k] = 2.0f * g[k] - 1.0f;
            cn[k] = a[H + k] * cp[k] + a[k] * g[k];
        }
    }
}

void lstmHidden(
    int64_t B, int64_t H, const float* acts, const float* tanhC, const float* hPrev, const bool* keep, float* h)
{
    for (int64_t b = 0; b < B; ++b) {
        const float* a = acts + b * 4 * H;
        const float* tc = tanhC + b * H;
        float* hn = h + b * H;
        if (keep && !keep[b]) {
            const float* hp = hPrev + b * H;
            for (int64_t k = 0; k < H; ++k)
                hn[k] = hp[k];
            continue;
        }
        for (int64_t k = 0; k < H; ++k)
            hn[k] = a[3 * H + k] * tc[k];
    }
}

void lstmBackwardStep(int64_t B, int64_t H, const float* dh, float* dc, const float* acts, const float* tanhC,
    const float* cPrev, const bool* keep, float* dgates, float* dhKeep)
{
    for (int64_t b = 0; b < B; ++b) {
        const float* a = acts + b * 4 * H;
        const float* tc = tanhC + b * H;
        const float* cp = cPrev + b * H;
        const float* dhb = dh + b * H;
        float* dcb = dc + b * H;
        float* d = dgates + b * 4 * H;
        float* keepb = dhKeep + b * H;
        if (keep && !keep[b]) { // the step did not touch this row: its gradient flows past it
            for (int64_t k = 0; k < 4 * H; ++k)
                d[k] = 0.0f;
            for (int64_t k = 0; k < H; ++k)
                keepb[k] = dhb[k];
            continue; // dc passes unchanged
        }
        for (int64_t k = 0; k < H; ++k) {
            const float i = a[k], f = a[H + k], g = a[2 * H + k], o = a[3 * H + k], t = tc[k];
            const float dct = dcb[k] + dhb[k] * o * (1.0f - t * t);
            d[k] = dct * g * i * (1.0f - i);
            d[H + k] = dct * cp[k] * f * (1.0f - f);
            d[2 * H + k] = dct * i * (1.0f - g * g);
            d[3 * H + k] = dhb[k] * t * o * (1.0f - o);
            dcb[k] = dct * f;
            keepb[k] = 0.0f;
        }
    }
}

double sumSquares(const float* x, int64_t n)
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

} // namespace chatbench::kernels
