// The op table's other half: calls the op API refuses on every backend
// (kernels/op_contracts.h), each breaking one rule the device has (a
// cuBLASLt type combination, a kernel that reads its operands through one
// type, a grid limit), with a part of the message that names it.
// tests/kernels/op_table_test.cc expects each to die on the CPU,
// tests/kernels/cuda/op_table_gpu_test.cc on the device: a CPU run fails
// where a GPU run would.
#ifndef TETRA_TESTS_KERNELS_OP_REFUSALS_H_
#define TETRA_TESTS_KERNELS_OP_REFUSALS_H_

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/op_types.h"
#include "kernels/ops.h"

namespace tetra::testing {

struct OpRefusal {
  std::string name;
  std::string message;  // a part of the fatal message
  std::function<void(DeviceType)> call;
};

inline void PrintTo(const OpRefusal& r, std::ostream* os) { *os << r.name; }

inline std::vector<OpRefusal> OpRefusals() {
  // Zeros of `shape` and `dtype` on `device`.
  auto z = [](DeviceType device, const Shape& shape, DType dtype = DType::kF32) {
    return Tensor::Zeros(shape, dtype, device);
  };
  constexpr DType kBF16 = DType::kBF16;
  const char* kOneDtype = "one dtype for all of them";
  const char* kGemmOutput = "cuBLASLt writes fp32, or the inputs' dtype";
  const char* kRouterFp32 = "the router runs in fp32";
  std::vector<OpRefusal> r;
  r.push_back({"an fp32 bias added to bf16 rows", kOneDtype, [=](DeviceType d) {
                 ops::AddBias(z(d, {8}), z(d, {3, 8}, kBF16));
               }});
  r.push_back(
      {"a bias gradient into bf16", "a parameter gradient, summed in fp32", [=](DeviceType d) {
         ops::BiasGradient(z(d, {3, 8}, kBF16), z(d, {8}, kBF16));
       }});
  r.push_back({"linear of bf16 activations by an fp32 weight (MoE's router before its fix)",
               kOneDtype, [=](DeviceType d) {
                 ops::Linear(z(d, {4, 8}, kBF16), z(d, {3, 8}), z(d, {4, 3}));
               }});
  r.push_back({"linear of fp32 inputs into a bf16 output", kGemmOutput, [=](DeviceType d) {
                 ops::Linear(z(d, {4, 8}), z(d, {3, 8}), z(d, {4, 3}, kBF16));
               }});
  r.push_back({"linear backward of fp32 dy with bf16 x (MoE's router gradient before its fix)",
               kOneDtype, [=](DeviceType d) {
                 ops::LinearBackward(z(d, {4, 3}), z(d, {4, 8}, kBF16), z(d, {3, 8}), Tensor(),
                                     z(d, {3, 8}));
               }});
  r.push_back({"linear backward of bf16 dy into an fp32 weight's dx", kOneDtype, [=](DeviceType d) {
                 ops::LinearBackward(z(d, {4, 3}, kBF16), z(d, {4, 8}, kBF16), z(d, {3, 8}),
                                     z(d, {4, 8}, kBF16), Tensor());
               }});
  r.push_back({"embedding of a bf16 table into fp32 rows", kOneDtype, [=](DeviceType d) {
                 ops::Embedding(z(d, {2}, DType::kI32), z(d, {5, 4}, kBF16), z(d, {2, 4}));
               }});
  r.push_back(
      {"embedding backward into a bf16 table gradient", "adds rows into it atomically",
       [=](DeviceType d) {
         ops::EmbeddingBackward(z(d, {2}, DType::kI32), z(d, {2, 4}, kBF16), z(d, {5, 4}, kBF16));
       }});
  r.push_back(
      {"rmsnorm of bf16 activations by an fp32 weight", kOneDtype, [=](DeviceType d) {
         ops::RmsNorm(z(d, {2, 4}, kBF16), z(d, {4}), 1e-5f, z(d, {2, 4}, kBF16), z(d, {2}));
       }});
  r.push_back({"rmsnorm backward into a bf16 weight gradient", "must be F32", [=](DeviceType d) {
                 ops::RmsNormBackward(z(d, {2, 4}, kBF16), z(d, {2, 4}, kBF16), z(d, {4}, kBF16),
                                      z(d, {2}), z(d, {2, 4}, kBF16), z(d, {4}, kBF16));
               }});
  r.push_back({"swiglu of mixed dtypes", kOneDtype, [=](DeviceType d) {
                 ops::Swiglu(z(d, {2, 4}, kBF16), z(d, {2, 4}), z(d, {2, 4}, kBF16));
               }});
  r.push_back(
      {"cross-entropy of fp32 logits into bf16 gradients", kOneDtype, [=](DeviceType d) {
         ops::CrossEntropy(z(d, {2, 5}), z(d, {2}, DType::kI32), 1.0f, z(d, {2, 5}, kBF16), 5);
       }});
  r.push_back(
      {"attention with bf16 queries and fp32 keys", kOneDtype, [=](DeviceType d) {
         const AttentionShape s{.batch = 1, .seq = 2, .q_heads = 1, .kv_heads = 1, .head_dim = 8};
         ops::Attention(s, z(d, {1, 2, 1, 8}, kBF16), z(d, {1, 2, 1, 8}), z(d, {1, 2, 1, 8}, kBF16),
                        z(d, {1, 2, 1, 8}, kBF16), z(d, {1, 1, 2}));
       }});
  r.push_back({"attention over 70000 heads (grid y)", "grid limit of 65535", [=](DeviceType d) {
                 const AttentionShape s{
                     .batch = 1, .seq = 1, .q_heads = 70000, .kv_heads = 1, .head_dim = 8};
                 ops::Attention(s, z(d, {1, 1, 70000, 8}), z(d, {1, 1, 1, 8}), z(d, {1, 1, 1, 8}),
                                z(d, {1, 1, 70000, 8}), z(d, {1, 70000, 1}));
               }});
  r.push_back({"attention over 70000 sequences (grid z)", "grid limit of 65535", [=](DeviceType d) {
                 const AttentionShape s{
                     .batch = 70000, .seq = 1, .q_heads = 1, .kv_heads = 1, .head_dim = 8};
                 ops::Attention(s, z(d, {70000, 1, 1, 8}), z(d, {70000, 1, 1, 8}),
                                z(d, {70000, 1, 1, 8}), z(d, {70000, 1, 1, 8}),
                                z(d, {70000, 1, 1}));
               }});
  r.push_back({"decoupled rope of 1100 pairs per head", "at most 1024", [=](DeviceType d) {
                 RopeTable table{
                     .seq = 1, .half_dim = 1100, .cos = z(d, {1, 1100}), .sin = z(d, {1, 1100})};
                 ops::DecoupledRope(z(d, {1, 1, 1, 2200}), table, /*interleaved=*/false);
               }});
  r.push_back({"router top-k with a bf16 correction bias", kRouterFp32, [=](DeviceType d) {
                 const RouterSpec spec{.num_experts = 4, .top_k = 2};
                 ops::RouterTopK(spec, z(d, {3, 4}), z(d, {4}, kBF16), z(d, {3, 2}, DType::kI32),
                                 z(d, {3, 2}));
               }});
  r.push_back({"router over 2048 experts", "at most 1024", [=](DeviceType d) {
                 const RouterSpec spec{.num_experts = 2048, .top_k = 2};
                 ops::RouterScores(spec, z(d, {1, 2048}), z(d, {1, 2048}));
               }});
  r.push_back(
      {"combine rows with bf16 routing weights", "routing weights stay fp32", [=](DeviceType d) {
         ops::CombineRows(z(d, {2, 4}, kBF16), z(d, {2, 1}, DType::kI32), z(d, {2, 1}, kBF16),
                          z(d, {2, 4}, kBF16));
       }});
  r.push_back({"adamw on a bf16 gradient", "must be F32", [=](DeviceType d) {
                 ops::AdamW(z(d, {4}), z(d, {4}, kBF16), z(d, {4}), z(d, {4}), AdamWHyper{});
               }});
  r.push_back({"cast between int32 tensors", "each fp32 or bf16",
               [=](DeviceType d) { ops::Cast(z(d, {4}, DType::kI32), z(d, {4}, DType::kI32)); }});
  return r;
}

}  // namespace tetra::testing

#endif  // TETRA_TESTS_KERNELS_OP_REFUSALS_H_
