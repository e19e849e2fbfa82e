// The emulated cuBLASLt (emulator/cublaslt.cc) against the real library's
// contract: GEMMs in every transposition with padded leading dimensions
// match a double reference, low-precision outputs are rounded to nearest
// even exactly as an independent rounding here says, beta 0 never reads C,
// and what cuBLASLt refuses (mixed input types, pointers less aligned than
// the algorithm assumed, a leading dimension below the rows) is refused with
// its status, while a host pointer is a device fault naming the operand.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tetra::emulator {
namespace {

constexpr uint8_t kPadding = 0xa5;  // the bytes between a column's end and the next one

struct Matrix {
  cudaDataType_t type;
  int64_t rows, cols, ld;
};

size_t ElementBytes(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

size_t StorageBytes(const Matrix& m) { return m.ld * m.cols * ElementBytes(m.type); }

// Rounds x to a binary format of `significand_bits` bits (implicit bit
// included) whose smallest normal is 2^min_normal_exponent, to nearest
// even, overflowing past max_finite to infinity: IEEE's rule, in doubles.
double RoundNearestEven(double x, int significand_bits, int min_normal_exponent,
                        double max_finite) {
  if (x == 0.0 || std::isnan(x) || std::isinf(x)) return x;
  int exponent;
  std::frexp(x, &exponent);  // |x| in [2^(exponent - 1), 2^exponent)
  const int unit = std::max(exponent, min_normal_exponent + 1) - significand_bits;
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(x, -unit)), unit);
  if (std::fabs(rounded) > max_finite) return std::copysign(INFINITY, x);
  return rounded;
}

double RoundToBf16(double x) { return RoundNearestEven(x, 8, -126, 0x1.fep127); }
double RoundToHalf(double x) { return RoundNearestEven(x, 11, -14, 65504.0); }

// fp16 bits of a value fp16 holds exactly, and back.
uint16_t HalfBits(double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a < 0x1p-14) return sign | static_cast<uint16_t>(a * 0x1p24);
  int exponent;
  std::frexp(a, &exponent);
  const double mantissa = std::ldexp(a, 1 - exponent) - 1.0;  // in [0, 1)
  return sign | static_cast<uint16_t>((exponent - 1 + 15) << 10) |
         static_cast<uint16_t>(mantissa * 1024.0);
}

double HalfValue(uint16_t bits) {
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  if (exponent == 0x1f) return mantissa != 0 ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// Writes a value the type holds exactly.
void EncodeElement(cudaDataType_t type, double value, uint8_t* out) {
  const float f = static_cast<float>(value);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (type == CUDA_R_32F) {
    std::memcpy(out, &f, 4);
  } else if (type == CUDA_R_16BF) {
    const uint16_t high = static_cast<uint16_t>(bits >> 16);
    std::memcpy(out, &high, 2);
  } else {
    const uint16_t half = HalfBits(value);
    std::memcpy(out, &half, 2);
  }
}

double DecodeElement(cudaDataType_t type, const uint8_t* in) {
  if (type == CUDA_R_32F) {
    float f;
    std::memcpy(&f, in, 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, in, 2);
  if (type == CUDA_R_16F) return HalfValue(bits);
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

// `values` is the rows x cols matrix, column-major and dense; the storage
// has ld-element columns, the rows past `rows` filled with kPadding.
std::vector<uint8_t> Encode(const Matrix& m, const std::vector<double>& values) {
  std::vector<uint8_t> bytes(StorageBytes(m), kPadding);
  for (int64_t j = 0; j < m.cols; ++j) {
    for (int64_t i = 0; i < m.rows; ++i) {
      EncodeElement(m.type, values[i + j * m.rows], &bytes[(i + j * m.ld) * ElementBytes(m.type)]);
    }
  }
  return bytes;
}

double Decode(const Matrix& m, const std::vector<uint8_t>& bytes, int64_t i, int64_t j) {
  return DecodeElement(m.type, &bytes[(i + j * m.ld) * ElementBytes(m.type)]);
}

// Values every type holds exactly: multiples of 1/8 in [-4, 4], so products
// and their sums are exact in fp32 and only the output rounds.
std::vector<double> Eighths(int64_t count, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> eighths(-32, 32);
  std::vector<double> values(count);
  for (double& v : values) v = eighths(random) / 8.0;
  return values;
}

std::vector<double> Uniform(int64_t count, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<double> values(count);
  for (double& v : values) v = uniform(random);
  return values;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&data_, bytes), cudaSuccess);
  }
  explicit DeviceBuffer(const std::vector<uint8_t>& host) : DeviceBuffer(host.size()) {
    EXPECT_EQ(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  char* get() const { return static_cast<char*>(data_); }
  std::vector<uint8_t> Download() const {
    std::vector<uint8_t> host(bytes_);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

// A GEMM's descriptors as kernels/cuda/gemm.cc makes them: C and D share a layout.
struct Shape {
  cublasOperation_t trans_a, trans_b;
  Matrix a, b, c;
};

class Plan {
 public:
  explicit Plan(const Shape& shape) {
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &shape.trans_a,
                                             sizeof(shape.trans_a)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &shape.trans_b,
                                             sizeof(shape.trans_b)),
              CUBLAS_STATUS_SUCCESS);
    const Matrix* matrices[] = {&shape.a, &shape.b, &shape.c};
    cublasLtMatrixLayout_t* layouts[] = {&a_, &b_, &c_};
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(cublasLtMatrixLayoutCreate(layouts[i], matrices[i]->type, matrices[i]->rows,
                                           matrices[i]->cols, matrices[i]->ld),
                CUBLAS_STATUS_SUCCESS);
    }
    EXPECT_EQ(cublasLtCreate(&handle_), CUBLAS_STATUS_SUCCESS);
  }
  ~Plan() {
    cublasLtMatrixLayoutDestroy(c_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatmulDescDestroy(desc_);
    cublasLtDestroy(handle_);
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // The heuristic's algorithms, all 4 minimum alignments set to `alignment`
  // when given; `status` receives its status.
  std::vector<cublasLtMatmulAlgo_t> Algorithms(std::optional<uint32_t> alignment,
                                               cublasStatus_t* status) const {
    cublasLtMatmulPreference_t pref = nullptr;
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    const uint64_t workspace = 1 << 20;
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &workspace, sizeof(workspace)),
              CUBLAS_STATUS_SUCCESS);
    if (alignment.has_value()) {
      for (const auto attribute :
           {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
        EXPECT_EQ(
            cublasLtMatmulPreferenceSetAttribute(pref, attribute, &*alignment, sizeof(*alignment)),
            CUBLAS_STATUS_SUCCESS);
      }
    }
    cublasLtMatmulHeuristicResult_t results[8] = {};
    int found = -1;
    *status =
        cublasLtMatmulAlgoGetHeuristic(handle_, desc_, a_, b_, c_, c_, pref, 8, results, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    EXPECT_GE(found, 0);
    std::vector<cublasLtMatmulAlgo_t> algos;
    for (int i = 0; i < found; ++i) {
      EXPECT_EQ(results[i].state, CUBLAS_STATUS_SUCCESS);
      algos.push_back(results[i].algo);
    }
    return algos;
  }

  // D = alpha op(A) op(B) + beta C with the layouts of the shape.
  cublasStatus_t Matmul(const cublasLtMatmulAlgo_t* algo, float alpha, const void* a, const void* b,
                        float beta, const void* c, void* d) const {
    return cublasLtMatmul(handle_, desc_, &alpha, a, a_, b, b_, &beta, c, c_, d, c_, algo, nullptr,
                          0, nullptr);
  }

  // The first algorithm the heuristic gives for `alignment`.
  cublasLtMatmulAlgo_t FirstAlgorithm(std::optional<uint32_t> alignment = std::nullopt) const {
    cublasStatus_t status;
    const std::vector<cublasLtMatmulAlgo_t> algos = Algorithms(alignment, &status);
    EXPECT_EQ(status, CUBLAS_STATUS_SUCCESS);
    EXPECT_FALSE(algos.empty());
    return algos.empty() ? cublasLtMatmulAlgo_t{} : algos[0];
  }

 private:
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
};

// alpha op(A) op(B) + beta C in doubles; the values are dense column-major.
std::vector<double> Reference(const Shape& s, const std::vector<double>& a,
                              const std::vector<double>& b, double alpha, double beta,
                              const std::vector<double>& c) {
  const bool ta = s.trans_a == CUBLAS_OP_T, tb = s.trans_b == CUBLAS_OP_T;
  const int64_t m = s.c.rows, n = s.c.cols, k = ta ? s.a.rows : s.a.cols;
  std::vector<double> d(m * n);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        sum += (ta ? a[p + i * s.a.rows] : a[i + p * s.a.rows]) *
               (tb ? b[j + p * s.b.rows] : b[p + j * s.b.rows]);
      }
      d[i + j * m] = alpha * sum + (beta != 0.0 ? beta * c[i + j * m] : 0.0);
    }
  }
  return d;
}

// The A and B of an m x n x k GEMM in the transpositions, the leading
// dimensions `pad` elements above the rows.
Shape MakeShape(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                int64_t pad, cudaDataType_t ab, cudaDataType_t c) {
  const int64_t a_rows = ta == CUBLAS_OP_T ? k : m, b_rows = tb == CUBLAS_OP_T ? n : k;
  return Shape{ta,
               tb,
               {ab, a_rows, ta == CUBLAS_OP_T ? m : k, a_rows + pad},
               {ab, b_rows, tb == CUBLAS_OP_T ? k : n, b_rows + pad},
               {c, m, n, m + pad}};
}

TEST(CublasLtEmulatorTest, Fp32MatchesADoubleReferenceInEveryTransposition) {
  for (const cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (const cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      SCOPED_TRACE(testing::Message() << "op(A) " << ta << " op(B) " << tb);
      const Shape s = MakeShape(ta, tb, 5, 7, 9, 3, CUDA_R_32F, CUDA_R_32F);
      const std::vector<double> a = Uniform(s.a.rows * s.a.cols, 1);
      const std::vector<double> b = Uniform(s.b.rows * s.b.cols, 2);
      const std::vector<double> c = Uniform(s.c.rows * s.c.cols, 3);
      const DeviceBuffer da(Encode(s.a, a)), db(Encode(s.b, b)), dc(Encode(s.c, c));
      const Plan plan(s);
      const cublasLtMatmulAlgo_t algo = plan.FirstAlgorithm();
      ASSERT_EQ(plan.Matmul(&algo, 0.5f, da.get(), db.get(), 2.0f, dc.get(), dc.get()),
                CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
      const std::vector<uint8_t> out = dc.Download();
      const std::vector<double> want = Reference(s, a, b, 0.5, 2.0, c);
      for (int64_t j = 0; j < s.c.cols; ++j) {
        for (int64_t i = 0; i < s.c.rows; ++i) {
          EXPECT_NEAR(Decode(s.c, out, i, j), want[i + j * s.c.rows], 1e-5) << i << "," << j;
        }
        // The rows between m and ldc are no part of D.
        for (int64_t i = s.c.rows; i < s.c.ld; ++i) {
          for (size_t byte = 0; byte < 4; ++byte) {
            ASSERT_EQ(out[(i + j * s.c.ld) * 4 + byte], kPadding) << i << "," << j;
          }
        }
      }
    }
  }
}

TEST(CublasLtEmulatorTest, Bf16InputsAccumulateInFp32AndRoundToTheOutputType) {
  for (const cudaDataType_t out_type : {CUDA_R_32F, CUDA_R_16BF}) {
    for (const cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      SCOPED_TRACE(testing::Message() << "output " << out_type << " op(A) " << ta);
      const Shape s = MakeShape(ta, CUBLAS_OP_N, 6, 4, 16, 2, CUDA_R_16BF, out_type);
      const std::vector<double> a = Eighths(s.a.rows * s.a.cols, 4);
      const std::vector<double> b = Eighths(s.b.rows * s.b.cols, 5);
      const DeviceBuffer da(Encode(s.a, a)), db(Encode(s.b, b)), dd(StorageBytes(s.c));
      const Plan plan(s);
      const cublasLtMatmulAlgo_t algo = plan.FirstAlgorithm();
      ASSERT_EQ(plan.Matmul(&algo, 1.0f, da.get(), db.get(), 0.0f, dd.get(), dd.get()),
                CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
      const std::vector<uint8_t> out = dd.Download();
      const std::vector<double> want = Reference(s, a, b, 1.0, 0.0, {});
      int rounded = 0;
      for (int64_t j = 0; j < s.c.cols; ++j) {
        for (int64_t i = 0; i < s.c.rows; ++i) {
          const double exact = want[i + j * s.c.rows];
          const double expected = out_type == CUDA_R_32F ? exact : RoundToBf16(exact);
          EXPECT_EQ(Decode(s.c, out, i, j), expected) << i << "," << j;
          rounded += expected != exact;
        }
      }
      // The bf16 case must have had something to round.
      if (out_type == CUDA_R_16BF) {
        EXPECT_GT(rounded, 0);
      }
    }
  }
}

TEST(CublasLtEmulatorTest, LowPrecisionOutputsRoundHalfToEvenAndKeepNan) {
  // One row of A times B's columns: 256 + 1 and 256 + 3 are halfway between
  // bf16 neighbours (256, 258, 260); NaN in B stays NaN.
  const Shape s = MakeShape(CUBLAS_OP_N, CUBLAS_OP_N, 1, 3, 2, 0, CUDA_R_16BF, CUDA_R_16BF);
  const std::vector<double> a = {256.0, 1.0};
  const std::vector<double> b = {1.0, 1.0, 1.0, 3.0, NAN, 1.0};
  const DeviceBuffer da(Encode(s.a, a)), db(Encode(s.b, b)), dd(StorageBytes(s.c));
  const Plan plan(s);
  const cublasLtMatmulAlgo_t algo = plan.FirstAlgorithm();
  ASSERT_EQ(plan.Matmul(&algo, 1.0f, da.get(), db.get(), 0.0f, dd.get(), dd.get()),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  const std::vector<uint8_t> out = dd.Download();
  EXPECT_EQ(Decode(s.c, out, 0, 0), 256.0);
  EXPECT_EQ(Decode(s.c, out, 0, 1), 260.0);
  EXPECT_TRUE(std::isnan(Decode(s.c, out, 0, 2)));

  // fp16, times alpha 1/2: 2049 / 2 = 1024.5 and 65520 / 2 = 32760 are ties
  // between fp16 neighbours (1024 and 1025; 32752 and 32768), so is
  // 3 * 2^-25 between the subnormals 2^-24 and 2^-23; even wins each time.
  const Shape h = MakeShape(CUBLAS_OP_N, CUBLAS_OP_N, 3, 1, 2, 0, CUDA_R_16F, CUDA_R_16F);
  const std::vector<double> ha = {2048.0, 65504.0, 0x1p-23, 1.0, 16.0, 0x1p-24};
  const std::vector<double> hb = {1.0, 1.0};
  const DeviceBuffer dha(Encode(h.a, ha)), dhb(Encode(h.b, hb)), dhd(StorageBytes(h.c));
  const Plan half_plan(h);
  const cublasLtMatmulAlgo_t half_algo = half_plan.FirstAlgorithm();
  ASSERT_EQ(half_plan.Matmul(&half_algo, 0.5f, dha.get(), dhb.get(), 0.0f, dhd.get(), dhd.get()),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  const std::vector<uint8_t> half_out = dhd.Download();
  const double half_want[] = {1024.0, 32768.0, 0x1p-23};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(RoundToHalf(0.5 * (ha[i] + ha[i + 3])), half_want[i]) << i;  // the test's rounding
    EXPECT_EQ(Decode(h.c, half_out, i, 0), half_want[i]) << i;
  }
  // Alpha 1: 65520 is the tie between fp16's largest, 65504, and 2^16: infinity.
  EXPECT_EQ(RoundToHalf(65520.0), INFINITY);  // the test's own rounding, used below
  ASSERT_EQ(half_plan.Matmul(&half_algo, 1.0f, dha.get(), dhb.get(), 0.0f, dhd.get(), dhd.get()),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(Decode(h.c, dhd.Download(), 1, 0), INFINITY);
}

TEST(CublasLtEmulatorTest, BetaOneAccumulatesIntoCInPlace) {
  const Shape s = MakeShape(CUBLAS_OP_N, CUBLAS_OP_T, 4, 3, 5, 1, CUDA_R_32F, CUDA_R_32F);
  const std::vector<double> a = Eighths(s.a.rows * s.a.cols, 6);
  const std::vector<double> b = Eighths(s.b.rows * s.b.cols, 7);
  const std::vector<double> c = Eighths(s.c.rows * s.c.cols, 8);
  const DeviceBuffer da(Encode(s.a, a)), db(Encode(s.b, b)), dc(Encode(s.c, c));
  const Plan plan(s);
  const cublasLtMatmulAlgo_t algo = plan.FirstAlgorithm();
  ASSERT_EQ(plan.Matmul(&algo, 1.0f, da.get(), db.get(), 1.0f, dc.get(), dc.get()),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  const std::vector<uint8_t> out = dc.Download();
  const std::vector<double> want = Reference(s, a, b, 1.0, 1.0, c);
  for (int64_t j = 0; j < s.c.cols; ++j) {
    for (int64_t i = 0; i < s.c.rows; ++i) {
      EXPECT_EQ(Decode(s.c, out, i, j), want[i + j * s.c.rows]) << i << "," << j;
    }
  }
}

TEST(CublasLtEmulatorTest, BetaZeroNeverReadsC) {
  const Shape s = MakeShape(CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, 0, CUDA_R_32F, CUDA_R_32F);
  const std::vector<double> a = Eighths(s.a.rows * s.a.cols, 9);
  const std::vector<double> b = Eighths(s.b.rows * s.b.cols, 10);
  const std::vector<double> garbage(s.c.rows * s.c.cols, NAN);
  const DeviceBuffer da(Encode(s.a, a)), db(Encode(s.b, b)), dc(Encode(s.c, garbage));
  const Plan plan(s);
  const cublasLtMatmulAlgo_t algo = plan.FirstAlgorithm();
  ASSERT_EQ(plan.Matmul(&algo, 1.0f, da.get(), db.get(), 0.0f, dc.get(), dc.get()),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  const std::vector<uint8_t> out = dc.Download();
  const std::vector<double> want = Reference(s, a, b, 1.0, 0.0, {});
  for (int64_t j = 0; j < s.c.cols; ++j) {
    for (int64_t i = 0; i < s.c.rows; ++i) {
      EXPECT_EQ(Decode(s.c, out, i, j), want[i + j * s.c.rows]) << i << "," << j;
    }
  }
}

TEST(CublasLtEmulatorTest, GemmsOnAStreamRunInPostingOrder) {
  // E = (A B) B2 posted without waiting between: the second reads the first's D.
  const Shape first = MakeShape(CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, 0, CUDA_R_32F, CUDA_R_32F);
  const std::vector<double> a = Eighths(16, 11), b = Eighths(16, 12), b2 = Eighths(16, 13);
  const DeviceBuffer da(Encode(first.a, a)), db(Encode(first.b, b)), db2(Encode(first.b, b2));
  const DeviceBuffer dd(StorageBytes(first.c)), de(StorageBytes(first.c));
  const Plan plan(first);
  const cublasLtMatmulAlgo_t algo = plan.FirstAlgorithm();
  ASSERT_EQ(plan.Matmul(&algo, 1.0f, da.get(), db.get(), 0.0f, dd.get(), dd.get()),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(plan.Matmul(&algo, 1.0f, dd.get(), db2.get(), 0.0f, de.get(), de.get()),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  const std::vector<double> ab = Reference(first, a, b, 1.0, 0.0, {});
  const std::vector<double> want = Reference(first, ab, b2, 1.0, 0.0, {});
  const std::vector<uint8_t> out = de.Download();
  for (int64_t j = 0; j < 4; ++j) {
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(Decode(first.c, out, i, j), want[i + j * 4]) << i << "," << j;
    }
  }
}

TEST(CublasLtEmulatorTest, MixedOrUnsupportedTypesAreNotSupported) {
  struct Types {
    cudaDataType_t a, b, c;
  };
  for (const Types& t :
       {Types{CUDA_R_32F, CUDA_R_16BF, CUDA_R_32F}, Types{CUDA_R_16BF, CUDA_R_32F, CUDA_R_32F},
        Types{CUDA_R_32F, CUDA_R_32F, CUDA_R_16BF}, Types{CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16F}}) {
    SCOPED_TRACE(testing::Message() << "A " << t.a << " B " << t.b << " C " << t.c);
    Shape s = MakeShape(CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, 0, t.a, t.c);
    s.b.type = t.b;
    const Plan plan(s);
    cublasStatus_t status;
    EXPECT_TRUE(plan.Algorithms(std::nullopt, &status).empty());
    EXPECT_EQ(status, CUBLAS_STATUS_NOT_SUPPORTED);
    const DeviceBuffer da(StorageBytes(s.a)), db(StorageBytes(s.b)), dc(StorageBytes(s.c));
    EXPECT_EQ(plan.Matmul(nullptr, 1.0f, da.get(), db.get(), 0.0f, dc.get(), dc.get()),
              CUBLAS_STATUS_NOT_SUPPORTED);
  }
}

TEST(CublasLtEmulatorTest, AnAlgorithmRefusesPointersLessAlignedThanItAssumed) {
  const Shape s = MakeShape(CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, 0, CUDA_R_32F, CUDA_R_32F);
  const std::vector<double> a = Eighths(16, 14), b = Eighths(16, 15);
  // A starts one element into its buffer: 4-byte aligned, not 256.
  std::vector<uint8_t> shifted(4, 0);
  const std::vector<uint8_t> a_bytes = Encode(s.a, a);
  shifted.insert(shifted.end(), a_bytes.begin(), a_bytes.end());
  const DeviceBuffer da(shifted), db(Encode(s.b, b)), dd(StorageBytes(s.c));
  const Plan plan(s);
  cublasStatus_t status;
  const std::vector<cublasLtMatmulAlgo_t> assuming_256 = plan.Algorithms(std::nullopt, &status);
  ASSERT_EQ(status, CUBLAS_STATUS_SUCCESS);
  ASSERT_FALSE(assuming_256.empty());
  for (const cublasLtMatmulAlgo_t& algo : assuming_256) {
    EXPECT_EQ(plan.Matmul(&algo, 1.0f, da.get() + 4, db.get(), 0.0f, dd.get(), dd.get()),
              CUBLAS_STATUS_NOT_SUPPORTED);
  }
  // Not even whole elements: an invalid pointer, whatever the algorithm assumes.
  const cublasLtMatmulAlgo_t assuming_4 = plan.FirstAlgorithm(4);
  EXPECT_EQ(plan.Matmul(&assuming_4, 1.0f, da.get() + 2, db.get(), 0.0f, dd.get(), dd.get()),
            CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_EQ(plan.Matmul(&assuming_4, 1.0f, da.get() + 4, db.get(), 0.0f, dd.get(), dd.get()),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  const std::vector<uint8_t> out = dd.Download();
  const std::vector<double> want = Reference(s, a, b, 1.0, 0.0, {});
  for (int64_t j = 0; j < 4; ++j) {
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(Decode(s.c, out, i, j), want[i + j * 4]) << i << "," << j;
    }
  }
}

TEST(CublasLtEmulatorTest, InvalidDescriptorArgumentsAreRefused) {
  cublasLtMatrixLayout_t layout = nullptr;
  EXPECT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 4, 3, 3),
            CUBLAS_STATUS_INVALID_VALUE);  // ld below the rows
  EXPECT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, static_cast<uint64_t>(-4), 3, 4),
            CUBLAS_STATUS_INVALID_VALUE);  // a negative size
  EXPECT_EQ(cublasLtMatrixLayoutCreate(nullptr, CUDA_R_32F, 4, 3, 4), CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 4, 3, 4), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);

  cublasLtMatmulDesc_t desc = nullptr;
  EXPECT_EQ(cublasLtMatmulDescCreate(nullptr, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const int64_t wide = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof(wide)),
            CUBLAS_STATUS_INVALID_VALUE);
  const int32_t op = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, static_cast<cublasLtMatmulDescAttributes_t>(99),
                                           &op, sizeof(op)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof(op)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);

  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const uint32_t narrow = 1 << 20;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &narrow, sizeof(narrow)),
            CUBLAS_STATUS_INVALID_VALUE);  // a uint64_t attribute
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);

  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
}

TEST(CublasLtEmulatorTest, InPlaceNeedsOneLayoutForCAndD) {
  cublasLtHandle_t handle = nullptr;
  ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t square = nullptr, c = nullptr, d = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&square, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, 4, 4, 8), CUBLAS_STATUS_SUCCESS);
  const DeviceBuffer a(64), b(64), cd(128);
  const float alpha = 1.0f, beta = 0.0f;
  EXPECT_EQ(cublasLtMatmul(handle, desc, &alpha, a.get(), square, b.get(), square, &beta, cd.get(),
                           c, cd.get(), d, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  for (cublasLtMatrixLayout_t layout : {square, c, d}) cublasLtMatrixLayoutDestroy(layout);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
}

TEST(CublasLtEmulatorDeathTest, AHostPointerIsADeviceFault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the emulated streams are threads
  const Shape s = MakeShape(CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, 0, CUDA_R_32F, CUDA_R_32F);
  const std::vector<uint8_t> host_a = Encode(s.a, Eighths(16, 16));
  const DeviceBuffer db(StorageBytes(s.b)), dd(StorageBytes(s.c));
  const Plan plan(s);
  const cublasLtMatmulAlgo_t algo = plan.FirstAlgorithm(4);  // the host vector's alignment passes
  EXPECT_DEATH(
      {
        plan.Matmul(&algo, 1.0f, host_a.data(), db.get(), 0.0f, dd.get(), dd.get());
        cudaStreamSynchronize(nullptr);
      },
      "cublasLtMatmul: A \\(0x[0-9a-f]+\\) is not device memory");
}

TEST(CublasLtEmulatorDeathTest, AnOperandRunningPastItsAllocationIsADeviceFault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Shape s = MakeShape(CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, 0, CUDA_R_32F, CUDA_R_32F);
  const DeviceBuffer da(StorageBytes(s.a)), db(StorageBytes(s.b) - 4), dd(StorageBytes(s.c));
  const Plan plan(s);
  const cublasLtMatmulAlgo_t algo = plan.FirstAlgorithm();
  EXPECT_DEATH(
      {
        plan.Matmul(&algo, 1.0f, da.get(), db.get(), 0.0f, dd.get(), dd.get());
        cudaStreamSynchronize(nullptr);
      },
      "cublasLtMatmul: B \\(0x[0-9a-f]+\\) spans 64 bytes and runs past its device allocation "
      "by 4 bytes");
}

}  // namespace
}  // namespace tetra::emulator
