#pragma once
// Element loops that ATen has no single op for (private, Torch-free: kernels.cpp is compiled with
// -O3 -fno-math-errno so the compiler vectorises sqrt; no Torch header could share that build).

#include <cstdint>

namespace chatbench::kernels {

// RMSprop on elements [0, n): sa = alpha·sa + (1 − alpha)·(scale·g)²; w −= lr·scale·g / (√sa + eps).
void rmspropUpdate(float* w, const float* g, float* sa, int64_t n, float alpha, float eps, float lr, float scale);

// Σ x² over [0, n), accumulated in double.
double sumSquares(const float* x, int64_t n);

} // namespace chatbench::kernels
