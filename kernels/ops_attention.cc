// The attention ops of the op API (kernels/ops.h): attention and its merge, RoPE,
// and the column moves around them (MLA's key and value, joined and split columns).
// Each checks its operands (kernels/op_contracts.h), then runs where its
// tensors are (kernels/op_dispatch.h).
#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/mla_key_value.h"
#include "kernels/cpu/rope.h"
#include "kernels/op_dispatch.h"
#include "kernels/ops.h"

namespace tetra::ops {

void Rope(const Tensor& x, const RopeTable& table) {
  CheckRope("rope", x, table, /*whole_heads=*/true);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda([&](auto) { return cuda::Rope(x, table); });
  ExpectHost(x);
  HostF32 f32;
  cpu::RopeForward(f32.Out(x), x.dim(0), x.dim(1), x.dim(2), x.dim(3), table);
}

void RopeBackward(const Tensor& dx, const RopeTable& table) {
  CheckRope("rope backward", dx, table, /*whole_heads=*/true);
  const OpTimer op_timer(__func__, dx.device());
  if (OnDevice(dx)) return OnCuda([&](auto) { return cuda::RopeBackward(dx, table); });
  ExpectHost(dx);
  HostF32 f32;
  cpu::RopeBackward(f32.Out(dx), dx.dim(0), dx.dim(1), dx.dim(2), dx.dim(3), table);
}

void SplitQkvRope(const Tensor& qkv, const RopeTable& table, const Tensor& q, const Tensor& k,
                  const Tensor& v) {
  CheckQkvRope("split_qkv_rope", qkv, table, q, k, v);
  const OpTimer op_timer(__func__, qkv.device());
  if (OnDevice(qkv)) return OnCuda([&](auto) { return cuda::SplitQkvRope(qkv, table, q, k, v); });
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
    return OnCuda([&](auto) { return cuda::MergeQkvRopeBackward(dq, dk, dv, table, dqkv); });
  ExpectHost(dqkv, dq, dk, dv);
  HostF32 f32;
  cpu::MergeQkvRopeBackward(f32.In(dq), f32.In(dk), f32.In(dv), dq.dim(0), dq.dim(1), dq.dim(2),
                            dk.dim(2), dq.dim(3), table, f32.Out(dqkv));
}

void DecoupledRope(const Tensor& x, const RopeTable& table, bool interleaved) {
  CheckRope("decoupled_rope", x, table, /*whole_heads=*/false);
  const OpTimer op_timer(__func__, x.device());
  if (OnDevice(x)) return OnCuda([&](auto) { return cuda::DecoupledRope(x, table, interleaved); });
  ExpectHost(x);
  HostF32 f32;
  cpu::DecoupledRopeForward(f32.Out(x), x.dim(0), x.dim(1), x.dim(2), x.dim(3), table, interleaved);
}

void DecoupledRopeBackward(const Tensor& dx, const RopeTable& table, bool interleaved) {
  CheckRope("decoupled_rope_backward", dx, table, /*whole_heads=*/false);
  const OpTimer op_timer(__func__, dx.device());
  if (OnDevice(dx))
    return OnCuda([&](auto) { return cuda::DecoupledRopeBackward(dx, table, interleaved); });
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
    return OnCuda([&](auto) { return cuda::MlaSplitKeyValue(kv, k_pe, key, value); });
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
    return OnCuda([&](auto) { return cuda::MlaMergeKeyValueBackward(dkey, dvalue, dkv, dk_pe); });
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

}  // namespace tetra::ops
