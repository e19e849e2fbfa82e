// Linear layers on cuBLASLt: column-major GEMMs on row-major tensors (a
// row-major (r, c) matrix is a column-major (c, r) one), fp32 accumulation
// for fp32 and bf16 inputs (no TF32: fp32 runs match the CPU reference).
// Descriptors and the heuristic's candidate algorithms are cached per
// problem, so after the first step a GEMM is one cublasLtMatmul call. The
// heuristic's first choice can still be refused at launch (an algorithm it
// ranks but this device, driver or alignment rejects), so the next candidates
// are tried in the heuristic's order and the first that runs is remembered.
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "core/device_work.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/expect_device.h"

namespace tetra::cuda {
namespace {

cudaDataType_t LtType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      TETRA_CHECK(false) << "no cuBLASLt GEMM for " << DTypeName(dtype);
  }
  return CUDA_R_32F;
}

// Largest power of two up to 256 dividing the address: the heuristic must
// not pick a kernel assuming more alignment than a sliced tensor has.
uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

struct MatmulKey {
  cublasOperation_t trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  cudaDataType_t type_ab, type_c;
  uint32_t align_a, align_b, align_c;
  auto Tie() const {
    return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, type_ab, type_c, align_a, align_b,
                    align_c);
  }
  bool operator<(const MatmulKey& o) const { return Tie() < o.Tie(); }
};

// The problem in words, for the messages of a GEMM cuBLASLt cannot run.
std::string Describe(const MatmulKey& key) {
  const auto op = [](cublasOperation_t t) { return t == CUBLAS_OP_T ? "T" : "N"; };
  const auto type = [](cudaDataType_t t) { return t == CUDA_R_16BF ? "bf16" : "fp32"; };
  std::ostringstream out;
  out << "column-major GEMM m " << key.m << " n " << key.n << " k " << key.k << ", op(A) "
      << op(key.trans_a) << " op(B) " << op(key.trans_b) << ", lda " << key.lda << " ldb "
      << key.ldb << " ldc " << key.ldc << ", A/B " << type(key.type_ab) << " C " << type(key.type_c)
      << ", alignment A " << key.align_a << " B " << key.align_b << " C " << key.align_c
      << " bytes";
  return out.str();
}

// Candidates asked of the heuristic: enough to get past a refused first choice.
constexpr int kMaxAlgorithms = 8;

struct MatmulPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;  // the heuristic's order, best first
  size_t first = 0;                         // algos before this one were refused at launch
};

MatmulPlan MakePlan(const MatmulKey& key) {
  MatmulPlan plan;
  TETRA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  TETRA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                    &key.trans_a, sizeof(key.trans_a)));
  TETRA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                    &key.trans_b, sizeof(key.trans_b)));
  const bool ta = key.trans_a == CUBLAS_OP_T, tb = key.trans_b == CUBLAS_OP_T;
  TETRA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, key.type_ab, ta ? key.k : key.m,
                                                ta ? key.m : key.k, key.lda));
  TETRA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, key.type_ab, tb ? key.n : key.k,
                                                tb ? key.k : key.n, key.ldb));
  TETRA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, key.type_c, key.m, key.n, key.ldc));
  cublasLtMatmulPreference_t pref = nullptr;
  TETRA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t workspace = kGemmWorkspaceBytes;
  TETRA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
  for (const auto& [attribute, value] : aligns) {
    TETRA_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof(value)));
  }
  cublasLtMatmulHeuristicResult_t results[kMaxAlgorithms] = {};
  int found = 0;
  // NOT_SUPPORTED is the heuristic's answer for "no algorithm", not a failure.
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(CublasLtHandle(), plan.desc, plan.a, plan.b, plan.c, plan.c,
                                     pref, kMaxAlgorithms, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  TETRA_CHECK(status == CUBLAS_STATUS_SUCCESS || status == CUBLAS_STATUS_NOT_SUPPORTED)
      << "cublasLtMatmulAlgoGetHeuristic failed for " << Describe(key) << ": "
      << cublasLtGetStatusName(status);
  for (int i = 0; status == CUBLAS_STATUS_SUCCESS && i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) plan.algos.push_back(results[i].algo);
  }
  TETRA_CHECK(!plan.algos.empty())
      << "cuBLASLt has no algorithm for " << Describe(key) << " within a "
      << (kGemmWorkspaceBytes >> 20) << " MiB workspace";
  return plan;
}

// The plans made so far, one per shape: map nodes are stable, so a plan
// found stays valid while the mutex guards its `first`.
struct PlanCache {
  std::mutex mutex;
  std::map<MatmulKey, MatmulPlan> plans;
};
PlanCache& Plans() {
  static PlanCache cache;
  return cache;
}

// The plan for `key`, made on first use, and the first algorithm to try.
MatmulPlan& PlanFor(const MatmulKey& key, size_t* first) {
  PlanCache& cache = Plans();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.plans.find(key);
  if (it == cache.plans.end()) it = cache.plans.emplace(key, MakePlan(key)).first;
  *first = it->second.first;
  return it->second;
}

// Fails naming why every algorithm from `first` on refused `key`.
void FailAllRefused(const MatmulKey& key, const MatmulPlan& plan, size_t first,
                    const cublasStatus_t* refused) {
  std::ostringstream refusals;
  if (first > 0) refusals << "algorithms 0 to " << first - 1 << " refused earlier, ";
  for (size_t i = first; i < plan.algos.size(); ++i) {
    refusals << (i == first ? "" : ", ") << "algorithm " << i << " "
             << cublasLtGetStatusName(refused[i]);
  }
  TETRA_CHECK(false) << "cublasLtMatmul refused all " << plan.algos.size()
                     << " of the heuristic's algorithms for " << Describe(key) << " ("
                     << refusals.str() << ")";
}

// C (m, n) = A' (m, k) * B' (k, n) + beta * C, column-major, A' = op(A).
void Matmul(cublasOperation_t trans_a, cublasOperation_t trans_b, int64_t m, int64_t n, int64_t k,
            const Tensor& a, int64_t lda, const Tensor& b, int64_t ldb, float beta, const Tensor& c,
            int64_t ldc) {
  ExpectDevice(a, "Linear", "an input");
  ExpectDevice(b, "Linear", "an input");
  ExpectDevice(c, "Linear", "the output");
  TETRA_CHECK(a.dtype() == b.dtype())
      << "GEMM inputs are " << DTypeName(a.dtype()) << " and " << DTypeName(b.dtype());
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: C = beta * C, with beta 0 or 1 here
    if (beta == 0.0f) ZeroBytes(c.raw(), c.nbytes());
    return;
  }
  const MatmulKey key{trans_a,
                      trans_b,
                      m,
                      n,
                      k,
                      lda,
                      ldb,
                      ldc,
                      LtType(a.dtype()),
                      LtType(c.dtype()),
                      Alignment(a.raw()),
                      Alignment(b.raw()),
                      Alignment(c.raw())};
  size_t first = 0;
  MatmulPlan& plan = PlanFor(key, &first);
  const float alpha = 1.0f;
  // The statuses of refused algorithms; words only if every one is refused
  // (a stream built on every call would cost the hot path).
  cublasStatus_t refused[kMaxAlgorithms];
  CountDeviceWork(DeviceWork::kLaunch);
  for (size_t i = first; i < plan.algos.size(); ++i) {
    const cublasStatus_t status =
        cublasLtMatmul(CublasLtHandle(), plan.desc, &alpha, a.raw(), plan.a, b.raw(), plan.b, &beta,
                       c.raw(), plan.c, c.raw(), plan.c, &plan.algos[i], GemmWorkspace(),
                       kGemmWorkspaceBytes, CurrentStream());
    if (status == CUBLAS_STATUS_SUCCESS) {
      if (i != first) {
        std::lock_guard<std::mutex> lock(Plans().mutex);
        plan.first = std::max(plan.first, i);
      }
      return;
    }
    refused[i] = status;
  }
  FailAllRefused(key, plan, first, refused);
}

}  // namespace

// y (rows, out) = x (rows, in) w (out, in)^T; column-major: y^T = op_T(w) x^T.
void Linear(const Tensor& x, const Tensor& w, const Tensor& y) {
  const int64_t in = w.dim(1), out = w.dim(0), rows = x.numel() / in;
  Matmul(CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, w, in, x, in, 0.0f, y, out);
}

void LinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                    const Tensor& dw, bool accumulate_dx, int64_t real_out) {
  const int64_t in = w.dim(1), out = w.dim(0), rows = x.numel() / in;
  // Only the first real_out outputs: dy's rows keep their stride `out`.
  // dw (out, in) += dy^T x; column-major: dw^T (in, out) += x^T (in, rows) op_T(dy^T).
  if (dw.defined())
    Matmul(CUBLAS_OP_N, CUBLAS_OP_T, in, real_out, rows, x, in, dy, out, 1.0f, dw, in);
  // dx (rows, in) = dy w; column-major: dx^T (in, rows) = w^T (in, out) dy^T (out, rows).
  if (dx.defined()) {
    Matmul(CUBLAS_OP_N, CUBLAS_OP_N, in, rows, real_out, w, in, dy, out,
           accumulate_dx ? 1.0f : 0.0f, dx, in);
  }
}

}  // namespace tetra::cuda
