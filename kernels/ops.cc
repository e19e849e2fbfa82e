#include "kernels/ops.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"

#if TETRA_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/op_profile.h"
#endif

namespace tetra {

namespace {

// transformers' _compute_llama3_parameters, in fp32 as it runs there (a
// Python number over a tensor is the tensor's reciprocal times the number).
void ScaleLlama3(const RopeScaling& s, std::vector<float>& inv_freq) {
  const float factor = static_cast<float>(s.factor);
  const float low = static_cast<float>(s.low_freq_factor);
  const float old_context = static_cast<float>(s.original_max_position_embeddings);
  const float low_freq_wavelen = static_cast<float>(s.original_max_position_embeddings / s.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(s.original_max_position_embeddings / s.high_freq_factor);
  const float band = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  for (float& f : inv_freq) {
    const float wavelen = (1.0f / f) * static_cast<float>(2 * M_PI);
    if (wavelen > low_freq_wavelen) {
      f = f / factor;
    } else if (wavelen >= high_freq_wavelen) {
      const float smooth = ((1.0f / wavelen) * old_context - low) / band;
      f = (1 - smooth) * f / factor + smooth * f;
    }
  }
}

}  // namespace

RopeTable MakeRopeTable(int64_t seq, int64_t head_dim, double theta, const RopeScaling& scaling) {
  TETRA_CHECK(seq >= 0 && head_dim > 0 && head_dim % 2 == 0)
      << "seq " << seq << " head_dim " << head_dim;
  const int64_t half_dim = head_dim / 2;
  RopeTable table{.seq = seq,
                  .half_dim = half_dim,
                  .cos = Tensor::Empty({seq, half_dim}),
                  .sin = Tensor::Empty({seq, half_dim})};
  std::vector<float> inv_freq(half_dim);
  for (int64_t i = 0; i < half_dim; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  if (scaling.factor > 0) ScaleLlama3(scaling, inv_freq);
  float* cos = table.cos.f32();
  float* sin = table.sin.f32();
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t i = 0; i < half_dim; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      cos[p * half_dim + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[p * half_dim + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return table;
}

}  // namespace tetra

namespace tetra::ops {
namespace {

// An op runs where its first tensor lives; the CPU kernels then check that
// the others are on the host too.
void ExpectHost(const Tensor& t) {
  TETRA_CHECK(!t.defined() || t.device() == DeviceType::kCPU)
      << "a device tensor given to a host op (mixed devices)";
}

bool OnDevice(const Tensor& t) {
#if !TETRA_HAVE_CUDA
  TETRA_CHECK(t.device() == DeviceType::kCPU) << "device tensor in a build without CUDA";
#endif
  return t.device() == DeviceType::kCUDA;
}

}  // namespace

// Runs `call` (a tetra::cuda function) and returns when t is on the device,
// timed per op when TETRA_OP_PROFILE is set (kernels/cuda/op_profile.h).
#if TETRA_HAVE_CUDA
#define TETRA_ON_DEVICE(t, call)            \
  if (OnDevice(t)) {                        \
    const cuda::OpTimer op_timer(__func__); \
    return cuda::call;                      \
  }
#else
#define TETRA_ON_DEVICE(t, call) OnDevice(t)
#endif

namespace {

int64_t Rows(const Tensor& t) { return t.numel() / t.dim(-1); }

}  // namespace

void Linear(const Tensor& x, const Tensor& w, const Tensor& y) {
  // Checked before dispatch: cuBLASLt reads and writes whatever sizes it is told.
  const int64_t in = w.dim(1), out = w.dim(0), rows = x.numel() / in;
  TETRA_CHECK(x.numel() == rows * in && y.numel() == rows * out)
      << "linear " << ShapeString(x.shape()) << " x " << ShapeString(w.shape()) << "^T -> "
      << ShapeString(y.shape());
  TETRA_ON_DEVICE(x, Linear(x, w, y));
  ExpectHost(x);
  cpu::LinearForward(x.f32(), w.f32(), rows, in, out, y.f32());
}

void LinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                    const Tensor& dw, bool accumulate_dx) {
  const int64_t in = w.dim(1), out = w.dim(0), rows = x.numel() / in;
  TETRA_CHECK(x.numel() == rows * in && dy.numel() == rows * out && dw.numel() == w.numel() &&
              (!dx.defined() || dx.numel() == x.numel()))
      << "linear backward " << ShapeString(dy.shape()) << ", " << ShapeString(x.shape()) << ", "
      << ShapeString(w.shape());
  TETRA_ON_DEVICE(x, LinearBackward(dy, x, w, dx, dw, accumulate_dx));
  ExpectHost(dy);
  cpu::LinearBackward(dy.f32(), x.f32(), w.f32(), rows, in, out,
                      dx.defined() ? dx.f32() : nullptr, dw.f32(), accumulate_dx);
}

void Embedding(const Tensor& tokens, const Tensor& table, const Tensor& out) {
  TETRA_ON_DEVICE(table, Embedding(tokens, table, 0, /*sharded=*/false, out));
  ExpectHost(table);
  cpu::EmbeddingForward(tokens.data<int32_t>(), tokens.numel(), table.f32(), table.dim(0),
                        table.dim(1), out.f32());
}

void EmbeddingBackward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable) {
  TETRA_ON_DEVICE(dtable, EmbeddingBackward(tokens, dout, 0, /*sharded=*/false, dtable));
  ExpectHost(dtable);
  cpu::EmbeddingBackward(tokens.data<int32_t>(), tokens.numel(), dout.f32(), dtable.dim(0),
                         dtable.dim(1), dtable.f32());
}

void EmbeddingShard(const Tensor& tokens, const Tensor& table, int64_t vocab_begin,
                    const Tensor& out) {
  TETRA_ON_DEVICE(table, Embedding(tokens, table, vocab_begin, /*sharded=*/true, out));
  ExpectHost(table);
  cpu::EmbeddingShardForward(tokens.data<int32_t>(), tokens.numel(), table.f32(), vocab_begin,
                             table.dim(0), table.dim(1), out.f32());
}

void EmbeddingShardBackward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin,
                            const Tensor& dtable) {
  TETRA_ON_DEVICE(dtable, EmbeddingBackward(tokens, dout, vocab_begin, /*sharded=*/true, dtable));
  ExpectHost(dtable);
  cpu::EmbeddingShardBackward(tokens.data<int32_t>(), tokens.numel(), dout.f32(), vocab_begin,
                              dtable.dim(0), dtable.dim(1), dtable.f32());
}

void RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd) {
  TETRA_ON_DEVICE(x, RmsNorm(x, w, eps, y, rstd));
  ExpectHost(x);
  cpu::RmsNormForward(x.f32(), w.f32(), Rows(x), x.dim(-1), eps, y.f32(), rstd.f32());
}

void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw) {
  TETRA_ON_DEVICE(x, RmsNormBackward(dy, x, w, rstd, dx, dw));
  ExpectHost(x);
  cpu::RmsNormBackward(dy.f32(), x.f32(), w.f32(), rstd.f32(), Rows(x), x.dim(-1), dx.f32(),
                       dw.f32());
}

void Rope(const Tensor& x, const RopeTable& table) {
  TETRA_ON_DEVICE(x, Rope(x, table, /*backward=*/false));
  ExpectHost(x);
  cpu::RopeForward(x.f32(), x.dim(0), x.dim(1), x.dim(2), x.dim(3), table);
}

void RopeBackward(const Tensor& dx, const RopeTable& table) {
  TETRA_ON_DEVICE(dx, Rope(dx, table, /*backward=*/true));
  ExpectHost(dx);
  cpu::RopeBackward(dx.f32(), dx.dim(0), dx.dim(1), dx.dim(2), dx.dim(3), table);
}

void Attention(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& out, const Tensor& lse) {
  TETRA_ON_DEVICE(q, Attention(shape, q, k, v, out, lse));
  ExpectHost(q);
  cpu::AttentionForward(shape, q.f32(), k.f32(), v.f32(), out.f32(), lse.f32());
}

void AttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  TETRA_ON_DEVICE(q, AttentionBackward(shape, dout, q, k, v, out, lse, dq, dk, dv));
  ExpectHost(q);
  cpu::AttentionBackward(shape, dout.f32(), q.f32(), k.f32(), v.f32(), out.f32(), lse.f32(),
                         dq.f32(), dk.f32(), dv.f32());
}

void Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  TETRA_ON_DEVICE(gate, Swiglu(gate, up, out));
  ExpectHost(gate);
  cpu::SwigluForward(gate.f32(), up.f32(), gate.numel(), out.f32());
}

void SwigluBackward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                    const Tensor& dgate, const Tensor& dup) {
  TETRA_ON_DEVICE(gate, SwigluBackward(dout, gate, up, dgate, dup));
  ExpectHost(gate);
  cpu::SwigluBackward(dout.f32(), gate.f32(), up.f32(), gate.numel(), dgate.f32(), dup.f32());
}

double CrossEntropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                    const Tensor& dlogits) {
  TETRA_ON_DEVICE(logits, CrossEntropy(logits, targets, grad_scale, dlogits));
  ExpectHost(logits);
  return cpu::CrossEntropyForwardBackward(logits.f32(), targets.data<int32_t>(), Rows(logits),
                                          logits.dim(-1), grad_scale,
                                          dlogits.defined() ? dlogits.f32() : nullptr, nullptr);
}

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWHyper& hyper) {
  TETRA_ON_DEVICE(param, AdamW({AdamWTensors{param, grad, m, v, Tensor(), true}}, hyper));
  ExpectHost(param);
  cpu::AdamWUpdate(param.f32(), grad.f32(), m.f32(), v.f32(), param.numel(), hyper);
}

double SumOfSquares(const Tensor& x) {
  TETRA_ON_DEVICE(x, SumOfSquares(x));
  ExpectHost(x);
  return cpu::SumOfSquares(x.f32(), x.numel());
}

void Scale(const Tensor& x, float factor) {
  TETRA_ON_DEVICE(x, Scale(x, factor));
  ExpectHost(x);
  cpu::Scale(x.f32(), x.numel(), factor);
}

void Add(const Tensor& x, const Tensor& y) {
  TETRA_ON_DEVICE(x, Add(x, y));
  ExpectHost(x);
  cpu::Add(x.f32(), y.f32(), x.numel());
}

void AdamWMultiTensor(const std::vector<AdamWTensors>& tensors, const AdamWHyper& hyper) {
  if (tensors.empty()) return;
  TETRA_ON_DEVICE(tensors.front().param, AdamW(tensors, hyper));
  for (const AdamWTensors& t : tensors) {
    ExpectHost(t.param);
    AdamWHyper h = hyper;
    if (!t.decay) h.weight_decay = 0.0;
    cpu::AdamWUpdate(t.param.f32(), t.grad.f32(), t.m.f32(), t.v.f32(), t.param.numel(), h);
    if (t.param_bf16.defined()) Cast(t.param, t.param_bf16);
  }
}

void Cast(const Tensor& src, const Tensor& dst) {
  TETRA_ON_DEVICE(src, Cast(src, dst));
  ExpectHost(dst);
  TETRA_CHECK(src.numel() == dst.numel()) << "cast " << src.numel() << " into " << dst.numel();
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

}  // namespace tetra::ops
