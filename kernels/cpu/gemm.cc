#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <limits>

#include "core/logging.h"

namespace tetra::cpu {

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c, int64_t lda) {
  constexpr int64_t kMaxDim = std::numeric_limits<blasint>::max();  // BLAS takes blasint
  TETRA_CHECK(m >= 0 && n >= 0 && k >= 0 && m <= kMaxDim && n <= kMaxDim && k <= kMaxDim &&
              lda >= 0 && lda <= kMaxDim)
      << "m=" << m << " n=" << n << " k=" << k << " lda=" << lda;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // op(A) * op(B) is empty: only the beta * C term remains.
    if (beta == 0.0f) {
      std::fill(c, c + m * n, 0.0f);
    } else {
      for (int64_t i = 0; i < m * n; ++i) c[i] *= beta;
    }
    return;
  }
  // Leading dimensions of the matrices as stored (row-major: the row length).
  if (lda == 0) lda = trans_a ? m : k;
  const int64_t ldb = trans_b ? k : n;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(n));
}

void LinearForward(const float* x, const float* w, int64_t rows, int64_t in, int64_t out,
                   float* y) {
  Gemm(/*trans_a=*/false, /*trans_b=*/true, rows, out, in, 1.0f, x, w, 0.0f, y);
}

void LinearBackward(const float* dy, const float* x, const float* w, int64_t rows, int64_t in,
                    int64_t out, int64_t dy_stride, float* dx, float* dw, bool accumulate_dx) {
  TETRA_CHECK(dy_stride >= out) << "dy rows " << dy_stride << " apart hold " << out << " outputs";
  if (dx != nullptr) {
    Gemm(/*trans_a=*/false, /*trans_b=*/false, rows, in, out, 1.0f, dy, w,
         accumulate_dx ? 1.0f : 0.0f, dx, dy_stride);
  }
  if (dw != nullptr)
    Gemm(/*trans_a=*/true, /*trans_b=*/false, out, in, rows, 1.0f, dy, x, 1.0f, dw, dy_stride);
}

}  // namespace tetra::cpu
