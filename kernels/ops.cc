#include "kernels/ops.h"

#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bias.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/mla_key_value.h"
#include "kernels/cpu/moe_dispatch.h"
#include "kernels/cpu/normal_init.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/router.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/op_contracts.h"
#include "kernels/op_profile.h"

namespace tetra::ops {
namespace {

// An op runs where its output (or its first tensor) lives; the CPU kernels
// then check that the others are on the host too.
template <typename... Tensors>
void ExpectHost(const Tensors&... tensors) {
  TETRA_CHECK(((!tensors.defined() || tensors.device() == DeviceType::kCPU) && ...))
      << "a device tensor given to a host op (mixed devices)";
}

bool OnDevice(const Tensor& t) {
#if !TETRA_HAVE_CUDA
  TETRA_CHECK(t.device() == DeviceType::kCPU) << "device tensor in a build without CUDA";
#endif
  return t.device() == DeviceType::kCUDA;
}

// Runs an op on the device: `call` (a generic lambda calling a tetra::cuda
// function of kernels/cuda/cuda_ops.h) returns the op's result. The lambda
// is instantiated only here, so a build without CUDA, where no device tensor
// exists (OnDevice refuses one), names no CUDA function.
template <typename Result = void, typename Call>
Result OnCuda(const Call& call) {
#if TETRA_HAVE_CUDA
  return call(nullptr);
#else
  (void)call;
  TETRA_CHECK(false) << "a device op in a build without CUDA";
  return Result();
#endif
}

int64_t Rows(const Tensor& t) { return t.numel() / t.dim(-1); }

// The CPU kernels compute in fp32 whatever the tensors hold, as the CUDA ones
// load bf16, compute in fp32 and store bf16: a bf16 operand is read through an
// fp32 copy, and a bf16 output is written to an fp32 copy (holding its values,
// for ops that accumulate) rounded back into it, nearest-even, when the op
// returns. fp32 operands are used in place; an undefined one is nullptr.
class HostF32 {
 public:
  HostF32() = default;
  HostF32(const HostF32&) = delete;
  HostF32& operator=(const HostF32&) = delete;
  ~HostF32() {
    for (auto& [narrow, wide] : outputs_) Cast(wide, narrow);
  }

  float* In(const Tensor& t) { return Wide(t, /*output=*/false); }
  float* Out(const Tensor& t) { return Wide(t, /*output=*/true); }

 private:
  float* Wide(const Tensor& t, bool output) {
    if (!t.defined()) return nullptr;
    TETRA_CHECK(t.device() == DeviceType::kCPU)
        << "a device tensor given to a host op (mixed devices)";
    if (t.dtype() == DType::kF32) return t.f32();
    TETRA_CHECK(t.dtype() == DType::kBF16)
        << "a host op on a " << DTypeName(t.dtype()) << " tensor";
    Tensor wide = Tensor::Empty(t.shape());
    Cast(t, wide);
    if (output) {
      outputs_.emplace_back(t, wide);
    } else {
      inputs_.push_back(wide);
    }
    return wide.f32();  // the storage lives on in inputs_ or outputs_
  }

  std::vector<Tensor> inputs_;                      // fp32 copies of bf16 inputs
  std::vector<std::pair<Tensor, Tensor>> outputs_;  // (bf16 output, its fp32 copy)
};

}  // namespace

void Linear(const Tensor& x, const Tensor& w, const Tensor& y) {
  CheckLinear(x, w, y);
  const int64_t in = w.dim(1), out = w.dim(0), rows = x.numel() / in;
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda([&](auto) { return cuda::Linear(x, w, y); });
  ExpectHost(x);
  HostF32 f32;
  cpu::LinearForward(f32.In(x), f32.In(w), rows, in, out, f32.Out(y));
}

void LinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                    const Tensor& dw, bool accumulate_dx, int64_t real_out) {
  if (real_out < 0) real_out = w.dim(0);
  CheckLinearBackward(dy, x, w, dx, dw, real_out);
  const int64_t in = w.dim(1), out = w.dim(0), rows = x.numel() / in;
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x))
    return OnCuda(
        [&](auto) { return cuda::LinearBackward(dy, x, w, dx, dw, accumulate_dx, real_out); });
  ExpectHost(dy);
  HostF32 f32;
  cpu::LinearBackward(f32.In(dy), f32.In(x), f32.In(w), rows, in, real_out, out, f32.Out(dx),
                      f32.Out(dw), accumulate_dx);
}

void Embedding(const Tensor& tokens, const Tensor& table, const Tensor& out) {
  CheckEmbedding(tokens, table, out);
  const OpTimer op_timer(__func__, table.device());
  if (OnDevice(table))
    return OnCuda([&](auto) { return cuda::Embedding(tokens, table, 0, /*sharded=*/false, out); });
  ExpectHost(table);
  HostF32 f32;
  cpu::EmbeddingForward(tokens.data<int32_t>(), tokens.numel(), f32.In(table), table.dim(0),
                        table.dim(1), f32.Out(out));
}

void EmbeddingBackward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable) {
  CheckEmbeddingBackward(tokens, dout, dtable);
  const OpTimer op_timer(__func__, dtable.device());
  if (OnDevice(dtable))
    return OnCuda(
        [&](auto) { return cuda::EmbeddingBackward(tokens, dout, 0, /*sharded=*/false, dtable); });
  ExpectHost(dtable);
  HostF32 f32;
  cpu::EmbeddingBackward(tokens.data<int32_t>(), tokens.numel(), f32.In(dout), dtable.dim(0),
                         dtable.dim(1), f32.Out(dtable));
}

void EmbeddingShard(const Tensor& tokens, const Tensor& table, int64_t vocab_begin,
                    const Tensor& out) {
  CheckEmbedding(tokens, table, out);
  const OpTimer op_timer(__func__, table.device());
  if (OnDevice(table))
    return OnCuda(
        [&](auto) { return cuda::Embedding(tokens, table, vocab_begin, /*sharded=*/true, out); });
  ExpectHost(table);
  HostF32 f32;
  cpu::EmbeddingShardForward(tokens.data<int32_t>(), tokens.numel(), f32.In(table), vocab_begin,
                             table.dim(0), table.dim(1), f32.Out(out));
}

void EmbeddingShardBackward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin,
                            const Tensor& dtable) {
  CheckEmbeddingBackward(tokens, dout, dtable);
  const OpTimer op_timer(__func__, dtable.device());
  if (OnDevice(dtable))
    return OnCuda([&](auto) {
      return cuda::EmbeddingBackward(tokens, dout, vocab_begin, /*sharded=*/true, dtable);
    });
  ExpectHost(dtable);
  HostF32 f32;
  cpu::EmbeddingShardBackward(tokens.data<int32_t>(), tokens.numel(), f32.In(dout), vocab_begin,
                              dtable.dim(0), dtable.dim(1), f32.Out(dtable));
}

void RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd) {
  CheckRmsNorm(x, w, y, rstd);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda([&](auto) { return cuda::RmsNorm(x, w, eps, y, rstd); });
  ExpectHost(x);
  HostF32 f32;
  cpu::RmsNormForward(f32.In(x), f32.In(w), Rows(x), x.dim(-1), eps, f32.Out(y), f32.Out(rstd));
}

void AddRmsNorm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& sum,
                const Tensor& y, const Tensor& rstd) {
  CheckAddRmsNorm(x, delta, w, sum, y, rstd);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x))
    return OnCuda([&](auto) { return cuda::AddRmsNorm(x, delta, w, eps, sum, y, rstd); });
  ExpectHost(x, delta, sum);
  HostF32 f32;
  cpu::AddRmsNormForward(f32.In(x), f32.In(delta), f32.In(w), Rows(x), x.dim(-1), eps,
                         sum.dtype() == DType::kBF16, f32.Out(sum), f32.Out(y), f32.Out(rstd));
}

void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw, const Tensor& dx_add) {
  CheckRmsNormBackward(dy, x, w, rstd, dx, dw, dx_add);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x))
    return OnCuda([&](auto) { return cuda::RmsNormBackward(dy, x, w, rstd, dx, dw, dx_add); });
  ExpectHost(x, dx_add);
  HostF32 f32;
  cpu::RmsNormBackward(f32.In(dy), f32.In(x), f32.In(w), f32.In(rstd), Rows(x), x.dim(-1),
                       f32.Out(dx), f32.Out(dw), f32.In(dx_add),
                       dx.defined() && dx.dtype() == DType::kBF16);
}

void Rope(const Tensor& x, const RopeTable& table) {
  CheckRope("rope", x, table, /*whole_heads=*/true);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda([&](auto) { return cuda::Rope(x, table, /*backward=*/false); });
  ExpectHost(x);
  HostF32 f32;
  cpu::RopeForward(f32.Out(x), x.dim(0), x.dim(1), x.dim(2), x.dim(3), table);
}

void RopeBackward(const Tensor& dx, const RopeTable& table) {
  CheckRope("rope backward", dx, table, /*whole_heads=*/true);
  const OpTimer op_timer(__func__, dx.device());
  if (OnDevice(dx)) return OnCuda([&](auto) { return cuda::Rope(dx, table, /*backward=*/true); });
  ExpectHost(dx);
  HostF32 f32;
  cpu::RopeBackward(f32.Out(dx), dx.dim(0), dx.dim(1), dx.dim(2), dx.dim(3), table);
}

void SplitQkvRope(const Tensor& qkv, const RopeTable& table, const Tensor& q, const Tensor& k,
                  const Tensor& v) {
  CheckQkvRope("split_qkv_rope", qkv, table, q, k, v);
  const OpTimer op_timer(__func__, qkv.device());
  if (OnDevice(qkv))
    return OnCuda([&](auto) { return cuda::QkvRope(qkv, table, q, k, v, /*backward=*/false); });
  ExpectHost(qkv, q, k, v);
  HostF32 f32;
  cpu::SplitQkvRope(f32.In(qkv), q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), table,
                    f32.Out(q), f32.Out(k), f32.Out(v));
}

void MergeQkvRopeBackward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                          const RopeTable& table, const Tensor& dqkv) {
  CheckQkvRope("merge_qkv_rope_backward", dqkv, table, dq, dk, dv);
  const OpTimer op_timer(__func__, dqkv.device());
  if (OnDevice(dqkv))
    return OnCuda([&](auto) { return cuda::QkvRope(dqkv, table, dq, dk, dv, /*backward=*/true); });
  ExpectHost(dqkv, dq, dk, dv);
  HostF32 f32;
  cpu::MergeQkvRopeBackward(f32.In(dq), f32.In(dk), f32.In(dv), dq.dim(0), dq.dim(1), dq.dim(2),
                            dk.dim(2), dq.dim(3), table, f32.Out(dqkv));
}

void DecoupledRope(const Tensor& x, const RopeTable& table, bool interleaved) {
  CheckRope("decoupled_rope", x, table, /*whole_heads=*/false);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x))
    return OnCuda(
        [&](auto) { return cuda::DecoupledRope(x, table, interleaved, /*backward=*/false); });
  ExpectHost(x);
  HostF32 f32;
  cpu::DecoupledRopeForward(f32.Out(x), x.dim(0), x.dim(1), x.dim(2), x.dim(3), table, interleaved);
}

void DecoupledRopeBackward(const Tensor& dx, const RopeTable& table, bool interleaved) {
  CheckRope("decoupled_rope_backward", dx, table, /*whole_heads=*/false);
  const OpTimer op_timer(__func__, dx.device());
  if (OnDevice(dx))
    return OnCuda(
        [&](auto) { return cuda::DecoupledRope(dx, table, interleaved, /*backward=*/true); });
  ExpectHost(dx);
  HostF32 f32;
  cpu::DecoupledRopeBackward(f32.Out(dx), dx.dim(0), dx.dim(1), dx.dim(2), dx.dim(3), table,
                             interleaved);
}

namespace {

// `columns` columns of every row from src's column src_column to dst's
// column dst_column.
void CopyColumns(const Tensor& src, int64_t src_column, const Tensor& dst, int64_t dst_column,
                 int64_t columns) {
  if (OnDevice(dst)) {
    return OnCuda(
        [&](auto) { return cuda::CopyColumns(src, src_column, dst, dst_column, columns); });
  }
  ExpectHost(src, dst);
  const size_t element = DTypeSize(src.dtype());
  const auto* from = static_cast<const char*>(src.raw()) + src_column * element;
  auto* to = static_cast<char*>(dst.raw()) + dst_column * element;
  for (int64_t r = 0; r < src.dim(0); ++r) {
    std::memcpy(to + r * dst.dim(1) * element, from + r * src.dim(1) * element, columns * element);
  }
}

}  // namespace

void ConcatColumns(const Tensor& a, const Tensor& b, const Tensor& out) {
  CheckColumnBlocks("concat_columns", out, a, b);
  const OpTimer op_timer(__func__, out.device());
  CopyColumns(a, 0, out, 0, a.dim(1));
  CopyColumns(b, 0, out, a.dim(1), b.dim(1));
}

void SplitColumns(const Tensor& in, const Tensor& a, const Tensor& b) {
  CheckColumnBlocks("split_columns", in, a, b);
  const OpTimer op_timer(__func__, in.device());
  CopyColumns(in, 0, a, 0, a.dim(1));
  CopyColumns(in, a.dim(1), b, 0, b.dim(1));
}

void MlaSplitKeyValue(const Tensor& kv, const Tensor& k_pe, const Tensor& key,
                      const Tensor& value) {
  const cpu::MlaKeyValueDims d = CheckMlaKeyValue("mla_split_key_value", kv, k_pe, key, value);
  const OpTimer op_timer(__func__, key.device());
  if (OnDevice(key))
    return OnCuda([&](auto) { return cuda::MlaSplitKeyValue(kv, k_pe, d.nope, key, value); });
  ExpectHost(kv, k_pe, key, value);
  HostF32 f32;
  cpu::MlaSplitKeyValue(f32.In(kv), f32.In(k_pe), d, f32.Out(key), f32.Out(value));
}

void MlaMergeKeyValueBackward(const Tensor& dkey, const Tensor& dvalue, const Tensor& dkv,
                              const Tensor& dk_pe) {
  const cpu::MlaKeyValueDims d =
      CheckMlaKeyValue("mla_merge_key_value_backward", dkv, dk_pe, dkey, dvalue);
  const OpTimer op_timer(__func__, dkey.device());
  if (OnDevice(dkey))
    return OnCuda(
        [&](auto) { return cuda::MlaMergeKeyValueBackward(dkey, dvalue, d.nope, dkv, dk_pe); });
  ExpectHost(dkey, dvalue, dkv, dk_pe);
  HostF32 f32;
  cpu::MlaMergeKeyValueBackward(f32.In(dkey), f32.In(dvalue), d, f32.Out(dkv), f32.Out(dk_pe));
}

void Attention(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& out, const Tensor& lse) {
  CheckAttention("attention", shape, q, k, v, out, lse);
  const OpTimer op_timer(__func__, q.device());
  if (OnDevice(q)) return OnCuda([&](auto) { return cuda::Attention(shape, q, k, v, out, lse); });
  ExpectHost(q);
  HostF32 f32;
  cpu::AttentionForward(shape, f32.In(q), f32.In(k), f32.In(v), f32.Out(out), f32.Out(lse));
}

void AttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  CheckAttention("attention_backward", shape, q, k, v, out, lse, dout, dq, dk, dv);
  const OpTimer op_timer(__func__, q.device());
  if (OnDevice(q))
    return OnCuda(
        [&](auto) { return cuda::AttentionBackward(shape, dout, q, k, v, out, lse, dq, dk, dv); });
  ExpectHost(q);
  HostF32 f32;
  cpu::AttentionBackward(shape, f32.In(dout), f32.In(q), f32.In(k), f32.In(v), f32.In(out),
                         f32.In(lse), f32.Out(dq), f32.Out(dk), f32.Out(dv));
}

void AttentionMerge(const Tensor& part_out, const Tensor& part_lse, const Tensor& out,
                    const Tensor& lse) {
  CheckAttentionMerge(part_out, part_lse, out, lse);
  const OpTimer op_timer(__func__, out.device());
  if (OnDevice(out))
    return OnCuda([&](auto) { return cuda::AttentionMerge(part_out, part_lse, out, lse); });
  ExpectHost(part_out, part_lse, out, lse);
  HostF32 f32;
  cpu::AttentionMerge(out.dim(0), out.dim(1), out.dim(2), out.dim(3), f32.In(part_out),
                      part_lse.f32(), out.f32(), lse.f32());
}

void AddBias(const Tensor& bias, const Tensor& y) {
  CheckAddBias(bias, y);
  const OpTimer op_timer(__func__, y.device());
  if (OnDevice(y)) return OnCuda([&](auto) { return cuda::AddBias(bias, y); });
  ExpectHost(y, bias);
  HostF32 f32;
  cpu::AddBias(f32.In(bias), Rows(y), y.dim(-1), f32.Out(y));
}

void BiasGradient(const Tensor& dy, const Tensor& dbias) {
  CheckBiasGradient(dy, dbias);
  const OpTimer op_timer(__func__, dy.device());
  if (OnDevice(dy)) return OnCuda([&](auto) { return cuda::BiasGradient(dy, dbias); });
  ExpectHost(dy, dbias);
  HostF32 f32;
  cpu::BiasGradient(f32.In(dy), Rows(dy), dy.dim(-1), dbias.f32());
}

void Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  CheckSwiglu("swiglu", {&gate, &up, &out});
  const OpTimer op_timer(__func__, gate.device());
  if (OnDevice(gate)) return OnCuda([&](auto) { return cuda::Swiglu(gate, up, out); });
  ExpectHost(gate);
  HostF32 f32;
  cpu::SwigluForward(f32.In(gate), f32.In(up), gate.numel(), f32.Out(out));
}

void SwigluBackward(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                    const Tensor& dup) {
  CheckSwiglu("swiglu backward", {&gate, &up, &dout, &dgate, &dup});
  const OpTimer op_timer(__func__, gate.device());
  if (OnDevice(gate))
    return OnCuda([&](auto) { return cuda::SwigluBackward(dout, gate, up, dgate, dup); });
  ExpectHost(gate);
  HostF32 f32;
  cpu::SwigluBackward(f32.In(dout), f32.In(gate), f32.In(up), gate.numel(), f32.Out(dgate),
                      f32.Out(dup));
}

void SwigluPacked(const Tensor& gate_up, const Tensor& out) {
  const auto [rows, width] = CheckSwigluPacked("packed swiglu", gate_up, out);
  const OpTimer op_timer(__func__, gate_up.device());
  if (OnDevice(gate_up)) return OnCuda([&](auto) { return cuda::SwigluPacked(gate_up, out); });
  ExpectHost(gate_up);
  HostF32 f32;
  cpu::SwigluPackedForward(f32.In(gate_up), rows, width, f32.Out(out));
}

void SwigluPackedBackward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up) {
  const auto [rows, width] = CheckSwigluPacked("packed swiglu backward", gate_up, dout, dgate_up);
  const OpTimer op_timer(__func__, gate_up.device());
  if (OnDevice(gate_up))
    return OnCuda([&](auto) { return cuda::SwigluPackedBackward(dout, gate_up, dgate_up); });
  ExpectHost(gate_up);
  HostF32 f32;
  cpu::SwigluPackedBackward(f32.In(dout), f32.In(gate_up), rows, width, f32.Out(dgate_up));
}

double CrossEntropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                    const Tensor& dlogits, int64_t vocab_size) {
  CheckCrossEntropy(logits, targets, dlogits, vocab_size);
  const OpTimer op_timer(__func__, logits.device());
  if (OnDevice(logits))
    return OnCuda<double>(
        [&](auto) { return cuda::CrossEntropy(logits, targets, grad_scale, dlogits, vocab_size); });
  ExpectHost(logits);
  HostF32 f32;
  return cpu::CrossEntropyForwardBackward(f32.In(logits), targets.data<int32_t>(), Rows(logits),
                                          logits.dim(-1), vocab_size, grad_scale, f32.Out(dlogits),
                                          nullptr);
}

void CrossEntropyRowStats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                          int64_t vocab_size, const Tensor& row_max, const Tensor& target_logit) {
  const int64_t rows = Rows(logits);
  CheckCrossEntropyRowStats(logits, targets, vocab_begin, row_max, target_logit);
  const OpTimer op_timer(__func__, logits.device());
  if (OnDevice(logits))
    return OnCuda([&](auto) {
      return cuda::CrossEntropyRowStats(logits, targets, vocab_begin, vocab_size, row_max,
                                        target_logit);
    });
  ExpectHost(logits, targets, row_max, target_logit);
  HostF32 f32;
  cpu::CrossEntropyRowStats(f32.In(logits), targets.data<int32_t>(), rows, logits.dim(-1),
                            vocab_begin, vocab_size, f32.Out(row_max), f32.Out(target_logit));
}

void CrossEntropySumExp(const Tensor& logits, int64_t vocab_begin, int64_t vocab_size,
                        const Tensor& row_max, const Tensor& sum_exp) {
  const int64_t rows = Rows(logits);
  CheckCrossEntropySumExp(logits, vocab_begin, row_max, sum_exp);
  const OpTimer op_timer(__func__, logits.device());
  if (OnDevice(logits))
    return OnCuda([&](auto) {
      return cuda::CrossEntropySumExp(logits, vocab_begin, vocab_size, row_max, sum_exp);
    });
  ExpectHost(logits, row_max, sum_exp);
  HostF32 f32;
  cpu::CrossEntropySumExp(f32.In(logits), f32.In(row_max), rows, logits.dim(-1), vocab_begin,
                          vocab_size, sum_exp.data<double>());
}

double CrossEntropyLoss(const Tensor& targets, const Tensor& row_max, const Tensor& target_logit,
                        const Tensor& sum_exp) {
  CheckCrossEntropyLoss(targets, row_max, target_logit, sum_exp);
  const OpTimer op_timer(__func__, row_max.device());
  if (OnDevice(row_max))
    return OnCuda<double>(
        [&](auto) { return cuda::CrossEntropyLoss(targets, row_max, target_logit, sum_exp); });
  ExpectHost(targets, row_max, target_logit, sum_exp);
  HostF32 f32;
  return cpu::CrossEntropyLoss(targets.data<int32_t>(), f32.In(row_max), f32.In(target_logit),
                               sum_exp.data<double>(), row_max.numel());
}

void CrossEntropyGradient(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                          int64_t vocab_size, const Tensor& row_max, const Tensor& sum_exp,
                          float grad_scale, const Tensor& dlogits) {
  const int64_t rows = Rows(logits);
  CheckCrossEntropyGradient(logits, targets, vocab_begin, row_max, sum_exp, dlogits);
  const OpTimer op_timer(__func__, logits.device());
  if (OnDevice(logits))
    return OnCuda([&](auto) {
      return cuda::CrossEntropyGradient(logits, targets, vocab_begin, vocab_size, row_max, sum_exp,
                                        grad_scale, dlogits);
    });
  ExpectHost(logits, targets, row_max, sum_exp, dlogits);
  HostF32 f32;
  cpu::CrossEntropyGradient(f32.In(logits), targets.data<int32_t>(), f32.In(row_max),
                            sum_exp.data<double>(), rows, logits.dim(-1), vocab_begin, vocab_size,
                            grad_scale, f32.Out(dlogits));
}

void RouterScores(const RouterSpec& spec, const Tensor& logits, const Tensor& scores) {
  CheckRouter("router scores", spec, logits, Tensor());
  TETRA_CHECK(scores.shape() == logits.shape() && scores.dtype() == DType::kF32)
      << "router scores " << ShapeString(scores.shape()) << " of logits "
      << ShapeString(logits.shape());
  const OpTimer op_timer(__func__, logits.device());
  if (OnDevice(logits))
    return OnCuda([&](auto) { return cuda::RouterScores(spec, logits, scores); });
  ExpectHost(logits, scores);
  HostF32 f32;
  cpu::RouterScores(spec, f32.In(logits), logits.dim(0), f32.Out(scores));
}

void RouterTopK(const RouterSpec& spec, const Tensor& scores, const Tensor& bias,
                const Tensor& expert, const Tensor& weights) {
  CheckRouterTopK(spec, scores, bias, expert, weights);
  const OpTimer op_timer(__func__, scores.device());
  if (OnDevice(scores))
    return OnCuda([&](auto) { return cuda::RouterTopK(spec, scores, bias, expert, weights); });
  ExpectHost(scores, bias, expert, weights);
  HostF32 f32;
  cpu::RouterTopK(spec, f32.In(scores), f32.In(bias), scores.dim(0), expert.data<int32_t>(),
                  f32.Out(weights));
}

void RouterWeightsBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& expert,
                           const Tensor& dweights, const Tensor& dscores) {
  CheckRouterWeightsBackward(spec, scores, expert, dweights, dscores);
  const OpTimer op_timer(__func__, scores.device());
  if (OnDevice(scores))
    return OnCuda(
        [&](auto) { return cuda::RouterWeightsBackward(spec, scores, expert, dweights, dscores); });
  ExpectHost(scores, expert, dweights, dscores);
  HostF32 f32;
  cpu::RouterWeightsBackward(spec, f32.In(scores), expert.data<int32_t>(), f32.In(dweights),
                             scores.dim(0), f32.Out(dscores));
}

void RouterScoresBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& dscores,
                          const Tensor& dlogits) {
  CheckRouterScoresBackward(spec, scores, dscores, dlogits);
  const OpTimer op_timer(__func__, scores.device());
  if (OnDevice(scores))
    return OnCuda([&](auto) { return cuda::RouterScoresBackward(spec, scores, dscores, dlogits); });
  ExpectHost(scores, dscores, dlogits);
  HostF32 f32;
  cpu::RouterScoresBackward(spec, f32.In(scores), f32.In(dscores), scores.dim(0), f32.Out(dlogits));
}

void SequenceBalanceStats(const RouterSpec& spec, const Tensor& scores, const Tensor& expert,
                          int64_t batch, int64_t seq, int64_t whole_seq, const Tensor& stats) {
  CheckSequenceBalance("sequence balance stats", spec, scores, expert, batch, seq, whole_seq,
                       stats);
  const OpTimer op_timer(__func__, scores.device());
  if (OnDevice(scores))
    return OnCuda([&](auto) {
      return cuda::SequenceBalanceStats(spec, scores, expert, batch, seq, whole_seq, stats);
    });
  ExpectHost(scores, expert, stats);
  HostF32 f32;
  cpu::SequenceBalanceStats(spec, f32.In(scores), expert.data<int32_t>(), batch, seq, whole_seq,
                            stats.data<double>());
}

double SequenceBalanceLoss(const RouterSpec& spec, const Tensor& scores, const Tensor& stats,
                           int64_t batch, int64_t seq, int64_t whole_seq, float grad_scale,
                           const Tensor& dscores) {
  CheckSequenceBalance("sequence balance loss", spec, scores, Tensor(), batch, seq, whole_seq,
                       stats, dscores);
  const OpTimer op_timer(__func__, scores.device());
  if (OnDevice(scores))
    return OnCuda<double>([&](auto) {
      return cuda::SequenceBalanceLoss(spec, scores, stats, batch, seq, whole_seq, grad_scale,
                                       dscores);
    });
  ExpectHost(scores, stats, dscores);
  HostF32 f32;
  return cpu::SequenceBalanceLoss(spec, f32.In(scores), stats.data<double>(), batch, seq, whole_seq,
                                  grad_scale, f32.Out(dscores));
}

void CountExpertLoads(const RouterSpec& spec, const Tensor& expert, const Tensor& loads) {
  CheckCountExpertLoads(spec, expert, loads);
  const OpTimer op_timer(__func__, expert.device());
  if (OnDevice(expert))
    return OnCuda([&](auto) { return cuda::CountExpertLoads(spec, expert, loads); });
  ExpectHost(expert, loads);
  cpu::CountExpertLoads(spec, expert.data<int32_t>(), expert.numel() / spec.top_k,
                        loads.data<int32_t>());
}

void UpdateRouterBias(const Tensor& loads, double speed, const Tensor& bias) {
  CheckUpdateRouterBias(loads, bias);
  const OpTimer op_timer(__func__, bias.device());
  if (OnDevice(bias))
    return OnCuda([&](auto) { return cuda::UpdateRouterBias(loads, speed, bias); });
  ExpectHost(loads, bias);
  cpu::UpdateRouterBias(loads.data<int32_t>(), static_cast<int>(bias.numel()), speed, bias.f32());
}

int64_t DispatchOrder(const Tensor& expert, const Tensor& weights, int64_t capacity,
                      const Tensor& send_row, const Tensor& send_token,
                      const Tensor& expert_counts) {
  CheckDispatchOrder(expert, weights, send_row, send_token, expert_counts);
  const OpTimer op_timer(__func__, expert.device());
  if (OnDevice(expert))
    return OnCuda<int64_t>([&](auto) {
      return cuda::DispatchOrder(expert, weights, capacity, send_row, send_token, expert_counts);
    });
  ExpectHost(expert, weights, send_row, send_token, expert_counts);
  HostF32 f32;
  return cpu::DispatchOrder(
      expert.data<int32_t>(), f32.In(weights), expert.dim(0), static_cast<int>(expert.dim(1)),
      static_cast<int>(expert_counts.numel()), capacity, send_row.data<int32_t>(),
      send_token.data<int32_t>(), expert_counts.data<int32_t>());
}

void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  CheckGatherRows(src, index, dst);
  const OpTimer op_timer(__func__, src.device());
  if (OnDevice(src)) return OnCuda([&](auto) { return cuda::GatherRows(src, index, dst); });
  ExpectHost(src, index, dst);
  HostF32 f32;
  cpu::GatherRows(f32.In(src), Rows(src), index.data<int32_t>(), index.numel(), src.dim(-1),
                  f32.Out(dst));
}

void CombineRows(const Tensor& src, const Tensor& index, const Tensor& weights, const Tensor& dst) {
  CheckCombineRows(src, index, weights, dst);
  const int64_t n = Rows(dst), c = dst.dim(-1);
  const OpTimer op_timer(__func__, dst.device());
  if (OnDevice(dst))
    return OnCuda([&](auto) { return cuda::CombineRows(src, index, weights, dst); });
  ExpectHost(src, index, weights, dst);
  HostF32 f32;
  cpu::CombineRows(f32.In(src), Rows(src), index.data<int32_t>(), f32.In(weights), n,
                   static_cast<int>(index.dim(1)), c, f32.Out(dst));
}

void CombineRowsBackward(const Tensor& ddst, const Tensor& src, const Tensor& index,
                         const Tensor& weights, const Tensor& dsrc, const Tensor& dweights) {
  CheckCombineRowsBackward(ddst, src, index, weights, dsrc, dweights);
  const int64_t n = Rows(ddst), c = ddst.dim(-1);
  const OpTimer op_timer(__func__, ddst.device());
  if (OnDevice(ddst))
    return OnCuda(
        [&](auto) { return cuda::CombineRowsBackward(ddst, src, index, weights, dsrc, dweights); });
  ExpectHost(ddst, src, index, weights, dsrc, dweights);
  HostF32 f32;
  cpu::CombineRowsBackward(f32.In(ddst), f32.In(src), Rows(src), index.data<int32_t>(),
                           f32.In(weights), n, static_cast<int>(index.dim(1)), c, f32.Out(dsrc),
                           f32.Out(dweights));
}

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWHyper& hyper) {
  CheckAdamW({param, grad, m, v, Tensor(), true});
  const OpTimer op_timer(__func__, param.device());
  if (OnDevice(param))
    return OnCuda([&](auto) {
      return cuda::AdamW({AdamWTensors{param, grad, m, v, Tensor(), true}}, hyper);
    });
  ExpectHost(param);
  HostF32 f32;
  cpu::AdamWUpdate(f32.Out(param), f32.In(grad), f32.Out(m), f32.Out(v), param.numel(), hyper);
}

double SumOfSquares(const Tensor& x) {
  CheckFloat("sum of squares", x);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda<double>([&](auto) { return cuda::SumOfSquares(x); });
  ExpectHost(x);
  HostF32 f32;
  return cpu::SumOfSquares(f32.In(x), x.numel());
}

double WeightedSumOfSquares(const std::vector<Tensor>& xs, const std::vector<double>& weights) {
  TETRA_CHECK(xs.size() == weights.size()) << "weighted sum of squares of " << xs.size()
                                           << " tensors with " << weights.size() << " weights";
  for (const Tensor& x : xs) {
    TETRA_CHECK(x.dtype() == DType::kF32 && x.device() == xs.front().device())
        << "weighted sum of squares of a " << DTypeName(x.dtype())
        << " tensor: fp32 tensors on one device expected";
  }
  if (xs.empty()) return 0.0;
  const OpTimer op_timer(__func__, xs.front().device());
  if (OnDevice(xs.front()))
    return OnCuda<double>([&](auto) { return cuda::WeightedSumOfSquares(xs, weights); });
  std::vector<const float*> data;
  std::vector<int64_t> sizes;
  for (const Tensor& x : xs) {
    data.push_back(x.f32());
    sizes.push_back(x.numel());
  }
  return cpu::WeightedSumOfSquares(data, sizes, weights);
}

void Scale(const Tensor& x, float factor) {
  CheckFloat("scale", x);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda([&](auto) { return cuda::Scale(x, factor); });
  ExpectHost(x);
  HostF32 f32;
  cpu::Scale(f32.Out(x), x.numel(), factor);
}

void ScaleMultiTensor(const std::vector<Tensor>& xs, float factor) {
  for (const Tensor& x : xs) {
    TETRA_CHECK(x.dtype() == DType::kF32 && x.device() == xs.front().device())
        << "multi-tensor scale of a " << DTypeName(x.dtype())
        << " tensor: fp32 tensors on one device expected";
  }
  if (xs.empty()) return;
  const OpTimer op_timer(__func__, xs.front().device());
  if (OnDevice(xs.front())) return OnCuda([&](auto) { return cuda::ScaleMultiTensor(xs, factor); });
  for (const Tensor& x : xs) cpu::Scale(x.f32(), x.numel(), factor);
}

void Add(const Tensor& x, const Tensor& y) { Add(x, y, y); }

void Add(const Tensor& x, const Tensor& y, const Tensor& out) {
  CheckAdd(x, y, out);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda([&](auto) { return cuda::Add(x, y, out); });
  ExpectHost(x, y, out);
  if (x.dtype() == DType::kF64) {
    cpu::Add(x.data<double>(), y.data<double>(), out.data<double>(), x.numel());
  } else {
    HostF32 f32;
    cpu::Add(f32.In(x), f32.In(y), f32.Out(out), x.numel());
  }
}

void AdamWMultiTensor(const std::vector<AdamWTensors>& tensors, const AdamWHyper& hyper) {
  if (tensors.empty()) return;
  for (const AdamWTensors& t : tensors) CheckAdamW(t);
  const OpTimer op_timer(__func__, tensors.front().param.device());
  if (OnDevice(tensors.front().param))
    return OnCuda([&](auto) { return cuda::AdamW(tensors, hyper); });
  for (const AdamWTensors& t : tensors) {
    ExpectHost(t.param);
    AdamWHyper h = hyper;
    if (!t.decay) h.weight_decay = 0.0;
    cpu::AdamWUpdate(t.param.f32(), t.grad.f32(), t.m.f32(), t.v.f32(), t.param.numel(), h);
    if (t.param_bf16.defined()) Cast(t.param, t.param_bf16);
  }
}

void Cast(const Tensor& src, const Tensor& dst) {
  CheckCast(src, dst);
  const OpTimer op_timer(__func__, src.device());
  if (OnDevice(src)) return OnCuda([&](auto) { return cuda::Cast(src, dst); });
  ExpectHost(dst);
  if (src.dtype() == dst.dtype()) {
    dst.CopyFrom(src);
  } else if (src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16) {
    const float* in = src.f32();
    uint16_t* out = dst.data<uint16_t>();
    for (int64_t i = 0; i < src.numel(); ++i) out[i] = FloatToBf16(in[i]);
  } else if (src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32) {
    const uint16_t* in = src.data<uint16_t>();
    float* out = dst.f32();
    for (int64_t i = 0; i < src.numel(); ++i) out[i] = Bf16ToFloat(in[i]);
  } else {
    TETRA_CHECK(false) << "no cast from " << DTypeName(src.dtype()) << " to "
                       << DTypeName(dst.dtype());
  }
}

void FillNormal(const Tensor& x, const NormalInit& init) {
  TETRA_CHECK(x.dtype() == DType::kF32) << "FillNormal writes fp32, not " << DTypeName(x.dtype());
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda([&](auto) { return cuda::FillNormal(x, init); });
  cpu::FillNormal(init, x.numel(), x.f32());
}

}  // namespace tetra::ops
