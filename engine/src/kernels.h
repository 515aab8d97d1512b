#pragma once
// Element loops that ATen has no single op for (private, Torch-free: kernels.cpp is compiled with
// -O3 -fno-math-errno so the compiler vectorises sqrt; no Torch header could share that build).

#include <cstdint>

namespace chatbench::kernels {

// RMSprop on elements [0, n): sa = alpha·sa + (1 − alpha)·(scale·g)²; w −= lr·scale·g / (√sa + eps).
void rmspropUpdate(float* w, const float* g, float* sa, int64_t n, float alpha, float eps, float lr, float scale);

// One LSTM step's cell update for B rows of H units. acts (B, 4H) holds sigmoid(i), sigmoid(f),
// sigmoid(2·z_g), sigmoid(o); the third block is turned into g = tanh(z_g) = 2·sigmoid(2·z_g) − 1
// in place. c = f·cPrev + i·g; where keep[b] is 0 (past the row's length; null = every row
// runs) the row keeps cPrev instead.
void lstmCell(int64_t B, int64_t H, float* acts, const float* cPrev, const bool* keep, float* c);
// h = o·tanhC, or hPrev where keep[b] is 0.
void lstmHidden(
    int64_t B, int64_t H, const float* acts, const float* tanhC, const float* hPrev, const bool* keep, float* h);
// One step of the LSTM backward pass. In: dh, dc (B, H) w.r.t. the state after the step; acts,
// tanhC of the step; cPrev. Out: dgates (B, 4H) w.r.t. the pre-activations; dc becomes the
// gradient w.r.t. cPrev; dhKeep (B, H) the part of dh that passes straight to hPrev (rows past
// their length; zero elsewhere). keep as in lstmCell.
void lstmBackwardStep(int64_t B, int64_t H, const float* dh, float* dc, const float* acts, const float* tanhC,
    const float* cPrev, const bool* keep, float* dgates, float* dhKeep);

// Σ x² over [0, n), accumulated in double.
double sumSquares(const float* x, int64_t n);

} // namespace chatbench::kernels
