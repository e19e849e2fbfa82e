// The emulated cuBLASLt: the GEMMs of kernels/cuda/gemm.cc run on the CPU
// under the real library's rules, so a GEMM the device would refuse is
// refused here too, with the same status: descriptor arguments are checked
// as they are set, the heuristic offers algorithms only for the type
// combinations cuBLASLt runs, an algorithm assumes the preference's
// alignments and refuses less aligned pointers, and an operand that is not
// device memory (or runs past its allocation) ends the process the way a
// device fault would. The product runs asynchronously on the stream in
// fp32, each operand read exactly as its type, the result rounded to D's
// type to nearest even.
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "emulator/emulated_device.h"
#include "emulator/failure.h"

// The objects behind the header's opaque handles.
struct cublasLtContext {};  // the emulated library keeps nothing per handle

struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute_type;
  cudaDataType_t scale_type;
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
};

struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  int64_t rows, cols, ld;
  uint64_t extent_bytes;  // from the first element to the last one, inclusive
};

struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace_bytes = 0;
  // A, B, C, D. Unset, the real library assumes 256-byte aligned pointers.
  uint32_t min_alignment[4] = {256, 256, 256, 256};
};

namespace tetra::emulator {
namespace {

// The element types the emulated kernels read and write.
enum class Element { kF32, kBF16, kF16 };

// Bytes of one element of a type the runtime knows; 0 for an unknown type.
size_t ElementBytes(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_64F:
      return 8;
    case CUDA_R_16F:
      return 2;
    case CUDA_R_32I:
      return 4;
    case CUDA_R_16BF:
      return 2;
  }
  return 0;
}

std::optional<Element> ElementOf(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F:
      return Element::kF32;
    case CUDA_R_16BF:
      return Element::kBF16;
    case CUDA_R_16F:
      return Element::kF16;
    default:
      return std::nullopt;
  }
}

bool IsComputeType(cublasComputeType_t type) {
  switch (type) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
    case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return true;
  }
  return false;
}

// cuBLASLt's table for fp32 compute and scale: A and B of one type, C and
// D of one type, fp32 or the inputs' type. The emulator runs only this
// compute type (tetra's); the others are NOT_SUPPORTED here.
bool IsSupportedTypeCombination(const cublasLtMatmulDescOpaque_t& desc, cudaDataType_t a,
                                cudaDataType_t b, cudaDataType_t c, cudaDataType_t d) {
  if (desc.compute_type != CUBLAS_COMPUTE_32F || desc.scale_type != CUDA_R_32F) return false;
  if (a != b || c != d) return false;
  switch (a) {
    case CUDA_R_32F:
      return c == CUDA_R_32F;
    case CUDA_R_16BF:
      return c == CUDA_R_16BF || c == CUDA_R_32F;
    case CUDA_R_16F:
      return c == CUDA_R_16F || c == CUDA_R_32F;
    default:
      return false;
  }
}

const char* TypeName(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F:
      return "CUDA_R_32F";
    case CUDA_R_64F:
      return "CUDA_R_64F";
    case CUDA_R_16F:
      return "CUDA_R_16F";
    case CUDA_R_32I:
      return "CUDA_R_32I";
    case CUDA_R_16BF:
      return "CUDA_R_16BF";
  }
  return "an unknown type";
}

// Whether the four layouts make one GEMM the descriptor can run: op(A) is
// m x k, op(B) k x n, C and D m x n (INVALID_VALUE when the shapes
// disagree, NOT_SUPPORTED for a type combination no kernel runs).
cublasStatus_t CheckProblem(const cublasLtMatmulDescOpaque_t& desc,
                            const cublasLtMatrixLayoutOpaque_t& a,
                            const cublasLtMatrixLayoutOpaque_t& b,
                            const cublasLtMatrixLayoutOpaque_t& c,
                            const cublasLtMatrixLayoutOpaque_t& d) {
  const bool ta = desc.trans_a == CUBLAS_OP_T, tb = desc.trans_b == CUBLAS_OP_T;
  const int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const int64_t b_rows = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  if (b_rows != k || c.rows != m || c.cols != n || d.rows != m || d.cols != n) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!IsSupportedTypeCombination(desc, a.type, b.type, c.type, d.type)) {
    Explain(
        absl::StrFormat("cuBLASLt has no kernel for A %s, B %s, C %s, D %s (compute type %d): "
                        "A and B must be of one type, C and D fp32 or the inputs' type",
                        TypeName(a.type), TypeName(b.type), TypeName(c.type), TypeName(d.type),
                        static_cast<int>(desc.compute_type)));
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// What an algorithm from the emulated heuristic records: that it was made
// here, which of the heuristic's choices it is, and the pointer alignments
// and workspace limit it was chosen for (no emulated algorithm needs any
// workspace, so the limit never refuses one).
constexpr uint64_t kAlgoTag = 0x74657472614c7400;  // "tetraLt\0"
constexpr int kAlgorithms = 3;
enum AlgoField { kTag, kIndex, kAlignA, kAlignB, kAlignC, kAlignD, kMaxWorkspace };

cublasLtMatmulAlgo_t MakeAlgo(const cublasLtMatmulPreferenceOpaque_t& pref, int index) {
  cublasLtMatmulAlgo_t algo = {};
  algo.data[kTag] = kAlgoTag;
  algo.data[kIndex] = static_cast<uint64_t>(index);
  for (int i = 0; i < 4; ++i) algo.data[kAlignA + i] = pref.min_alignment[i];
  algo.data[kMaxWorkspace] = pref.max_workspace_bytes;
  return algo;
}

template <typename T>
T ReadValue(const void* buf) {
  T value;
  std::memcpy(&value, buf, sizeof(T));
  return value;
}

float HalfToFloat(uint16_t h) { return __half2float(__ushort_as_half(h)); }
uint16_t FloatToHalf(float f) { return __half_as_ushort(__float2half_rn(f)); }

// Reads `count` elements `stride` elements apart into fp32, exactly.
template <typename T, typename ToFloat>
void LoadAs(const char* base, int64_t count, int64_t stride, float* out, ToFloat to_float) {
  for (int64_t i = 0; i < count; ++i) {
    out[i] = to_float(ReadValue<T>(base + i * stride * static_cast<int64_t>(sizeof(T))));
  }
}

void Load(Element type, const char* base, int64_t count, int64_t stride, float* out) {
  switch (type) {
    case Element::kF32:
      LoadAs<float>(base, count, stride, out, [](float x) { return x; });
      return;
    case Element::kBF16:
      LoadAs<uint16_t>(base, count, stride, out,
                       [](uint16_t x) { return __bfloat162float(__ushort_as_bfloat16(x)); });
      return;
    case Element::kF16:
      LoadAs<uint16_t>(base, count, stride, out, HalfToFloat);
      return;
  }
}

// Writes `count` consecutive elements, rounded to nearest even.
void Store(Element type, const float* values, int64_t count, char* base) {
  for (int64_t i = 0; i < count; ++i) {
    switch (type) {
      case Element::kF32:
        std::memcpy(base + 4 * i, &values[i], 4);
        break;
      case Element::kBF16: {
        const uint16_t x = __bfloat16_as_ushort(__float2bfloat16_rn(values[i]));
        std::memcpy(base + 2 * i, &x, 2);
        break;
      }
      case Element::kF16: {
        const uint16_t x = FloatToHalf(values[i]);
        std::memcpy(base + 2 * i, &x, 2);
        break;
      }
    }
  }
}

struct Operand {
  const char* data;
  Element type;
  int64_t element_bytes, ld;
};

// One GEMM as it runs on the stream: everything by value, since the
// descriptors may be destroyed before it runs.
struct Gemm {
  bool trans_a, trans_b;
  int64_t m, n, k;
  Operand a, b, c, d;
  float alpha, beta;
};

// D = alpha op(A) op(B) + beta C, column-major. op(A) is read once into fp32
// so each column of D is a sum of contiguous axpys; every element is still
// summed over k in order, in fp32.
void Run(const Gemm& g) {
  if (g.m == 0 || g.n == 0) return;
  std::vector<float> a(static_cast<size_t>(g.m * g.k));
  for (int64_t p = 0; p < g.k; ++p) {
    const char* column =
        g.trans_a ? g.a.data + p * g.a.element_bytes : g.a.data + p * g.a.ld * g.a.element_bytes;
    Load(g.a.type, column, g.m, g.trans_a ? g.a.ld : 1, &a[p * g.m]);
  }
  std::vector<float> b(g.k), acc(g.m), c(g.m);
  for (int64_t j = 0; j < g.n; ++j) {
    const char* column =
        g.trans_b ? g.b.data + j * g.b.element_bytes : g.b.data + j * g.b.ld * g.b.element_bytes;
    Load(g.b.type, column, g.k, g.trans_b ? g.b.ld : 1, b.data());
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t p = 0; p < g.k; ++p) {
      const float bp = b[p];
      const float* ap = &a[p * g.m];
      for (int64_t i = 0; i < g.m; ++i) acc[i] += ap[i] * bp;
    }
    if (g.beta != 0.0f) {  // beta 0: C is not read, whatever it holds
      Load(g.c.type, g.c.data + j * g.c.ld * g.c.element_bytes, g.m, 1, c.data());
      for (int64_t i = 0; i < g.m; ++i) acc[i] = g.alpha * acc[i] + g.beta * c[i];
    } else {
      for (int64_t i = 0; i < g.m; ++i) acc[i] = g.alpha * acc[i];
    }
    // D's Operand holds cublasLtMatmul's non-const D.
    Store(g.d.type, acc.data(), g.m, const_cast<char*>(g.d.data) + j * g.d.ld * g.d.element_bytes);
  }
}

std::string Address(const void* p) {
  std::ostringstream out;
  out << p;
  return out.str();
}

// What a device would fault on: `bytes` from `p` must lie in one live
// allocation of the device the call runs on.
void ExpectDeviceMemory(const char* operand, const void* p, uint64_t bytes) {
  if (bytes == 0) return;
  const std::string where = std::string("cublasLtMatmul: ") + operand + " (" + Address(p) + ")";
  const std::optional<DeviceRange> start = FindDeviceRange(p, 1);
  if (!start.has_value()) Fail(where + " is not device memory");
  if (!FindDeviceRange(p, bytes).has_value()) {
    const uint64_t offset = static_cast<const char*>(p) - start->begin;
    Fail(where + " spans " + std::to_string(bytes) + " bytes and runs past its device allocation" +
         " by " + std::to_string(offset + bytes - start->bytes) + " bytes");
  }
  if (start->device != CurrentDevice()) {
    Fail(where + " is memory of device " + std::to_string(start->device) +
         ", but the call runs on device " + std::to_string(CurrentDevice()));
  }
}

// Whether an algorithm assuming `assumed`-byte alignment takes the pointer:
// an address must hold whole elements (else INVALID_VALUE) and be as aligned
// as the algorithm assumes (else NOT_SUPPORTED).
cublasStatus_t CheckAlignment(const void* p, size_t element_bytes, uint64_t assumed) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  if (address % element_bytes != 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (assumed != 0 && address % assumed != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

// One operand's pointer as cublasLtMatmul checks it: whether the product
// reads or writes it, and the algorithm field with the alignment it assumes.
struct OperandPointer {
  const char* name;
  const void* p;
  const cublasLtMatrixLayoutOpaque_t* layout;
  AlgoField alignment;
  bool read_or_written;
};

// The first status an operand's pointer gets from CheckAlignment under
// `algo`'s alignments, or SUCCESS.
cublasStatus_t CheckAlignments(std::span<const OperandPointer> pointers,
                               const cublasLtMatmulAlgo_t& algo) {
  for (const OperandPointer& x : pointers) {
    if (!x.read_or_written) continue;
    const cublasStatus_t aligned =
        CheckAlignment(x.p, ElementBytes(x.layout->type), algo.data[x.alignment]);
    if (aligned != CUBLAS_STATUS_SUCCESS) return aligned;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// The operand at `p` with `layout`, as the stream's GEMM reads it.
Operand OperandOf(const void* p, const cublasLtMatrixLayoutOpaque_t& layout) {
  return Operand{static_cast<const char*>(p), *ElementOf(layout.type),
                 static_cast<int64_t>(ElementBytes(layout.type)), layout.ld};
}

}  // namespace
}  // namespace tetra::emulator

namespace emu = ::tetra::emulator;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
  }
  return "unknown status";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType) {
  if (matmulDesc == nullptr || !emu::IsComputeType(computeType) ||
      emu::ElementBytes(scaleType) == 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *matmulDesc = new cublasLtMatmulDescOpaque_t{computeType, scaleType};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t sizeInBytes) {
  if (matmulDesc == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      if (sizeInBytes != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      const int32_t op = emu::ReadValue<int32_t>(buf);
      if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return CUBLAS_STATUS_INVALID_VALUE;
      if (attr == CUBLASLT_MATMUL_DESC_TRANSA) {
        matmulDesc->trans_a = static_cast<cublasOperation_t>(op);
      } else {
        matmulDesc->trans_b = static_cast<cublasOperation_t>(op);
      }
      return CUBLAS_STATUS_SUCCESS;
    }
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  const size_t element_bytes = emu::ElementBytes(type);
  // Sizes are 64-bit signed inside cuBLASLt: a "negative" one is refused.
  if (matLayout == nullptr || element_bytes == 0 || rows > INT64_MAX || cols > INT64_MAX ||
      ld < static_cast<int64_t>(rows)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // The extent, (cols - 1) ld + rows elements, must be addressable.
  int64_t extent = 0;
  if (rows > 0 && cols > 0 &&
      (__builtin_mul_overflow(static_cast<int64_t>(cols - 1), ld, &extent) ||
       __builtin_add_overflow(extent, static_cast<int64_t>(rows), &extent) ||
       __builtin_mul_overflow(extent, static_cast<int64_t>(element_bytes), &extent))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *matLayout =
      new cublasLtMatrixLayoutOpaque_t{type, static_cast<int64_t>(rows), static_cast<int64_t>(cols),
                                       ld, static_cast<uint64_t>(extent)};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes) {
  if (pref == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (sizeInBytes != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      pref->max_workspace_bytes = emu::ReadValue<uint64_t>(buf);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      if (sizeInBytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      pref->min_alignment[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] =
          emu::ReadValue<uint32_t>(buf);
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (operationDesc == nullptr || Adesc == nullptr || Bdesc == nullptr || Cdesc == nullptr ||
      Ddesc == nullptr || preference == nullptr || requestedAlgoCount <= 0 ||
      heuristicResultsArray == nullptr || returnAlgoCount == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returnAlgoCount = 0;
  const cublasStatus_t status = emu::CheckProblem(*operationDesc, *Adesc, *Bdesc, *Cdesc, *Ddesc);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  // The emulated kernels need no workspace, so every algorithm fits any limit.
  const int count = std::min(requestedAlgoCount, emu::kAlgorithms);
  for (int i = 0; i < count; ++i) {
    heuristicResultsArray[i] = {};
    heuristicResultsArray[i].algo = emu::MakeAlgo(*preference, i);
    heuristicResultsArray[i].workspaceSize = 0;
    heuristicResultsArray[i].state = CUBLAS_STATUS_SUCCESS;
    heuristicResultsArray[i].wavesCount = 1.0f;
  }
  *returnAlgoCount = count;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (computeDesc == nullptr || alpha == nullptr || Adesc == nullptr || Bdesc == nullptr ||
      beta == nullptr || Cdesc == nullptr || Ddesc == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const cublasStatus_t problem = emu::CheckProblem(*computeDesc, *Adesc, *Bdesc, *Cdesc, *Ddesc);
  if (problem != CUBLAS_STATUS_SUCCESS) return problem;
  // No algorithm: the heuristic's first choice for default preferences.
  const cublasLtMatmulAlgo_t chosen =
      algo != nullptr ? *algo : emu::MakeAlgo(cublasLtMatmulPreferenceOpaque_t{}, 0);
  if (chosen.data[emu::kTag] != emu::kAlgoTag) return CUBLAS_STATUS_INVALID_VALUE;
  // In place, C and D must be one layout.
  if (C == D && Cdesc->ld != Ddesc->ld) return CUBLAS_STATUS_INVALID_VALUE;
  // Scale type fp32 (CheckProblem): alpha and beta are host floats.
  const float alpha_value = emu::ReadValue<float>(alpha);
  const float beta_value = emu::ReadValue<float>(beta);
  // With beta 0, C is no input: it need not be valid.
  const emu::OperandPointer pointers[] = {{"A", A, Adesc, emu::kAlignA, true},
                                          {"B", B, Bdesc, emu::kAlignB, true},
                                          {"C", C, Cdesc, emu::kAlignC, beta_value != 0.0f},
                                          {"D", D, Ddesc, emu::kAlignD, true}};
  const cublasStatus_t aligned = emu::CheckAlignments(pointers, chosen);
  if (aligned != CUBLAS_STATUS_SUCCESS) return aligned;
  // The launch is accepted; a real device faults on a bad address later, the
  // emulated one ends the process now, naming the operand.
  for (const emu::OperandPointer& x : pointers) {
    if (x.read_or_written) emu::ExpectDeviceMemory(x.name, x.p, x.layout->extent_bytes);
  }
  if (workspace != nullptr) emu::ExpectDeviceMemory("workspace", workspace, workspaceSizeInBytes);

  const bool ta = computeDesc->trans_a == CUBLAS_OP_T;
  const emu::Gemm gemm{ta,
                       computeDesc->trans_b == CUBLAS_OP_T,
                       Ddesc->rows,
                       Ddesc->cols,
                       ta ? Adesc->rows : Adesc->cols,
                       emu::OperandOf(A, *Adesc),
                       emu::OperandOf(B, *Bdesc),
                       emu::OperandOf(C, *Cdesc),
                       emu::OperandOf(D, *Ddesc),
                       alpha_value,
                       beta_value};
  emu::Enqueue(stream, [gemm] { emu::Run(gemm); });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
