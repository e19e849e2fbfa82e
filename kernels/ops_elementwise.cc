// The elementwise ops of the op API (kernels/ops.h): embedding lookups, SwiGLU,
// adds, casts and the normal initialiser.
// Each checks its operands (kernels/op_contracts.h), then runs where its
// tensors are (kernels/op_dispatch.h).
#include <cstdint>

#include "kernels/cpu/embedding.h"
#include "kernels/cpu/normal_init.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/op_dispatch.h"
#include "kernels/ops.h"

namespace tetra::ops {

void Embedding(const Tensor& tokens, const Tensor& table, const Tensor& out) {
  CheckEmbedding(tokens, table, out);
  const OpTimer op_timer(__func__, table.device());
  if (OnDevice(table)) return OnCuda([&](auto) { return cuda::Embedding(tokens, table, out); });
  ExpectHost(table);
  HostF32 f32;
  cpu::EmbeddingForward(tokens.data<int32_t>(), tokens.numel(), f32.In(table), table.dim(0),
                        table.dim(1), f32.Out(out));
}

void EmbeddingBackward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable) {
  CheckEmbeddingBackward(tokens, dout, dtable);
  const OpTimer op_timer(__func__, dtable.device());
  if (OnDevice(dtable))
    return OnCuda([&](auto) { return cuda::EmbeddingBackward(tokens, dout, dtable); });
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
    return OnCuda([&](auto) { return cuda::EmbeddingShard(tokens, table, vocab_begin, out); });
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
    return OnCuda(
        [&](auto) { return cuda::EmbeddingShardBackward(tokens, dout, vocab_begin, dtable); });
  ExpectHost(dtable);
  HostF32 f32;
  cpu::EmbeddingShardBackward(tokens.data<int32_t>(), tokens.numel(), f32.In(dout), vocab_begin,
                              dtable.dim(0), dtable.dim(1), f32.Out(dtable));
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
