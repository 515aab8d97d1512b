#pragma once
// Element loops that ATen has no single op for (private, Torch-free: kernels.cpp is compiled with
// -O3 -fno-math-errno so the compiler vectorises sqrt; no Torch header could share that build).

#include <cstdint>

namespace chatbench::kernels {

// RMSprop on elements [0, n): sa = alpha·sa + (1 − alpha)·(scale·g)²; w −= lr·scale·g / (√sa + eps).
void rmspropUpdate(float* w, const float* g, float* sa, int64_t n, float alpha, float eps, float lr, float scale);

// rmspropUpdate's effect on elements whose gradient is zero: sa = alpha·sa, w unchanged. The
// same floats as rmspropUpdate with g = 0 (alpha·sa + (1 − alpha)·0² rounds as alpha·sa does,
// fused multiply-add or not; w − lr·0 / (√sa + eps) is w).
void scaleSquares(float* sa, int64_t n, float alpha);

// One LSTM step for B rows of H units, after the products. acts (B, 4H) holds the pre-activations
// of i, f, g and o, and becomes sigmoid(i), sigmoid(f), tanh(g) and sigmoid(o); then
// c = f·cPrev + i·tanh(g), tanhC = tanh(c), h = o·tanhC (tanh as 2·sigmoid(2x) − 1). With hBf16
// (B, H), h also lands there rounded to bf16 (to nearest even, as ATen's conversion rounds): the
// next step's operand for bf16 products, without a conversion of its own.
void lstmForwardStep(
    int64_t B, int64_t H, float* acts, const float* cPrev, float* c, float* tanhC, float* h, uint16_t* hBf16 = nullptr);
// One step of the LSTM backward pass. In: dh (B, H) w.r.t. the state after the step, plus dOut
// (B, H; null: none) w.r.t. the step's output; dc (B, H) w.r.t. the cell after the step; acts,
// tanhC of the step; cPrev. Out: dgates (B, 4H) w.r.t. the pre-activations; dc becomes the
// gradient w.r.t. cPrev; dh is zeroed (for the recurrent product to add into). With dgatesBf16
// (B, 4H), dgates also lands there rounded to bf16, as hBf16 above.
void lstmBackwardStep(int64_t B, int64_t H, float* dh, const float* dOut, float* dc, const float* acts,
    const float* tanhC, const float* cPrev, float* dgates, uint16_t* dgatesBf16 = nullptr);

// Matrix-vector products for batch-1 steps, with the matrix (m, n) laid out once in panels of
// kPanelRows rows (the last one as many as are left, rounded up to 8 with zero rows): panel p
// holds, for each column j in turn, its rows' weights of column j side by side. A product then
// reads the weights front to back and keeps the panel's sums in registers, with no sum across
// lanes at the end; each output is b + w[r][0]·x[0] + w[r][1]·x[1] + … in that order, so the
// result is the same for any split of the panels between threads and in the AVX2 and AVX-512
// builds (both fuse the multiply-adds; the baseline build does not).
constexpr int64_t kPanelRows = 64;
// Floats the panels of an (m, n) matrix take.
int64_t panelFloats(int64_t m, int64_t n);
// Lays out w (m, n; row-major, contiguous) as panels (panelFloats(m, n) floats).
void packPanels(const float* w, int64_t m, int64_t n, float* panels);
// y[r] = (b ? b[r] : y[r]) + Σ_j w[r][j]·x[j] for the rows r in [begin, end) of the packed
// matrix; begin a multiple of kPanelRows, end one too or m. b may be y; x must not overlap y.
void panelMatVec(
    const float* panels, int64_t m, int64_t n, const float* x, const float* b, float* y, int64_t begin, int64_t end);

// Σ x² over [0, n), accumulated in double.
double sumSquares(const float* x, int64_t n);

// Whether every x[i] over [0, n) is finite (neither NaN nor ±inf).
bool allFinite(const float* x, int64_t n);

// dst += src over [0, n); the two never overlap.
void addInto(float* dst, const float* src, int64_t n);

// dst (rows, cols; row r at dst + r·ldDst) += src (rows, cols, contiguous bf16 bit patterns),
// each bf16 widened to float exactly. One pass, where adding a bf16 tensor to a float one in
// ATen converts it into a new float tensor first.
void addBf16Into(float* dst, int64_t ldDst, const uint16_t* src, int64_t rows, int64_t cols);

// As softmaxCrossEntropyRows, without the gradient (scoring): Σ −log softmax(z + bias)[target] over
// the n rows, in double, and *hits += the rows whose target is the first largest logit (argmax's
// choice); z holds z + bias after.
double crossEntropyRows(
    int64_t n, int64_t V, int64_t ldz, float* z, const float* bias, const int64_t* target, int64_t* hits);

// w (N, K) fp32 row-major, K even, rounded to bf16 (as toBf16 rounds: to nearest even, as ATen's
// conversion) twice over in one pass: `rows` (N, K) as w is laid out (null: not wanted), and
// `pairs` (K/2, np, 2) as oneDNN's micro-kernel takes wᵀ, element [k/2][n][k%2] = w[n][k], with
// zero columns N … np − 1 (np ≥ N). Each block of 16 rows is rounded, then moved from L1.
void bf16RowsAndPairs(const float* w, int64_t N, int64_t K, int64_t np, uint16_t* rows, uint16_t* pairs);

// out (n) = x (n) rounded to bf16 as toBf16 rounds (to nearest even, as ATen's conversion), in
// the CPU's widest vectors (ATen's conversion runs in AVX2 here).
void roundBf16(const float* x, int64_t n, uint16_t* out);

// out (n, width) bf16 = the rows `rows` of x (row r at x + rows[r]·width), rounded as toBf16
// rounds (to nearest even, as ATen's conversion): a gather and the conversion in one pass.
void gatherBf16Rows(const float* x, int64_t width, const int64_t* rows, int64_t n, uint16_t* out);

// log Σ e^z over the V logits z (max-shifted, summed in float lanes): the log-softmax's
// normaliser, log p(v) = z[v] − logSumExp(z, V).
double logSumExp(const float* z, int64_t V);

// Softmax cross-entropy of n rows of V logits z + bias (row r at z + r·ldz, ldz ≥ V; bias (V) is added to each row
// first, or nothing when null), in place: each row becomes softmax(z + bias) − onehot(target),
// and is added to colSum (V); returns Σ −log softmax(z + bias)[target], in double. Three passes
// per row (bias and max; exp and its sum; scale and column sum), each over one row in L1. With zb
// (n × V bf16), the rows' softmax − onehot lands there instead, rounded to nearest even as ATen's
// conversion rounds (z is left holding scratch): the bf16 products' operand without a pass of its
// own.
double softmaxCrossEntropyRows(int64_t n, int64_t V, int64_t ldz, float* z, const float* bias, const int64_t* target,
    float* colSum, uint16_t* zb = nullptr);

} // namespace chatbench::kernels
