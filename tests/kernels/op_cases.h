// The op table (tests/kernels/op_table.h): every op of kernels/ops.h, in
// fp32 and (where the op takes activations) bf16, at awkward shapes (odd
// sizes, no tile fitting exactly), each output with its tolerance and the
// reason for it. tests/kernels/op_table_test.cc runs every case on the CPU;
// tests/kernels/cuda/op_table_gpu_test.cc runs every case on each device
// backend against the CPU.
#ifndef TETRA_TESTS_KERNELS_OP_CASES_H_
#define TETRA_TESTS_KERNELS_OP_CASES_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/op_types.h"
#include "kernels/ops.h"
#include "tests/kernels/op_table.h"

namespace tetra::testing {

// Tolerances shared by many cases, with their reasons.
// A bf16 output adds one rounding of at most 2^-9 relative to the fp32 result.
inline constexpr double kBf16Rounding = 4e-3;
inline constexpr Tolerance kElementwiseTol{
    1e-6, 2e-6,
    "one or two fp32 operations per element; CUDA's expf (2 ulp) "
    "against the CPU's polynomial (1.5 ulp), FMA contraction"};
inline constexpr Tolerance kBf16ElementwiseTol{1e-6, kBf16Rounding,
                                               "elementwise, plus one bf16 rounding"};

inline Tolerance Elementwise(DType dtype) {
  return dtype == DType::kF32 ? kElementwiseTol : kBf16ElementwiseTol;
}

inline std::string CaseName(const std::string& op, DType dtype, const std::string& shape) {
  return absl::StrCat(op, " ", DTypeName(dtype), " ", shape);
}

inline void AddLinearCases(std::vector<OpCase>* cases) {
  // Both sides sum k <= 48 products of O(1) values in fp32, in different
  // orders: ~k x 6e-8 x |terms|, under 1e-5.
  constexpr Tolerance kFp32Tol{1e-4, 1e-4, "fp32 sums of 48 products in different orders"};
  constexpr Tolerance kBf16OutTol{1e-4, kBf16Rounding,
                                  "fp32 sums of 48 products, one bf16 rounding"};
  constexpr int64_t kRows = 37, kIn = 48, kOut = 29;  // odd sizes: no tile fits exactly
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tolerance out_tol = dtype == DType::kF32 ? kFp32Tol : kBf16OutTol;
    cases->push_back(
        {CaseName("linear", dtype, "37x48 . 29x48^T"), [=](const Backend& b, Outputs* out) {
           const Tensor x = b.In(HostRandom({kRows, kIn}, 1), dtype);
           const Tensor w = b.In(HostRandom({kOut, kIn}, 2), dtype);
           const Tensor y = b.Out({kRows, kOut}, dtype), y32 = b.Out({kRows, kOut});
           ops::Linear(x, w, y);
           ops::Linear(x, w, y32);  // fp32 output of bf16 inputs
           out->Add("y", y, out_tol);
           out->Add("y fp32", y32, kFp32Tol);
         }});
    for (bool accumulate_dx : {false, true}) {
      cases->push_back(
          {CaseName(accumulate_dx ? "linear_backward accumulating dx" : "linear_backward", dtype,
                    "37x48, 29x48"),
           [=](const Backend& b, Outputs* out) {
             const Tensor x = b.In(HostRandom({kRows, kIn}, 1), dtype);
             const Tensor w = b.In(HostRandom({kOut, kIn}, 2), dtype);
             const Tensor dy = b.In(HostRandom({kRows, kOut}, 3), dtype);
             const Tensor dx = b.In(HostRandom({kRows, kIn}, 4), dtype);
             const Tensor dw = b.In(HostRandom({kOut, kIn}, 5));  // fp32, earlier micro-batches
             ops::LinearBackward(dy, x, w, dx, dw, accumulate_dx);
             out->Add("dx", dx, out_tol);
             out->Add("dw", dw, kFp32Tol);
           }});
    }
    // A padded LM head: only the first 20 of the 29 outputs take part, dw's
    // other rows (here the earlier gradient) left as they are.
    cases->push_back({CaseName("linear_backward 20 real outputs", dtype, "37x48, 29x48"),
                      [=](const Backend& b, Outputs* out) {
                        const Tensor x = b.In(HostRandom({kRows, kIn}, 1), dtype);
                        const Tensor w = b.In(HostRandom({kOut, kIn}, 2), dtype);
                        const Tensor dy = b.In(HostRandom({kRows, kOut}, 3), dtype);
                        const Tensor dx = b.Out({kRows, kIn}, dtype);
                        const Tensor dw = b.In(HostRandom({kOut, kIn}, 5));
                        ops::LinearBackward(dy, x, w, dx, dw, /*accumulate_dx=*/false,
                                            /*real_out=*/20);
                        out->Add("dx", dx, out_tol);
                        out->Add("dw", dw, kFp32Tol);
                      }});
    // The halves of a split backward (kernels/weight_gradients.h), each alone.
    cases->push_back({CaseName("linear_backward halves", dtype, "37x48, 29x48"),
                      [=](const Backend& b, Outputs* out) {
                        const Tensor x = b.In(HostRandom({kRows, kIn}, 1), dtype);
                        const Tensor w = b.In(HostRandom({kOut, kIn}, 2), dtype);
                        const Tensor dy = b.In(HostRandom({kRows, kOut}, 3), dtype);
                        const Tensor dx = b.In(HostRandom({kRows, kIn}, 4), dtype);
                        const Tensor dw = b.In(HostRandom({kOut, kIn}, 5));
                        ops::LinearBackward(dy, x, w, Tensor(), dw);
                        ops::LinearBackward(dy, x, w, dx, Tensor(), /*accumulate_dx=*/true);
                        out->Add("dw alone", dw, kFp32Tol);
                        out->Add("dx alone", dx, out_tol);
                      }});
  }
}

inline void AddEmbeddingCases(std::vector<OpCase>* cases) {
  constexpr int64_t kVocab = 50, kDim = 40, kTokens = 97;
  // The scatter adds the same values in another order (atomics): a token
  // repeated r times sums r terms, ~r ulp.
  constexpr Tolerance kScatterTol{1e-6, 1e-6, "repeated ids' rows summed in another order"};
  const Tensor tokens = [] {  // every id of the vocabulary, many repeated
    std::vector<int32_t> ids(kTokens);
    for (int64_t i = 0; i < kTokens; ++i) ids[i] = static_cast<int32_t>((i * 7) % kVocab);
    return HostInts(ids, {kTokens});
  }();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    cases->push_back(
        {CaseName("embedding", dtype, "97 ids of 50x40"), [=](const Backend& b, Outputs* out) {
           const Tensor ids = b.Exact(tokens);
           const Tensor table = b.In(HostRandom({kVocab, kDim}, 1), dtype);
           const Tensor y = b.Out({kTokens, kDim}, dtype);
           ops::Embedding(ids, table, y);
           out->Add("out", y, kExact);
           const Tensor dtable = b.In(HostRandom({kVocab, kDim}, 3));
           ops::EmbeddingBackward(ids, b.In(HostRandom({kTokens, kDim}, 2), dtype), dtable);
           out->Add("dtable", dtable, kScatterTol);
         }});
  }
  cases->push_back(
      {CaseName("embedding_shard", DType::kF32, "ids [20, 35) of 50"),
       [=](const Backend& b, Outputs* out) {
         const int64_t begin = 20, rows = 15;
         const Tensor ids = b.Exact(tokens);
         const Tensor y = b.Out({kTokens, kDim});
         ops::EmbeddingShard(ids, b.In(HostRandom({rows, kDim}, 1)), begin, y);
         out->Add("out", y, kExact);
         const Tensor dtable = b.Exact(Tensor::Zeros({rows, kDim}));
         ops::EmbeddingShardBackward(ids, b.In(HostRandom({kTokens, kDim}, 2)), begin, dtable);
         out->Add("dtable", dtable, kScatterTol);
       }});
}

inline void AddRmsNormCases(std::vector<OpCase>* cases) {
  // The CPU sums squares in double, the GPU in fp32 over <= 300 terms: rstd
  // differs by ~1e-6 relative; dw sums 45 rows in a different order.
  constexpr Tolerance kFp32Tol{1e-5, 1e-5, "sums of 300 squares and of 45 rows in fp32 vs double"};
  constexpr Tolerance kBf16OutTol{1e-5, kBf16Rounding, "as fp32, plus one bf16 rounding"};
  constexpr int64_t kRows = 45, kDim = 300;  // dim not a multiple of the block
  constexpr float kEps = 1e-5f;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tolerance out_tol = dtype == DType::kF32 ? kFp32Tol : kBf16OutTol;
    cases->push_back({CaseName("rmsnorm", dtype, "45x300"), [=](const Backend& b, Outputs* out) {
                        const Tensor x = b.In(HostRandom({kRows, kDim}, 1, 3.0f), dtype);
                        const Tensor w = b.In(HostRandom({kDim}, 2), dtype);
                        const Tensor y = b.Out({kRows, kDim}, dtype), rstd = b.Out({kRows});
                        ops::RmsNorm(x, w, kEps, y, rstd);
                        out->Add("y", y, out_tol);
                        out->Add("rstd", rstd, kFp32Tol);
                        // dx written over dy, as the layers do.
                        const Tensor dy = b.In(HostRandom({kRows, kDim}, 3), dtype);
                        const Tensor dw = b.In(HostRandom({kDim}, 4));
                        ops::RmsNormBackward(dy, x, w, rstd, dy, dw);
                        out->Add("dx", dy, out_tol);
                        out->Add("dw", dw, kFp32Tol);
                      }});
    // The halves of a split backward (kernels/weight_gradients.h), each alone.
    cases->push_back(
        {CaseName("rmsnorm_backward halves", dtype, "45x300"), [=](const Backend& b, Outputs* out) {
           const Tensor x = b.In(HostRandom({kRows, kDim}, 1, 3.0f), dtype);
           const Tensor w = b.In(HostRandom({kDim}, 2), dtype);
           const Tensor y = b.Out({kRows, kDim}, dtype), rstd = b.Out({kRows});
           ops::RmsNorm(x, w, kEps, y, rstd);
           const Tensor dy = b.In(HostRandom({kRows, kDim}, 3), dtype);
           const Tensor dx = b.Out({kRows, kDim}, dtype), dw = b.In(HostRandom({kDim}, 4));
           ops::RmsNormBackward(dy, x, w, rstd, Tensor(), dw);
           ops::RmsNormBackward(dy, x, w, rstd, dx, Tensor());
           out->Add("dw alone", dw, kFp32Tol);
           out->Add("dx alone", dx, out_tol);
         }});
  }
}

// The decoder block's residual ops: the add fused into the norm after it, the
// residual gradient added in the norm's backward, and the add into a third
// tensor.
inline void AddAddRmsNormCases(std::vector<OpCase>* cases) {
  constexpr Tolerance kFp32Tol{1e-5, 1e-5, "sums of 300 squares and of 45 rows in fp32 vs double"};
  // dx = dx_add + g: g's error (the rmsnorm case's 1e-5 + 1e-5 |g|, |g| < 3.1
  // here) stays absolute through the add, which both sides do alike.
  constexpr Tolerance kFp32GradTol{5e-5, 1e-5,
                                   "rmsnorm_backward's dx error (|g| < 3.1), then one add"};
  // A bf16 rounding moves a value by at most 2^-8 of itself.
  constexpr Tolerance kBf16SumTol{0, kBf16Rounding, "one fp32 add, one bf16 rounding"};
  constexpr Tolerance kBf16OutTol{
      1e-5, 9e-3, "the sum rounded to bf16 before the norm, y after, and that sum's rstd"};
  constexpr Tolerance kBf16RstdTol{1e-5, 4e-3,
                                   "statistics of the bf16-rounded sum: at most 2^-8 relative"};
  constexpr Tolerance kBf16GradTol{
      1.25e-2, kBf16Rounding,
      "g (|g| < 3.1) rounded to bf16 before the add (2^-8 |g|), the sum after"};
  constexpr int64_t kRows = 45, kDim = 300;  // dim not a multiple of the block
  constexpr float kEps = 1e-5f;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const bool fp32 = dtype == DType::kF32;
    cases->push_back(
        {CaseName("add_rmsnorm", dtype, "45x300"), [=](const Backend& b, Outputs* out) {
           const Tensor x = b.In(HostRandom({kRows, kDim}, 1, 3.0f), dtype);
           const Tensor delta = b.In(HostRandom({kRows, kDim}, 2), dtype);
           const Tensor w = b.In(HostRandom({kDim}, 3), dtype);
           const Tensor sum = b.Out({kRows, kDim}, dtype), y = b.Out({kRows, kDim}, dtype),
                        rstd = b.Out({kRows});
           ops::AddRmsNorm(x, delta, w, kEps, sum, y, rstd);
           out->Add("sum", sum, fp32 ? kExact : kBf16SumTol);
           out->Add("y", y, fp32 ? kFp32Tol : kBf16OutTol);
           out->Add("rstd", rstd, fp32 ? kFp32Tol : kBf16RstdTol);
         }});
    cases->push_back(
        {CaseName("rmsnorm_backward adding to dx", dtype, "45x300, dx += and dx = dx_add +"),
         [=](const Backend& b, Outputs* out) {
           const Tensor x = b.In(HostRandom({kRows, kDim}, 4, 3.0f), dtype);
           const Tensor w = b.In(HostRandom({kDim}, 5), dtype);
           const Tensor y = b.Out({kRows, kDim}, dtype), rstd = b.Out({kRows});
           ops::RmsNorm(x, w, kEps, y, rstd);
           const Tensor dy = b.In(HostRandom({kRows, kDim}, 6), dtype);
           const Tensor residual_grad = b.In(HostRandom({kRows, kDim}, 7), dtype);
           const Tensor dx = b.Out({kRows, kDim}, dtype), dw = b.In(HostRandom({kDim}, 8));
           ops::RmsNormBackward(dy, x, w, rstd, dx, dw, residual_grad);
           out->Add("dx", dx, fp32 ? kFp32GradTol : kBf16GradTol);
           out->Add("dw", dw, kFp32Tol);
           ops::RmsNormBackward(dy, x, w, rstd, residual_grad, dw, residual_grad);  // in place
           out->Add("dx in place", residual_grad, fp32 ? kFp32GradTol : kBf16GradTol);
         }});
    cases->push_back(
        {CaseName("add into out", dtype, "100003"), [=](const Backend& b, Outputs* out) {
           const Tensor x = b.In(HostRandom({100003}, 9), dtype);
           const Tensor y = b.In(HostRandom({100003}, 10), dtype);
           const Tensor sum = b.Out({100003}, dtype);
           ops::Add(x, y, sum);
           b.Round(sum, dtype);  // one fp32 add and one rounding per element on both sides
           out->Add("out", sum, kExact);
         }});
  }
}

// The global gradient norm's sum: many slices of one flat fp32 buffer, more
// than the device fits in one launch, some empty, some several chunks long.
inline void AddWeightedSumOfSquaresCases(std::vector<OpCase>* cases) {
  constexpr Tolerance kSumTol{0, 1e-12,
                              "squares summed in fp64 in other orders, weights applied per part"};
  cases->push_back(
      {"weighted_sum_of_squares F32 100 slices of 1.4M", [=](const Backend& b, Outputs* out) {
         std::vector<int64_t> sizes;
         int64_t total = 0;
         for (int64_t k = 0; k < 100; ++k) {
           sizes.push_back(k % 10 == 3 ? 0 : (k * 7919) % 20011 + (k % 17 == 0 ? 150001 : 1));
           total += sizes.back();
         }
         const Tensor flat = b.In(HostRandom({total}, 1));
         std::vector<Tensor> slices;
         std::vector<double> weights;
         int64_t offset = 0;
         for (int64_t k = 0; k < 100; ++k) {
           slices.push_back(flat.Slice(offset, offset + sizes[k]));
           weights.push_back(1.0 / static_cast<double>(1 + k % 3));  // 1/3: not a power of two
           offset += sizes[k];
         }
         out->Add("sum", ops::WeightedSumOfSquares(slices, weights), kSumTol);
         out->Add("empty list", ops::WeightedSumOfSquares({}, {}), kExact);
       }});
  // Clipping's scale over the same kind of list: more tensors than one
  // launch takes, some empty; the gaps between the slices stay as they were.
  cases->push_back(
      {"scale_multi_tensor F32 60 slices of 0.5M", [=](const Backend& b, Outputs* out) {
         const Tensor flat = b.In(HostRandom({600000}, 2));
         std::vector<Tensor> slices;
         for (int64_t k = 0; k < 60; ++k) {
           const int64_t begin = k * 10000, size = k % 7 == 2 ? 0 : (k * 7919) % 9000 + 1;
           slices.push_back(flat.Slice(begin, begin + size));
         }
         ops::ScaleMultiTensor(slices, 0.37f);
         ops::ScaleMultiTensor({}, 2.0f);
         out->Add("flat", flat, kElementwiseTol);
       }});
}

inline void AddRopeCases(std::vector<OpCase>* cases) {
  constexpr Tolerance kFp32Tol{1e-6, 1e-6,
                               "two products and a sum with the same table; FMA contraction"};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool backward : {false, true}) {
      cases->push_back(
          {CaseName(backward ? "rope_backward" : "rope", dtype, "2x11x3x16 of a 16-position table"),
           [=](const Backend& b, Outputs* out) {
             RopeTable table = MakeRopeTable(16, 16, 10000.0);
             table.cos = b.In(table.cos);
             table.sin = b.In(table.sin);
             const Tensor x = b.In(HostRandom({2, 11, 3, 16}, 1), dtype);
             backward ? ops::RopeBackward(x, table) : ops::Rope(x, table);
             out->Add("x", x, dtype == DType::kF32 ? kFp32Tol : kBf16ElementwiseTol);
           }});
    }
  }
}

// The fused projection's split and merge: D 16 (whole vectors of both
// halves in fp32 and bf16), D 20 (half 10: one pair per thread), and D 16
// with the packed rows one element in (misaligned: one pair per thread).
inline void AddQkvRopeCases(std::vector<OpCase>* cases) {
  constexpr Tolerance kFp32Tol{1e-6, 1e-6,
                               "two products and a sum with the same table; FMA contraction"};
  constexpr int64_t kBatch = 2, kSeq = 11, kQHeads = 3, kKvHeads = 2;
  struct Layout {
    int64_t dim;
    bool shift;  // the packed tensor one element in
  };
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tolerance rotated_tol = dtype == DType::kF32 ? kFp32Tol : kBf16ElementwiseTol;
    for (const Layout& layout : {Layout{16, false}, Layout{20, false}, Layout{16, true}}) {
      const int64_t dim = layout.dim;
      const bool shift = layout.shift;
      cases->push_back(
          {CaseName("split_qkv_rope and merge_qkv_rope_backward", dtype,
                    absl::StrCat("B2 T11 Hq3 Hkv2 D", dim, shift ? ", packed one element in" : "")),
           [=](const Backend& b, Outputs* out) {
             RopeTable table = MakeRopeTable(16, dim, 10000.0);
             table.cos = b.In(table.cos);
             table.sin = b.In(table.sin);
             const Shape packed_shape = {kBatch * kSeq, (kQHeads + 2 * kKvHeads) * dim};
             const Shape q_shape = {kBatch, kSeq, kQHeads, dim},
                         kv_shape = {kBatch, kSeq, kKvHeads, dim};
             const int64_t n = NumElements(packed_shape);
             const auto packed = [&](uint64_t stream) {
               return shift ? b.In(HostRandom({n + 1}, stream), dtype)
                                  .Slice(1, n + 1)
                                  .Reshape(packed_shape)
                            : b.In(HostRandom(packed_shape, stream), dtype);
             };
             const Tensor qkv = packed(1);
             const Tensor q = b.Out(q_shape, dtype), k = b.Out(kv_shape, dtype),
                          v = b.Out(kv_shape, dtype);
             ops::SplitQkvRope(qkv, table, q, k, v);
             out->Add("q", q, rotated_tol);
             out->Add("k", k, rotated_tol);
             out->Add("v", v, kExact);
             const Tensor dqkv = packed(2);  // overwritten
             ops::MergeQkvRopeBackward(b.In(HostRandom(q_shape, 3), dtype),
                                       b.In(HostRandom(kv_shape, 4), dtype),
                                       b.In(HostRandom(kv_shape, 5), dtype), table, dqkv);
             out->Add("dqkv", dqkv, rotated_tol);
           }});
    }
  }
}

// MLA's decoupled RoPE on the last 6 of each head's 10 dims (rotate-half
// and interleaved pairs), and its key/value split and merge (Dn 4, R 6, Dv 5,
// 3 heads): copies, and a sum over 3 heads.
inline void AddMlaCases(std::vector<OpCase>* cases) {
  constexpr Tolerance kFp32Tol{1e-6, 1e-6,
                               "two products and a sum with the same table; FMA contraction"};
  constexpr Tolerance kSumTol{1e-6, 1e-6, "a sum of 3 terms in fp32"};
  constexpr int64_t kBatch = 2, kSeq = 11, kHeads = 3, kNope = 4, kRope = 6, kValue = 5;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tolerance rotated_tol = dtype == DType::kF32 ? kFp32Tol : kBf16ElementwiseTol;
    for (bool interleaved : {false, true}) {
      for (bool backward : {false, true}) {
        cases->push_back(
            {CaseName(backward ? "decoupled_rope_backward" : "decoupled_rope", dtype,
                      absl::StrCat("2x11x3x10, 6 rotary dims", interleaved ? ", interleaved" : "")),
             [=](const Backend& b, Outputs* out) {
               RopeTable table = MakeRopeTable(16, kRope, 10000.0);
               table.cos = b.In(table.cos);
               table.sin = b.In(table.sin);
               const Tensor x = b.In(HostRandom({kBatch, kSeq, kHeads, kNope + kRope}, 1), dtype);
               backward ? ops::DecoupledRopeBackward(x, table, interleaved)
                        : ops::DecoupledRope(x, table, interleaved);
               out->Add("x", x, rotated_tol);
             }});
      }
    }
    cases->push_back(
        {CaseName("mla_split_key_value and mla_merge_key_value_backward", dtype,
                  "B2 T11 H3 Dn4 R6 Dv5"),
         [=](const Backend& b, Outputs* out) {
           const Shape kv_shape = {kBatch * kSeq, kHeads * (kNope + kValue)},
                       pe_shape = {kBatch * kSeq, kRope};
           const Shape key_shape = {kBatch, kSeq, kHeads, kNope + kRope},
                       value_shape = {kBatch, kSeq, kHeads, kValue};
           const Tensor key = b.Out(key_shape, dtype), value = b.Out(value_shape, dtype);
           ops::MlaSplitKeyValue(b.In(HostRandom(kv_shape, 1), dtype),
                                 b.In(HostRandom(pe_shape, 2), dtype), key, value);
           out->Add("key", key, kExact);
           out->Add("value", value, kExact);
           const Tensor dkv = b.Out(kv_shape, dtype), dk_pe = b.Out(pe_shape, dtype);
           ops::MlaMergeKeyValueBackward(b.In(HostRandom(key_shape, 3), dtype),
                                         b.In(HostRandom(value_shape, 4), dtype), dkv, dk_pe);
           out->Add("dkv", dkv, kExact);
           out->Add("dk_pe", dk_pe, dtype == DType::kF32 ? kSumTol : kBf16ElementwiseTol);
         }});
  }
}

// Multi-token prediction's join of embedding and hidden state, and its
// adjoint: copies, exact; odd widths so no row starts on a vector boundary.
inline void AddColumnCases(std::vector<OpCase>* cases) {
  constexpr int64_t kRows = 7, kA = 5, kB = 9;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    cases->push_back(
        {CaseName("concat_columns and split_columns", dtype, "7x5 | 7x9"),
         [=](const Backend& b, Outputs* out) {
           const Tensor joined = b.Out({kRows, kA + kB}, dtype);
           ops::ConcatColumns(b.In(HostRandom({kRows, kA}, 1), dtype),
                              b.In(HostRandom({kRows, kB}, 2), dtype), joined);
           out->Add("joined", joined, kExact);
           const Tensor left = b.Out({kRows, kA}, dtype), right = b.Out({kRows, kB}, dtype);
           ops::SplitColumns(b.In(HostRandom({kRows, kA + kB}, 3), dtype), left, right);
           out->Add("left", left, kExact);
           out->Add("right", right, kExact);
         }});
  }
}

// Attention's tolerances on backend `b` in `dtype`.
struct AttentionTolerances {
  Tolerance out, lse, grad;
};
inline AttentionTolerances AttentionTol(const Backend& b, DType dtype) {
  // fp32: dot products of D <= 192 terms and softmax sums over the keys in
  // different orders, and CUDA's expf against the CPU's polynomial: a few
  // 1e-7; gradients sum P (dP - delta) over keys and query heads.
  constexpr Tolerance kForwardTol{1e-5, 1e-5, "dot products and softmax sums in other orders"};
  constexpr Tolerance kBackwardTol{1e-5, 1e-4,
                                   "gradients summed over keys and query heads in other orders"};
  // bf16 on the CPU: the reference's arithmetic on the same rounded inputs,
  // one bf16 rounding of each output.
  constexpr Tolerance kBf16Tol{1e-4, kBf16Rounding,
                               "identical inputs, fp32 arithmetic, one bf16 rounding"};
  // bf16 on a GPU runs cuDNN's fused attention, which (as FlashAttention
  // does) also rounds the probabilities P and dS to bf16 to feed its
  // tensor-core GEMMs: each output moves by up to 2^-9 of the sum of its
  // terms' magnitudes, a few 1e-3 at these scales (a wrong mask or head
  // mapping is off by 0.1 and more).
  constexpr Tolerance kDeviceBf16Tol{
      5e-3, kBf16Rounding, "bf16 inputs and outputs; P and dS rounded to bf16 for tensor cores"};
  constexpr Tolerance kDeviceLseTol{
      1e-4, 1e-5, "fp32 statistics of the same inputs; exp2/log2 with log2(e) in the scale"};
  if (dtype == DType::kF32) return {kForwardTol, kForwardTol, kBackwardTol};
  if (b.device() == DeviceType::kCPU) return {kBf16Tol, kForwardTol, kBf16Tol};
  return {kDeviceBf16Tol, kDeviceLseTol, kDeviceBf16Tol};
}

// One attention case: forward and backward of `s` in `dtype`.
inline OpCase AttentionCase(const AttentionShape& s, DType dtype) {
  return {
      CaseName(s.causal ? "attention" : "attention unmasked", dtype,
               absl::StrCat("B", s.batch, " T", s.seq,
                            s.kv_seq == 0 ? "" : absl::StrCat(" Tk", s.kv_seq), " Hq", s.q_heads,
                            " Hkv", s.kv_heads, " D", s.head_dim,
                            s.v_head_dim == 0 ? "" : absl::StrCat(" Dv", s.v_head_dim),
                            s.softmax_scale == 0 ? "" : absl::StrCat(" scale ", s.softmax_scale))),
      [=](const Backend& b, Outputs* out) {
        const Shape q_shape = {s.batch, s.seq, s.q_heads, s.head_dim};
        const Shape k_shape = {s.batch, s.keys(), s.kv_heads, s.head_dim};
        const Shape v_shape = {s.batch, s.keys(), s.kv_heads, s.value_dim()};
        const Shape out_shape = {s.batch, s.seq, s.q_heads, s.value_dim()};
        const Tensor q = b.In(HostRandom(q_shape, 1), dtype),
                     k = b.In(HostRandom(k_shape, 2), dtype),
                     v = b.In(HostRandom(v_shape, 3), dtype);
        const Tensor y = b.Out(out_shape, dtype), lse = b.Out({s.batch, s.q_heads, s.seq});
        ops::Attention(s, q, k, v, y, lse);
        b.Round(y, dtype);  // the backward reads the stored output
        const AttentionTolerances tol = AttentionTol(b, dtype);
        out->Add("out", y, tol.out);
        out->Add("lse", lse, tol.lse);
        const Tensor dq = b.Out(q_shape, dtype), dk = b.Out(k_shape, dtype),
                     dv = b.Out(v_shape, dtype);
        ops::AttentionBackward(s, b.In(HostRandom(out_shape, 4), dtype), q, k, v, y, lse, dq, dk,
                               dv);
        out->Add("dq", dq, tol.grad);
        out->Add("dk", dk, tol.grad);
        out->Add("dv", dv, tol.grad);
      }};
}

// Ring attention's steps on one rank (context parallelism): the queries'
// attention over an earlier chunk of 56 keys (unmasked) and over their own
// 40 (causal), merged into an fp32 out and lse; then each block's backward
// from the merged out (stored in the case's dtype) and lse, which gives that
// block's share of the gradients only where the backward takes the lse as
// given (cuDNN's and our kernel's).
inline OpCase AttentionRingBlocksCase(DType dtype) {
  const AttentionShape own{.batch = 2, .seq = 40, .q_heads = 4, .kv_heads = 2, .head_dim = 32};
  AttentionShape earlier = own;
  earlier.kv_seq = 56;
  earlier.causal = false;
  return {CaseName("attention ring blocks", dtype, "B2 T40 over Tk56 and itself, Hq4 Hkv2 D32"),
          [=](const Backend& b, Outputs* out) {
            const Shape q_shape = {2, 40, 4, 32}, lse_shape = {2, 4, 40};
            const Shape own_kv = {2, 40, 2, 32}, earlier_kv = {2, 56, 2, 32};
            const Tensor q = b.In(HostRandom(q_shape, 1), dtype);
            const Tensor k1 = b.In(HostRandom(earlier_kv, 2), dtype),
                         v1 = b.In(HostRandom(earlier_kv, 3), dtype);
            const Tensor k2 = b.In(HostRandom(own_kv, 4), dtype),
                         v2 = b.In(HostRandom(own_kv, 5), dtype);
            const Tensor y1 = b.Out(q_shape, dtype), y2 = b.Out(q_shape, dtype);
            const Tensor lse = b.Out(lse_shape), lse2 = b.Out(lse_shape);
            ops::Attention(earlier, q, k1, v1, y1, lse);
            ops::Attention(own, q, k2, v2, y2, lse2);
            b.Round(y1, dtype);
            b.Round(y2, dtype);
            const Tensor merged = b.Out(q_shape);  // fp32
            ops::Cast(y1, merged);
            ops::AttentionMerge(y2, lse2, merged, lse);
            const AttentionTolerances tol = AttentionTol(b, dtype);
            out->Add("out", merged, tol.out);
            out->Add("lse", lse, tol.lse);
            const Tensor y = b.Out(q_shape, dtype);
            ops::Cast(merged, y);
            b.Round(y, dtype);
            const Tensor dout = b.In(HostRandom(q_shape, 6), dtype);
            for (int block = 1; block <= 2; ++block) {
              const Shape& kv_shape = block == 1 ? earlier_kv : own_kv;
              const Tensor dq = b.Out(q_shape, dtype), dk = b.Out(kv_shape, dtype),
                           dv = b.Out(kv_shape, dtype);
              ops::AttentionBackward(block == 1 ? earlier : own, dout, q, block == 1 ? k1 : k2,
                                     block == 1 ? v1 : v2, y, lse, dq, dk, dv);
              out->Add(absl::StrCat("dq of block ", block), dq, tol.grad);
              out->Add(absl::StrCat("dk of block ", block), dk, tol.grad);
              out->Add(absl::StrCat("dv of block ", block), dv, tol.grad);
            }
          }};
}

inline void AddAttentionCases(std::vector<OpCase>* cases) {
  const AttentionShape shapes[] = {
      {.batch = 2, .seq = 45, .q_heads = 4, .kv_heads = 2, .head_dim = 16},
      {.batch = 1, .seq = 70, .q_heads = 3, .kv_heads = 1, .head_dim = 40},
      {.batch = 1, .seq = 33, .q_heads = 2, .kv_heads = 2, .head_dim = 128},
      // MLA's value head dim below the query/key one (D 192, Dv 128), scaled down.
      {.batch = 2, .seq = 40, .q_heads = 4, .kv_heads = 2, .head_dim = 48, .v_head_dim = 32},
      // MLA's heads (Hkv = Hq) with a softmax scale other than 1 / sqrt(D), as YaRN's mscale^2
      // makes.
      {.batch = 1,
       .seq = 37,
       .q_heads = 2,
       .kv_heads = 2,
       .head_dim = 24,
       .v_head_dim = 16,
       .softmax_scale = 0.3},
      // Ring attention's blocks: every key visible, keys of a length of their
      // own: more keys than queries (past a 64-row tile, not a multiple of
      // one) with GQA, fewer with Dv != D, and as many (the ring's equal
      // chunks) with multi-query heads.
      {.batch = 2,
       .seq = 45,
       .q_heads = 4,
       .kv_heads = 2,
       .head_dim = 16,
       .kv_seq = 70,
       .causal = false},
      {.batch = 1,
       .seq = 70,
       .q_heads = 4,
       .kv_heads = 2,
       .head_dim = 48,
       .v_head_dim = 32,
       .kv_seq = 33,
       .causal = false},
      {.batch = 2, .seq = 40, .q_heads = 3, .kv_heads = 1, .head_dim = 64, .causal = false},
  };
  for (const AttentionShape& s : shapes) {
    for (DType dtype : {DType::kF32, DType::kBF16}) cases->push_back(AttentionCase(s, dtype));
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) cases->push_back(AttentionRingBlocksCase(dtype));
}

// Ring attention's merge of two partial attentions of the same queries, out
// and lse fp32, the part's out in `dtype`. The lse's spread of 3 weights the
// two sides anywhere from even to one-sided; a row of each side has no keys
// (lse -inf), so the other side passes through.
inline void AddAttentionMergeCases(std::vector<OpCase>* cases) {
  // fp32 out and lse from the same (rounded) inputs: a max, exp, log1p and
  // two multiply-adds per element; CUDA's expf and log1pf (1-2 ulp) against
  // glibc's (within 1 ulp) move the lse by ~1e-7 of its magnitude and the
  // weights by as much.
  constexpr Tolerance kMergeTol{1e-6, 4e-6,
                                "exp, log1p and two products per element; CUDA's "
                                "expf/log1pf against glibc's"};
  constexpr int64_t kB = 2, kT = 37, kH = 3, kDv = 20;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    cases->push_back(
        {CaseName("attention_merge", dtype, "B2 T37 H3 Dv20"), [=](const Backend& b, Outputs* out) {
           const Shape out_shape = {kB, kT, kH, kDv}, lse_shape = {kB, kH, kT};
           Tensor lse_host = HostRandom(lse_shape, 3, 3.0f),
                  part_lse_host = HostRandom(lse_shape, 4, 3.0f);
           lse_host.f32()[5] = -INFINITY;            // out has no keys: (b 0, h 0, t 5)
           part_lse_host.f32()[kT + 2] = -INFINITY;  // part has none: (b 0, h 1, t 2)
           const Tensor y = b.In(HostRandom(out_shape, 1)), lse = b.In(lse_host);
           ops::AttentionMerge(b.In(HostRandom(out_shape, 2), dtype), b.In(part_lse_host), y, lse);
           out->Add("out", y, kMergeTol);
           out->Add("lse", lse, kMergeTol);
         }});
  }
}

// Qwen2's q/k/v biases: added to (B, T, H, D) rows of width H x D = 45 (no
// vector fits), and their gradient summed over 37 rows.
inline void AddBiasCases(std::vector<OpCase>* cases) {
  // The gradient: both sides sum each column's 37 terms in fp32 in row
  // order, so the same bits but for FMA-free adds; a few ulp of slack.
  constexpr Tolerance kSumTol{1e-6, 1e-6, "fp32 sums of 37 terms in the same order"};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    cases->push_back({CaseName("add_bias and bias_gradient", dtype, "37x(5x9)"),
                      [=](const Backend& b, Outputs* out) {
                        const Tensor y = b.In(HostRandom({37, 5, 9}, 1), dtype);
                        ops::AddBias(b.In(HostRandom({45}, 2), dtype), y.Reshape({37, 45}));
                        out->Add("y", y, Elementwise(dtype));
                        const Tensor dbias = b.In(HostRandom({45}, 3), DType::kF32);  // accumulates
                        ops::BiasGradient(b.In(HostRandom({37, 45}, 4, 2.0f), dtype), dbias);
                        out->Add("dbias", dbias, kSumTol);
                      }});
  }
}

inline void AddSwigluCases(std::vector<OpCase>* cases) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    cases->push_back(
        {CaseName("swiglu", dtype, "13x57"), [=](const Backend& b, Outputs* out) {
           const Tensor gate = b.In(HostRandom({13, 57}, 1, 3.0f), dtype);
           const Tensor up = b.In(HostRandom({13, 57}, 2), dtype);
           const Tensor y = b.Out({13, 57}, dtype), dgate = b.Out({13, 57}, dtype),
                        dup = b.Out({13, 57}, dtype);
           ops::Swiglu(gate, up, y);
           ops::SwigluBackward(b.In(HostRandom({13, 57}, 3), dtype), gate, up, dgate, dup);
           out->Add("out", y, Elementwise(dtype));
           out->Add("dgate", dgate, Elementwise(dtype));
           out->Add("dup", dup, Elementwise(dtype));
         }});
  }
}

// The packed swiglu ops on the fused gate/up projection's (rows, 2 x width)
// output. Width 57: gate, up and out rows at different offsets modulo 16
// bytes (all scalar on CUDA); width 64: every row whole vectors; width 64
// with every operand one element in: a scalar head and tail around each row's vectors.
inline void AddSwigluPackedCases(std::vector<OpCase>* cases) {
  struct Layout {
    int64_t width;
    int64_t shift;  // elements every operand sits into its buffer
  };
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Layout layout : {Layout{57, 0}, Layout{64, 0}, Layout{64, 1}}) {
      constexpr int64_t kRows = 13;
      const int64_t width = layout.width, shift = layout.shift;
      const std::string shape = absl::StrCat(kRows, "x2x", width, shift ? " one element in" : "");
      cases->push_back({CaseName("swiglu_packed and backward", dtype, shape),
                        [=](const Backend& b, Outputs* out) {
                          const auto in = [&](const Shape& dims, uint64_t stream, float scale) {
                            const int64_t n = NumElements(dims);
                            return b.In(HostRandom({n + shift}, stream, scale), dtype)
                                .Slice(shift, n + shift)
                                .Reshape(dims);
                          };
                          const auto output = [&](const Shape& dims) {
                            const int64_t n = NumElements(dims);
                            return b.Out({n + shift}, dtype).Slice(shift, n + shift).Reshape(dims);
                          };
                          const Tensor gate_up = in({kRows, 2 * width}, 1, 3.0f);
                          const Tensor y = output({kRows, width});
                          ops::SwigluPacked(gate_up, y);
                          out->Add("out", y, Elementwise(dtype));
                          const Tensor dout = in({kRows, width}, 2, 1.0f);
                          const Tensor dgate_up = output({kRows, 2 * width});
                          ops::SwigluPackedBackward(dout, gate_up, dgate_up);
                          out->Add("dgate_up", dgate_up, Elementwise(dtype));
                          ops::SwigluPackedBackward(dout, gate_up, gate_up);
                          out->Add("dgate_up in place", gate_up, Elementwise(dtype));
                        }});
    }
  }
}

inline void AddCrossEntropyCases(std::vector<OpCase>* cases) {
  // Loss: both sides sum exps in double and rows' losses on the host in
  // double; the exps differ by CUDA's expf (2 ulp): ~1e-7 relative.
  constexpr Tolerance kLossTol{0, 1e-6, "fp32 exps (expf vs the CPU's), summed in double"};
  // dlogits = scale x softmax (~1e-3 here): fp32 exp and scale, a few ulp.
  constexpr Tolerance kGradTol{1e-8, 1e-5, "fp32 exp times fp32(scale / sum)"};
  constexpr Tolerance kBf16GradTol{1e-8, kBf16Rounding, "as fp32, plus one bf16 rounding"};
  constexpr Tolerance kSumTol{0, 1e-6, "fp32 exps summed in double in other orders"};
  constexpr int64_t kRows = 23, kVocab = 1000;
  std::vector<int32_t> ids(kRows);
  for (int64_t r = 0; r < kRows; ++r) ids[r] = static_cast<int32_t>(r * 41 % kVocab);
  // Two rows left out (multi-token prediction's rows past their sequence's end).
  ids[5] = ids[17] = kIgnoredTarget;
  const Tensor targets = HostInts(ids, {kRows});
  constexpr float kGradScale = 1.0f / 64;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tolerance grad_tol = dtype == DType::kF32 ? kGradTol : kBf16GradTol;
    cases->push_back(
        {CaseName("cross_entropy", dtype, "23x1000, in place"),
         [=](const Backend& b, Outputs* out) {
           const Tensor logits = b.In(HostRandom({kRows, kVocab}, 1, 3.0f), dtype);
           const Tensor t = b.Exact(targets);
           out->Add("loss without gradient",
                    ops::CrossEntropy(logits, t, kGradScale, Tensor(), kVocab), kLossTol);
           out->Add("loss", ops::CrossEntropy(logits, t, kGradScale, logits, kVocab), kLossTol);
           out->Add("dlogits", logits, grad_tol);
         }});
    // One tensor-parallel rank's pieces: ids [300, 800) of the 1000.
    cases->push_back({CaseName("cross_entropy pieces", dtype, "23x500 slice of 1000"),
                      [=](const Backend& b, Outputs* out) {
                        constexpr int64_t kBegin = 300, kSlice = 500;
                        const Tensor logits = b.In(HostRandom({kRows, kSlice}, 2, 3.0f), dtype);
                        const Tensor t = b.Exact(targets);
                        const Tensor row_max = b.Out({kRows}), target_logit = b.Out({kRows}),
                                     sum_exp = b.Out({kRows}, DType::kF64);
                        ops::CrossEntropyRowStats(logits, t, kBegin, kVocab, row_max, target_logit);
                        out->Add("row_max", row_max, kExact);
                        out->Add("target_logit", target_logit, kExact);
                        ops::CrossEntropySumExp(logits, kBegin, kVocab, row_max, sum_exp);
                        out->Add("sum_exp", sum_exp, kSumTol);
                        out->Add("loss", ops::CrossEntropyLoss(t, row_max, target_logit, sum_exp),
                                 kLossTol);
                        const Tensor dlogits = b.Out({kRows, kSlice}, dtype);
                        ops::CrossEntropyGradient(logits, t, kBegin, kVocab, row_max, sum_exp,
                                                  kGradScale, dlogits);
                        out->Add("dlogits", dlogits, grad_tol);
                      }});
    // A vocabulary padded to 1024 (columns 1000 on left out, gradient 0),
    // the padding holding logits that would otherwise dominate.
    const auto padded_logits = [](int64_t width, int64_t first_id, uint64_t seed) {
      Tensor host = HostRandom({kRows, width}, seed, 3.0f);
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t j = std::max<int64_t>(0, kVocab - first_id); j < width; ++j) {
          host.f32()[r * width + j] = 40.0f;
        }
      }
      return host;
    };
    cases->push_back({CaseName("cross_entropy padded", dtype, "23x1024 of 1000, in place"),
                      [=](const Backend& b, Outputs* out) {
                        const Tensor logits = b.In(padded_logits(1024, 0, 3), dtype);
                        const Tensor t = b.Exact(targets);
                        out->Add("loss", ops::CrossEntropy(logits, t, kGradScale, logits, kVocab),
                                 kLossTol);
                        out->Add("dlogits", logits, grad_tol);
                      }});
    // One rank's pieces of that vocabulary: ids [900, 1156), 100 of them real.
    cases->push_back(
        {CaseName("cross_entropy pieces padded", dtype, "23x256 slice from 900 of 1000"),
         [=](const Backend& b, Outputs* out) {
           constexpr int64_t kBegin = 900, kSlice = 256;
           const Tensor logits = b.In(padded_logits(kSlice, kBegin, 4), dtype);
           const Tensor t = b.Exact(targets);
           const Tensor row_max = b.Out({kRows}), target_logit = b.Out({kRows});
           const Tensor sum_exp = b.Out({kRows}, DType::kF64);
           ops::CrossEntropyRowStats(logits, t, kBegin, kVocab, row_max, target_logit);
           out->Add("row_max", row_max, kExact);
           out->Add("target_logit", target_logit, kExact);
           ops::CrossEntropySumExp(logits, kBegin, kVocab, row_max, sum_exp);
           out->Add("sum_exp", sum_exp, kSumTol);
           ops::CrossEntropyGradient(logits, t, kBegin, kVocab, row_max, sum_exp, kGradScale,
                                     logits);
           out->Add("dlogits in place", logits, grad_tol);
         }});
    // A rank holding only padding (ids [1024, 1280) of 1000): nothing to the
    // sums, gradient 0, given the other ranks' row maxima.
    cases->push_back(
        {CaseName("cross_entropy pieces all padding", dtype, "23x256 slice from 1024 of 1000"),
         [=](const Backend& b, Outputs* out) {
           constexpr int64_t kBegin = 1024, kSlice = 256;
           const Tensor logits = b.In(padded_logits(kSlice, kBegin, 5), dtype);
           const Tensor t = b.Exact(targets);
           const Tensor row_max = b.In(HostRandom({kRows}, 6)), target_logit = b.Out({kRows});
           const Tensor sum_exp = b.Out({kRows}, DType::kF64),
                        dlogits = b.Out({kRows, kSlice}, dtype);
           ops::CrossEntropySumExp(logits, kBegin, kVocab, row_max, sum_exp);
           out->Add("sum_exp", sum_exp, kExact);
           ops::CrossEntropyGradient(logits, t, kBegin, kVocab, row_max, sum_exp, kGradScale,
                                     dlogits);
           out->Add("dlogits", dlogits, kExact);
         }});
  }
}

inline void AddRouterCases(std::vector<OpCase>* cases) {
  // The router runs in fp32 on every backend.
  constexpr Tolerance kScoreTol{1e-7, 2e-6,
                                "sigmoid or softmax: expf vs the CPU's exp, a division"};
  constexpr Tolerance kGradTol{1e-7, 1e-5,
                               "a few fp32 products and sums per score, FMA contraction"};
  constexpr Tolerance kLossTol{0, 1e-6, "sums of products of fp32 scores in double"};
  constexpr Tolerance kStatsTol{1e-7, 4e-6,
                                "f counted alike; P sums ratios of scores (kScoreTol) in double"};
  constexpr int64_t kBatch = 3, kSeq = 7, kTokens = kBatch * kSeq;
  // Under context parallelism: this rank's kSeq tokens of each sequence of
  // kWholeSeq, another's kOtherSeq.
  constexpr int64_t kOtherSeq = 5, kWholeSeq = kSeq + kOtherSeq;
  const RouterSpec specs[] = {
      {.num_experts = 16, .top_k = 3, .n_group = 4, .topk_group = 2, .routed_scaling_factor = 2.5f},
      {.num_experts = 9, .top_k = 2, .softmax = true, .norm_topk_prob = false},
  };
  for (const RouterSpec& spec : specs) {
    const int64_t e = spec.num_experts, k = spec.top_k;
    cases->push_back({CaseName("router", DType::kF32,
                               absl::StrCat(kTokens, " tokens, top ", k, " of ", e,
                                            spec.softmax ? " softmax" : " sigmoid grouped")),
                      [=](const Backend& b, Outputs* out) {
                        const Tensor logits = b.In(HostRandom({kTokens, e}, 1, 2.0f));
                        // A small bias, rounded to bf16 so both backends hold the same values.
                        const Tensor bias = b.In(RoundTo(HostRandom({e}, 2, 0.05f), DType::kBF16));
                        const Tensor scores = b.Out({kTokens, e}),
                                     expert = b.Out({kTokens, k}, DType::kI32),
                                     weights = b.Out({kTokens, k});
                        ops::RouterScores(spec, logits, scores);
                        ops::RouterTopK(spec, scores, bias, expert, weights);
                        out->Add("scores", scores, kScoreTol);
                        out->Add("expert", expert, kExact);
                        out->Add("weights", weights, kScoreTol);
                        const Tensor dscores = b.In(HostRandom({kTokens, e}, 3, 0.1f)),
                                     dlogits = b.Out({kTokens, e});
                        const Tensor stats = b.Out({kBatch, 2 * e}, DType::kF64);
                        ops::SequenceBalanceStats(spec, scores, expert, kBatch, kSeq, kSeq, stats);
                        out->Add("balance stats", stats, kStatsTol);
                        out->Add("balance loss",
                                 ops::SequenceBalanceLoss(spec, scores, stats, kBatch, kSeq, kSeq,
                                                          0.5f, dscores),
                                 kLossTol);
                        ops::RouterWeightsBackward(spec, scores, expert,
                                                   b.In(HostRandom({kTokens, k}, 4)), dscores);
                        ops::RouterScoresBackward(spec, scores, dscores, dlogits);
                        out->Add("dscores", dscores, kGradTol);
                        out->Add("dlogits", dlogits, kGradTol);
                        const Tensor loads = b.Exact(Tensor::Zeros({e}, DType::kI32));
                        ops::CountExpertLoads(spec, expert, loads);
                        out->Add("loads", loads, kExact);
                        const Tensor moved = b.In(HostRandom({e}, 5));
                        ops::UpdateRouterBias(loads, 0.125, moved);
                        out->Add("bias", moved, kExact);
                      }});
    // The balance loss in two steps over two ranks' parts of the sequences:
    // each part's statistics (whole_seq > seq), summed (the caller's
    // all-reduce, here on the host), then this rank's loss and gradient.
    cases->push_back({CaseName("router balance split", DType::kF32,
                               absl::StrCat(kBatch, " sequences of ", kWholeSeq, " as ", kSeq,
                                            " + ", kOtherSeq, " tokens, top ", k, " of ", e)),
                      [=](const Backend& b, Outputs* out) {
                        const Tensor bias = b.In(RoundTo(HostRandom({e}, 2, 0.05f), DType::kBF16));
                        Tensor scores[2], stats[2];
                        for (int part = 0; part < 2; ++part) {
                          const int64_t n = kBatch * (part == 0 ? kSeq : kOtherSeq);
                          const Tensor logits = b.In(HostRandom({n, e}, 6 + part, 2.0f));
                          const Tensor expert = b.Out({n, k}, DType::kI32), weights = b.Out({n, k});
                          scores[part] = b.Out({n, e});
                          ops::RouterScores(spec, logits, scores[part]);
                          ops::RouterTopK(spec, scores[part], bias, expert, weights);
                          out->Add(absl::StrCat("expert ", part), expert, kExact);
                          stats[part] = b.Out({kBatch, 2 * e}, DType::kF64);
                          ops::SequenceBalanceStats(spec, scores[part], expert, kBatch,
                                                    part == 0 ? kSeq : kOtherSeq, kWholeSeq,
                                                    stats[part]);
                          out->Add(absl::StrCat("stats ", part), stats[part], kStatsTol);
                        }
                        const Tensor summed = Tensor::Empty({kBatch, 2 * e}, DType::kF64),
                                     other = Tensor::Empty({kBatch, 2 * e}, DType::kF64);
                        summed.CopyFrom(stats[0]);
                        other.CopyFrom(stats[1]);
                        for (int64_t i = 0; i < summed.numel(); ++i)
                          summed.data<double>()[i] += other.data<double>()[i];
                        const Tensor dscores = b.In(HostRandom({kTokens, e}, 8, 0.1f));
                        out->Add("loss",
                                 ops::SequenceBalanceLoss(spec, scores[0], b.Exact(summed), kBatch,
                                                          kSeq, kWholeSeq, 0.5f, dscores),
                                 kLossTol);
                        out->Add("dscores", dscores, kGradTol);
                      }});
  }
}

inline void AddDispatchCases(std::vector<OpCase>* cases) {
  constexpr Tolerance kCombineTol{1e-6, 1e-6,
                                  "k fp32 products summed in the same order; FMA contraction"};
  constexpr Tolerance kDotTol{1e-5, 1e-5, "fp32 dot products of 24 terms in other orders"};
  constexpr int64_t kWidth = 24;
  constexpr int kK = 3, kExperts = 7;
  // 400 tokens: 1200 pairs, several of the device's 256-pair tiles.
  for (const int64_t tokens : {int64_t{40}, int64_t{400}}) {
    std::vector<int32_t> choice(tokens * kK);
    for (int64_t p = 0; p < tokens * kK; ++p)
      choice[p] = static_cast<int32_t>((p * 5 + p / 7) % kExperts);
    const Tensor experts = HostInts(choice, {tokens, kK});
    for (int64_t capacity : {int64_t{-1}, tokens * 3 / 10}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        cases->push_back(
            {CaseName(
                 "dispatch", dtype,
                 absl::StrCat(tokens, "x", kK, " pairs over ", kExperts, " experts, ",
                              capacity < 0 ? "dropless" : absl::StrCat("capacity ", capacity))),
             [=](const Backend& b, Outputs* out) {
               const Tensor expert = b.Exact(experts);
               // Weights rounded to bf16 (8 significant bits), so some are equal
               // and capacity ties go to the earlier pair.
               const Tensor weights =
                   b.In(RoundTo(HostRandom({tokens, kK}, 1, 0.25f), DType::kBF16));
               const Tensor send_row = b.Out({tokens, kK}, DType::kI32),
                            send_token = b.Out({tokens * kK}, DType::kI32),
                            counts = b.Out({kExperts}, DType::kI32);
               ops::DispatchOrder(expert, weights, capacity, send_row, send_token, counts);
               const Tensor host_counts = OnHost(counts);
               int64_t rows = 0;
               for (int e = 0; e < kExperts; ++e) rows += host_counts.data<int32_t>()[e];
               out->Add("rows", static_cast<double>(rows), kExact);
               out->Add("send_row", send_row, kExact);
               out->Add("send_token", send_token.Slice(0, rows), kExact);
               out->Add("counts", counts, kExact);
               const Tensor x = b.In(HostRandom({tokens, kWidth}, 2), dtype);
               const Tensor send = b.Out({rows, kWidth}, dtype);
               ops::GatherRows(x, send_token.Slice(0, rows), send);
               out->Add("gathered", send, kExact);
               const Tensor y = b.In(HostRandom({rows, kWidth}, 3), dtype),
                            combined = b.Out({tokens, kWidth}, dtype),
                            summed = b.Out({tokens, kWidth}, dtype);
               ops::CombineRows(y, send_row, weights, combined);
               ops::CombineRows(y, send_row, Tensor(), summed);
               const Tolerance tol = dtype == DType::kF32 ? kCombineTol
                                                          : Tolerance{1e-6, kBf16Rounding,
                                                                      "combine, one bf16 rounding"};
               out->Add("combined", combined, tol);
               out->Add("summed", summed, tol);
               const Tensor dy = b.Out({rows, kWidth}, dtype), dweights = b.Out({tokens, kK});
               ops::CombineRowsBackward(b.In(HostRandom({tokens, kWidth}, 4), dtype), y, send_row,
                                        weights, dy, dweights);
               out->Add("dy", dy, tol);
               out->Add("dweights", dweights, kDotTol);
             }});
      }
    }
  }
}

inline void AddOptimizerAndReduceCases(std::vector<OpCase>* cases) {
  // The same fp32 formulas and scalars; the GPU may fuse multiply-adds, an
  // ulp or two per step over three steps.
  constexpr Tolerance kAdamWTol{1e-7, 2e-6,
                                "the same fp32 formulas; FMA contraction over three steps"};
  cases->push_back(
      {"adamw_multi_tensor F32 31x17, 300, 70001 with bf16 copies",
       [=](const Backend& b, Outputs* out) {
         const std::vector<Shape> shapes = {{31, 17}, {300}, {70001}};
         std::vector<AdamWTensors> tensors;
         for (size_t i = 0; i < shapes.size(); ++i) {
           Tensor v = HostRandom(shapes[i], 10 * i + 4, 0.1f);
           for (int64_t j = 0; j < v.numel(); ++j) v.f32()[j] *= v.f32()[j];  // v >= 0
           tensors.push_back({.param = b.In(HostRandom(shapes[i], 10 * i + 1)),
                              .grad = b.In(HostRandom(shapes[i], 10 * i + 2)),
                              .m = b.In(HostRandom(shapes[i], 10 * i + 3, 0.1f)),
                              .v = b.In(v),
                              .param_bf16 = b.Exact(Tensor::Zeros(shapes[i], DType::kBF16)),
                              .decay = i != 1});
         }
         AdamWHyper hyper{.lr = 1e-2, .weight_decay = 0.1};
         for (int64_t step = 1; step <= 3; ++step) {
           hyper.step = step;
           ops::AdamWMultiTensor(tensors, hyper);
         }
         for (size_t i = 0; i < tensors.size(); ++i) {
           const std::string n = ShapeString(shapes[i]);
           out->Add("param " + n, tensors[i].param, kAdamWTol);
           out->Add("m " + n, tensors[i].m, kAdamWTol);
           out->Add("v " + n, tensors[i].v, kAdamWTol);
           out->Add("param_bf16 " + n, tensors[i].param_bf16,
                    {1e-7, kBf16Rounding, "each side's own fp32 result, rounded once"});
         }
       }});
  cases->push_back({"adamw F32 1001, one tensor", [=](const Backend& b, Outputs* out) {
                      Tensor v = HostRandom({1001}, 8, 0.1f);
                      for (int64_t j = 0; j < v.numel(); ++j) v.f32()[j] *= v.f32()[j];  // v >= 0
                      const Tensor param = b.In(HostRandom({1001}, 5)),
                                   grad = b.In(HostRandom({1001}, 6)),
                                   m = b.In(HostRandom({1001}, 7, 0.1f)), v_in = b.In(v);
                      AdamWHyper hyper{.lr = 1e-2, .weight_decay = 0.1};
                      for (int64_t step = 1; step <= 3; ++step) {
                        hyper.step = step;
                        ops::AdamW(param, grad, m, v_in, hyper);
                      }
                      out->Add("param", param, kAdamWTol);
                      out->Add("m", m, kAdamWTol);
                      out->Add("v", v_in, kAdamWTol);
                    }});
  constexpr Tolerance kSumTol{0, 1e-12, "squares summed in fp64 in other orders"};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    cases->push_back({CaseName("sum_of_squares, scale, add", dtype, "100003"),
                      [=](const Backend& b, Outputs* out) {
                        const Tensor x = b.In(HostRandom({100003}, 1), dtype);
                        out->Add("sum of squares", ops::SumOfSquares(x), kSumTol);
                        const Tensor y = b.In(HostRandom({100003}, 2), dtype);
                        // One fp32 operation and one rounding per element on both sides.
                        ops::Scale(x, 0.37f);
                        b.Round(x, dtype);
                        out->Add("scale", x, kExact);
                        ops::Add(x, y);
                        b.Round(y, dtype);
                        out->Add("add", y, kExact);
                      }});
  }
  cases->push_back({"add F64 4097 (partial sums of sums)", [=](const Backend& b, Outputs* out) {
                      Tensor x = Tensor::Empty({4097}, DType::kF64),
                             y = Tensor::Empty({4097}, DType::kF64);
                      const std::vector<float> xs = RandomVector(4097, 4),
                                               ys = RandomVector(4097, 5);
                      for (int64_t i = 0; i < 4097; ++i)
                        x.data<double>()[i] = xs[i] / 3.0, y.data<double>()[i] = ys[i] / 7.0;
                      const Tensor sum = b.Exact(y);
                      ops::Add(b.Exact(x), sum);
                      out->Add("y", sum, kExact);
                    }});
  cases->push_back({"cast F32 <-> BF16 4097", [=](const Backend& b, Outputs* out) {
                      const Tensor x = b.In(HostRandom({4097}, 3));
                      const Tensor narrow = b.Exact(Tensor::Zeros({4097}, DType::kBF16)),
                                   wide = b.Out({4097});
                      ops::Cast(x, narrow);
                      ops::Cast(narrow, wide);
                      out->Add("fp32 -> bf16", narrow, kExact);
                      out->Add("bf16 -> fp32", wide, kExact);
                    }});
}

// The CUDA elementwise kernels' 16-byte vector paths and their scalar
// heads, tails and fallbacks (kernels/cuda/vector_access.cuh): widths that are
// not a multiple of a vector (8 bf16, 4 fp32), views one element past a
// 16-byte boundary, operands at different offsets, and vocabulary rows long
// enough for several vectors per thread with a rising running max.
inline void AddVectorPathCases(std::vector<OpCase>* cases) {
  // `host` on b as a view one element into a buffer one element longer.
  const auto shifted_in = [](const Backend& b, const Tensor& host, DType dtype) {
    Tensor padded = Tensor::Zeros({host.numel() + 1});
    for (int64_t i = 0; i < host.numel(); ++i) padded.f32()[i + 1] = host.f32()[i];
    return b.In(padded, dtype).Slice(1, host.numel() + 1).Reshape(host.shape());
  };
  const auto shifted_out = [](const Backend& b, const Shape& shape, DType dtype) {
    const int64_t n = NumElements(shape);
    return b.Out({n + 1}, dtype).Slice(1, n + 1).Reshape(shape);
  };
  struct Rows {
    int64_t dim;
    bool shift;  // the tensor one element in
  };
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tolerance tol = Elementwise(dtype);
    cases->push_back(
        {CaseName("swiglu shifted views", dtype, "13x57"), [=](const Backend& b, Outputs* out) {
           const Shape shape = {13, 57};
           const Tensor gate = shifted_in(b, HostRandom(shape, 1, 3.0f), dtype);
           const Tensor up = shifted_in(b, HostRandom(shape, 2), dtype);
           // out at another offset than gate and up: all scalar.
           const Tensor y = b.Out(shape, dtype);
           ops::Swiglu(gate, up, y);
           out->Add("out", y, tol);
           // Every operand one element in: a scalar head, then vectors.
           const Tensor dgate = shifted_out(b, shape, dtype), dup = shifted_out(b, shape, dtype);
           ops::SwigluBackward(shifted_in(b, HostRandom(shape, 3), dtype), gate, up, dgate, dup);
           out->Add("dgate", dgate, tol);
           out->Add("dup", dup, tol);
         }});
    const Tolerance rope_tol =
        dtype == DType::kF32 ? Tolerance{1e-6, 1e-6, "two products and a sum; FMA contraction"}
                             : kBf16ElementwiseTol;
    // D 20: half 10, no whole vectors (scalar); D 32: two bf16 vectors a half;
    // D 16 one element in: scalar.
    for (const Rows& rows : {Rows{20, false}, Rows{32, false}, Rows{16, true}}) {
      const int64_t dim = rows.dim;
      const bool shift = rows.shift;
      cases->push_back({CaseName("rope and rope_backward", dtype,
                                 absl::StrCat("2x11x3x", dim, shift ? " one element in" : "")),
                        [=](const Backend& b, Outputs* out) {
                          RopeTable table = MakeRopeTable(16, dim, 10000.0);
                          table.cos = b.In(table.cos);
                          table.sin = b.In(table.sin);
                          const Tensor host = HostRandom({2, 11, 3, dim}, 1);
                          const Tensor x = shift ? shifted_in(b, host, dtype) : b.In(host, dtype);
                          ops::Rope(x, table);
                          out->Add("rope", x, rope_tol);
                          b.Round(x, dtype);
                          ops::RopeBackward(x, table);
                          out->Add("rope_backward", x, rope_tol);
                        }});
    }
    // Embedding rows of 37 (scalar) and rows of 40 into an output one element in (scalar).
    for (const Rows& rows : {Rows{37, false}, Rows{40, true}}) {
      const int64_t dim = rows.dim;
      const bool shift = rows.shift;
      const std::string shape = absl::StrCat("97 ids of 50x", dim, shift ? " one element in" : "");
      cases->push_back(
          {CaseName("embedding", dtype, shape), [=](const Backend& b, Outputs* out) {
             std::vector<int32_t> ids(97);
             for (int64_t i = 0; i < 97; ++i) ids[i] = static_cast<int32_t>((i * 7) % 50);
             const Tensor table = b.In(HostRandom({50, dim}, 1), dtype);
             const Tensor y = shift ? shifted_out(b, {97, dim}, dtype) : b.Out({97, dim}, dtype);
             ops::Embedding(b.Exact(HostInts(ids, {97})), table, y);
             out->Add("out", y, kExact);
           }});
    }
  }
  // Cross-entropy rows whose starts fall anywhere in a vector (odd vocab),
  // logits one element in (in place: both shifted alike, vectors after a
  // head; into an unshifted dlogits: scalar), and rows of 10007 whose values
  // rise along the row, so each thread's running max grows item after item.
  constexpr Tolerance kLossTol{0, 1e-6,
                               "fp32 exps (expf vs the CPU's), summed in double; online rescaling"};
  constexpr Tolerance kSumTol{0, 1e-6, "fp32 exps summed in double in other orders"};
  constexpr float kGradScale = 1.0f / 64;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tolerance grad_tol =
        dtype == DType::kF32 ? Tolerance{1e-8, 1e-5, "fp32 exp times fp32(scale / sum)"}
                             : Tolerance{1e-8, kBf16Rounding, "as fp32, plus one bf16 rounding"};
    for (const int64_t vocab : {int64_t{5}, int64_t{1001}, int64_t{10007}}) {
      constexpr int64_t kRows = 9;
      cases->push_back(
          {CaseName("cross_entropy", dtype,
                    absl::StrCat(kRows, "x", vocab, ", logits one element in")),
           [=](const Backend& b, Outputs* out) {
             Tensor host = HostRandom({kRows, vocab}, 4, 3.0f);
             for (int64_t j = 0; j < host.numel(); ++j)
               host.f32()[j] += 2e-3f * static_cast<float>(j % vocab);
             std::vector<int32_t> ids(kRows);
             for (int64_t r = 0; r < kRows; ++r)
               ids[r] = static_cast<int32_t>((r * 37 + 3) % vocab);
             const Tensor t = b.Exact(HostInts(ids, {kRows}));
             const Tensor logits = shifted_in(b, host, dtype),
                          dlogits = b.Out({kRows, vocab}, dtype);
             out->Add("loss", ops::CrossEntropy(logits, t, kGradScale, dlogits, vocab), kLossTol);
             out->Add("dlogits", dlogits, grad_tol);
             out->Add("loss in place", ops::CrossEntropy(logits, t, kGradScale, logits, vocab),
                      kLossTol);
             out->Add("dlogits in place", logits, grad_tol);
             // The vocabulary-parallel steps on the same rows: ids [100, 100 + vocab) of vocab +
             // 200.
             const Tensor fresh = shifted_in(b, host, dtype);
             const Tensor targets = b.Exact(HostInts(ids, {kRows}));
             const Tensor row_max = b.Out({kRows}), target_logit = b.Out({kRows}),
                          sum_exp = b.Out({kRows}, DType::kF64);
             ops::CrossEntropyRowStats(fresh, targets, 100, vocab + 200, row_max, target_logit);
             out->Add("row_max", row_max, kExact);
             out->Add("target_logit", target_logit, kExact);
             ops::CrossEntropySumExp(fresh, 100, vocab + 200, row_max, sum_exp);
             out->Add("sum_exp", sum_exp, kSumTol);
             const Tensor piece_grad = shifted_out(b, {kRows, vocab}, dtype);
             ops::CrossEntropyGradient(fresh, targets, 100, vocab + 200, row_max, sum_exp,
                                       kGradScale, piece_grad);
             out->Add("piece dlogits", piece_grad, grad_tol);
           }});
    }
  }
}

inline void AddFillNormalCases(std::vector<OpCase>* cases) {
  // Philox is integer arithmetic, the same bits everywhere; the Box-Muller
  // log and cos in double may differ by an ulp or two between CUDA and glibc,
  // which moves a rare fp32 result by its last bit.
  constexpr Tolerance kDrawTol{0, 2.4e-7, "the same draws; double log/cos within an ulp or two"};
  // Unsliced, and the second half of dim 1 of a (512, 96) tensor.
  struct Fill {
    const char* name;
    int64_t n;
    NormalInit init;
  };
  const Fill fills[] = {
      {"100003 whole",
       100003,
       {.seed = 7, .stream = 11, .std = 0.02, .local_extent = 100003, .global_extent = 100003}},
      {"512x48 of 512x96",
       512 * 48,
       {.seed = 5, .stream = 3, .std = 1.0, .local_extent = 48, .global_extent = 96, .offset = 48}},
  };
  for (const Fill& f : fills) {
    cases->push_back(
        {CaseName("fill_normal", DType::kF32, f.name), [=](const Backend& b, Outputs* out) {
           const Tensor x = b.Out({f.n});
           ops::FillNormal(x, f.init);
           out->Add("x", x, kDrawTol);
         }});
  }
}

// The whole table.
inline std::vector<OpCase> OpCases() {
  std::vector<OpCase> cases;
  AddLinearCases(&cases);
  AddEmbeddingCases(&cases);
  AddRmsNormCases(&cases);
  AddAddRmsNormCases(&cases);
  AddRopeCases(&cases);
  AddQkvRopeCases(&cases);
  AddMlaCases(&cases);
  AddColumnCases(&cases);
  AddAttentionCases(&cases);
  AddAttentionMergeCases(&cases);
  AddBiasCases(&cases);
  AddSwigluCases(&cases);
  AddSwigluPackedCases(&cases);
  AddCrossEntropyCases(&cases);
  AddRouterCases(&cases);
  AddDispatchCases(&cases);
  AddOptimizerAndReduceCases(&cases);
  AddWeightedSumOfSquaresCases(&cases);
  AddVectorPathCases(&cases);
  AddFillNormalCases(&cases);
  return cases;
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_KERNELS_OP_CASES_H_
