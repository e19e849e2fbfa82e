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

namespace tetra {

RopeTable MakeRopeTable(int64_t seq, int64_t head_dim, double theta) {
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

// The CUDA kernels join in the CUDA backend; until then every op runs on the
// host and a device tensor here is a bug in the caller.
void ExpectHost(const Tensor& t) {
  TETRA_CHECK(!t.defined() || t.device() == DeviceType::kCPU) << "op has no CUDA kernel yet";
}

int64_t Rows(const Tensor& t) { return t.numel() / t.dim(-1); }

}  // namespace

void Linear(const Tensor& x, const Tensor& w, const Tensor& y) {
  ExpectHost(x);
  const int64_t in = w.dim(1), out = w.dim(0), rows = x.numel() / in;
  TETRA_CHECK(x.numel() == rows * in && y.numel() == rows * out)
      << "linear " << ShapeString(x.shape()) << " x " << ShapeString(w.shape()) << "^T -> "
      << ShapeString(y.shape());
  cpu::LinearForward(x.f32(), w.f32(), rows, in, out, y.f32());
}

void LinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                    const Tensor& dw, bool accumulate_dx) {
  ExpectHost(dy);
  const int64_t in = w.dim(1), out = w.dim(0), rows = x.numel() / in;
  TETRA_CHECK(x.numel() == rows * in && dy.numel() == rows * out &&
              (!dx.defined() || dx.numel() == x.numel()))
      << "linear backward " << ShapeString(dy.shape()) << ", " << ShapeString(x.shape()) << ", "
      << ShapeString(w.shape());
  cpu::LinearBackward(dy.f32(), x.f32(), w.f32(), rows, in, out,
                      dx.defined() ? dx.f32() : nullptr, dw.f32(), accumulate_dx);
}

void Embedding(const Tensor& tokens, const Tensor& table, const Tensor& out) {
  ExpectHost(table);
  cpu::EmbeddingForward(tokens.data<int32_t>(), tokens.numel(), table.f32(), table.dim(0),
                        table.dim(1), out.f32());
}

void EmbeddingBackward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable) {
  ExpectHost(dtable);
  cpu::EmbeddingBackward(tokens.data<int32_t>(), tokens.numel(), dout.f32(), dtable.dim(0),
                         dtable.dim(1), dtable.f32());
}

void EmbeddingShard(const Tensor& tokens, const Tensor& table, int64_t vocab_begin,
                    const Tensor& out) {
  ExpectHost(table);
  cpu::EmbeddingShardForward(tokens.data<int32_t>(), tokens.numel(), table.f32(), vocab_begin,
                             table.dim(0), table.dim(1), out.f32());
}

void EmbeddingShardBackward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin,
                            const Tensor& dtable) {
  ExpectHost(dtable);
  cpu::EmbeddingShardBackward(tokens.data<int32_t>(), tokens.numel(), dout.f32(), vocab_begin,
                              dtable.dim(0), dtable.dim(1), dtable.f32());
}

void RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd) {
  ExpectHost(x);
  cpu::RmsNormForward(x.f32(), w.f32(), Rows(x), x.dim(-1), eps, y.f32(), rstd.f32());
}

void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw) {
  ExpectHost(x);
  cpu::RmsNormBackward(dy.f32(), x.f32(), w.f32(), rstd.f32(), Rows(x), x.dim(-1), dx.f32(),
                       dw.f32());
}

void Rope(const Tensor& x, const RopeTable& table) {
  ExpectHost(x);
  cpu::RopeForward(x.f32(), x.dim(0), x.dim(1), x.dim(2), x.dim(3), table);
}

void RopeBackward(const Tensor& dx, const RopeTable& table) {
  ExpectHost(dx);
  cpu::RopeBackward(dx.f32(), dx.dim(0), dx.dim(1), dx.dim(2), dx.dim(3), table);
}

void Attention(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& out, const Tensor& lse) {
  ExpectHost(q);
  cpu::AttentionForward(shape, q.f32(), k.f32(), v.f32(), out.f32(), lse.f32());
}

void AttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  ExpectHost(q);
  cpu::AttentionBackward(shape, dout.f32(), q.f32(), k.f32(), v.f32(), out.f32(), lse.f32(),
                         dq.f32(), dk.f32(), dv.f32());
}

void Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  ExpectHost(gate);
  cpu::SwigluForward(gate.f32(), up.f32(), gate.numel(), out.f32());
}

void SwigluBackward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                    const Tensor& dgate, const Tensor& dup) {
  ExpectHost(gate);
  cpu::SwigluBackward(dout.f32(), gate.f32(), up.f32(), gate.numel(), dgate.f32(), dup.f32());
}

double CrossEntropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                    const Tensor& dlogits) {
  ExpectHost(logits);
  return cpu::CrossEntropyForwardBackward(logits.f32(), targets.data<int32_t>(), Rows(logits),
                                          logits.dim(-1), grad_scale,
                                          dlogits.defined() ? dlogits.f32() : nullptr, nullptr);
}

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWHyper& hyper) {
  ExpectHost(param);
  cpu::AdamWUpdate(param.f32(), grad.f32(), m.f32(), v.f32(), param.numel(), hyper);
}

double SumOfSquares(const Tensor& x) {
  ExpectHost(x);
  return cpu::SumOfSquares(x.f32(), x.numel());
}

void Scale(const Tensor& x, float factor) {
  ExpectHost(x);
  cpu::Scale(x.f32(), x.numel(), factor);
}

void Add(const Tensor& x, const Tensor& y) {
  ExpectHost(x);
  cpu::Add(x.f32(), y.f32(), x.numel());
}

}  // namespace tetra::ops
