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
