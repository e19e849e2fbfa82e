// Single-precision matrix products on the CPU: a thin row-major wrapper over
// OpenBLAS's cblas_sgemm, and the linear-layer forward/backward built on it
// with Hugging Face's weight layout W (out, in), so y = x W^T.
#ifndef TETRA_KERNELS_CPU_GEMM_H_
#define TETRA_KERNELS_CPU_GEMM_H_

#include <cstdint>

namespace tetra::cpu {

// C (m, n) = alpha * op(A) * op(B) + beta * C, all row-major and contiguous
// but for A's rows, lda floats apart (0: contiguous).
// op(A) is (m, k): A is stored (m, k), or (k, m) when trans_a.
// op(B) is (k, n): B is stored (k, n), or (n, k) when trans_b.
// beta == 0 overwrites C (NaNs in C do not propagate).
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c, int64_t lda = 0);

// y (rows, out) = x (rows, in) * w^T, w (out, in).
void LinearForward(const float* x, const float* w, int64_t rows, int64_t in, int64_t out, float* y);

// dx (rows, in) = dy (rows, out) * w, written, or added onto dx when
// accumulate_dx (an input read by several linears, e.g. by q, k and v);
// skipped when dx is null.
// dw (out, in) += dy^T * x, accumulated over calls (micro-batches); skipped
// when dw is null (a split backward's input half).
// dy's rows are dy_stride >= out floats apart: a padded LM head's logits
// gradient, of which only the first `out` columns (w's, dw's real rows) take part.
void LinearBackward(const float* dy, const float* x, const float* w, int64_t rows, int64_t in,
                    int64_t out, int64_t dy_stride, float* dx, float* dw, bool accumulate_dx);

}  // namespace tetra::cpu

#endif  // TETRA_KERNELS_CPU_GEMM_H_
