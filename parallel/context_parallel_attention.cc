#include "parallel/context_parallel_attention.h"

#include <utility>
#include <vector>

#include "core/logging.h"
#include "kernels/ops.h"

namespace tetra {
namespace {

// Tensors are (B, T, ...) with the sequence on dim 1, or lse (B, H, T) with
// it on dim 2. Viewed as rows of everything up to the sequence dim, each
// row's first half of columns is the first local chunk.
int64_t RowsBefore(const Tensor& x, int seq_dim) {
  int64_t rows = 1;
  for (int d = 0; d < seq_dim; ++d) rows *= x.dim(d);
  return rows;
}

Tensor AsRows(const Tensor& x, int64_t rows) { return x.Reshape({rows, x.numel() / rows}); }

Shape HalfShape(const Tensor& whole, int seq_dim) {
  Shape shape = whole.shape();
  shape[seq_dim] /= 2;
  return shape;
}

// halves = whole's two chunks, in whole's dtype.
void Split(const Tensor& whole, int seq_dim, std::array<Tensor, 2>& halves) {
  const int64_t rows = RowsBefore(whole, seq_dim);
  for (Tensor& half : halves)
    EnsureShape(&half, HalfShape(whole, seq_dim), whole.dtype(), whole.device());
  ops::SplitColumns(AsRows(whole, rows), AsRows(halves[0], rows), AsRows(halves[1], rows));
}

void Join(const std::array<Tensor, 2>& halves, int seq_dim, const Tensor& whole) {
  const int64_t rows = RowsBefore(whole, seq_dim);
  ops::ConcatColumns(AsRows(halves[0], rows), AsRows(halves[1], rows), AsRows(whole, rows));
}

// acc (fp32, allocated here) = part, or += part; `widened` holds a bf16 part in fp32.
void Accumulate(const Tensor& part, Tensor& acc, bool first, Tensor& widened) {
  if (first) {
    EnsureShape(&acc, part.shape(), DType::kF32, part.device());
    ops::Cast(part, acc);
  } else if (part.dtype() == DType::kF32) {
    ops::Add(part, acc);
  } else {
    EnsureShape(&widened, part.shape(), DType::kF32, part.device());
    ops::Cast(part, widened);
    ops::Add(widened, acc);
  }
}

// Sends each of `send` to the next rank of the ring and receives each of
// `recv` from the previous one, each pair as one grouped exchange (NCCL
// would deadlock lone sends and receives posted in the same order round
// the ring, and refuses them to oneself).
std::vector<CommHandle> RingShift(Communicator& ring, const std::vector<Tensor>& send,
                                  const std::vector<Tensor>& recv) {
  const int n = ring.size(), r = ring.rank();
  TETRA_CHECK(send.size() == recv.size())
      << "ring shift of " << send.size() << " tensors into " << recv.size();
  std::vector<CommHandle> handles;
  for (size_t i = 0; i < send.size(); ++i) {
    handles.push_back(ring.SendRecvAsync(send[i], (r + 1) % n, recv[i], (r + n - 1) % n));
  }
  return handles;
}

// The unmasked blocks of a step that holds another rank's K/V (header):
// every query against the block's first chunk, and the second chunk's
// queries against the whole block.
std::pair<AttentionShape, AttentionShape> BlockShapes(const AttentionShape& local) {
  AttentionShape first_keys = local;
  first_keys.kv_seq = local.seq / 2;
  first_keys.causal = false;
  AttentionShape last_queries = local;
  last_queries.seq = local.seq / 2;
  last_queries.kv_seq = local.seq;
  last_queries.causal = false;
  return {first_keys, last_queries};
}

void WaitAll(std::vector<CommHandle>& handles) {
  for (CommHandle& handle : handles) handle.Wait();
}

}  // namespace

void ContextParallelAttention::Forward(const AttentionShape& local, const Tensor& q,
                                       const Tensor& k, const Tensor& v, const Tensor& out,
                                       const Tensor& lse) {
  const int n = cp_.size(), r = cp_.rank();
  if (n == 1) {
    ops::Attention(local, q, k, v, out, lse);
    return;
  }
  TETRA_CHECK(local.causal && local.keys() == local.seq && local.seq % 2 == 0)
      << "context-parallel attention takes causal attention over two local chunks, not seq "
      << local.seq << " keys " << local.keys();
  const auto [first_keys, last_queries] = BlockShapes(local);

  EnsureShape(&block_out_, out.shape(), q.dtype(), q.device());
  EnsureShape(&block_lse_, lse.shape(), DType::kF32, lse.device());
  Split(q, 1, q_halves_);
  for (int b = 0; b < 2; ++b) {
    EnsureShape(&ring_k_[b], k.shape(), k.dtype(), k.device());
    EnsureShape(&ring_v_[b], v.shape(), v.dtype(), v.device());
  }
  Tensor held_k = k, held_v = v;
  for (int i = 0; i < n; ++i) {
    // The next block travels while this one is attended to.
    std::vector<CommHandle> shift;
    if (i + 1 < n) shift = RingShift(cp_, {held_k, held_v}, {ring_k_[i % 2], ring_v_[i % 2]});
    const int j = (r - i + n) % n;
    if (i == 0 || j < r) {
      if (i == 0) {
        ops::Attention(local, q, k, v, block_out_, block_lse_);
      } else {
        Split(held_k, 1, k_halves_);
        Split(held_v, 1, v_halves_);
        ops::Attention(first_keys, q, k_halves_[0], v_halves_[0], block_out_, block_lse_);
      }
      Split(block_out_, 1, out_halves_);
      Split(block_lse_, 2, lse_halves_);
      for (int h = 0; h < 2; ++h) Merge(i == 0, h);
    } else {
      ops::Attention(last_queries, q_halves_[1], held_k, held_v, out_halves_[1], lse_halves_[1]);
      Merge(false, 1);
    }
    WaitAll(shift);
    if (i + 1 < n) {
      held_k = ring_k_[i % 2];
      held_v = ring_v_[i % 2];
    }
  }
  EnsureShape(&joined_, out.shape(), DType::kF32, out.device());
  Join(out_acc_, 1, joined_);
  ops::Cast(joined_, out);
  Join(lse_acc_, 2, lse);
}

void ContextParallelAttention::Merge(bool first, int half) {
  if (first) {
    Accumulate(out_halves_[half], out_acc_[half], /*first=*/true, widened_);
    EnsureShape(&lse_acc_[half], lse_halves_[half].shape(), DType::kF32,
                lse_halves_[half].device());
    lse_acc_[half].CopyFrom(lse_halves_[half]);
  } else {
    ops::AttentionMerge(out_halves_[half], lse_halves_[half], out_acc_[half], lse_acc_[half]);
  }
}

void ContextParallelAttention::AccumulateHalves(const Tensor& whole, Halves& acc, bool first) {
  Split(whole, 1, grad_halves_);
  for (int h = 0; h < 2; ++h) Accumulate(grad_halves_[h], acc[h], first, widened_);
}

void ContextParallelAttention::PrepareBackward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                               const Tensor& v, const Tensor& out,
                                               const Tensor& lse) {
  EnsureShape(&block_dq_, q.shape(), q.dtype(), q.device());
  EnsureShape(&block_dk_, k.shape(), k.dtype(), k.device());
  EnsureShape(&block_dv_, v.shape(), v.dtype(), v.device());
  EnsureShape(&half_dq_, HalfShape(q, 1), q.dtype(), q.device());
  EnsureShape(&half_dk_, HalfShape(k, 1), k.dtype(), k.device());
  EnsureShape(&half_dv_, HalfShape(v, 1), v.dtype(), v.device());
  Split(q, 1, q_halves_);
  Split(dout, 1, dout_halves_);
  Split(out, 1, final_out_halves_);
  Split(lse, 2, final_lse_halves_);
  for (int b = 0; b < 2; ++b) {
    EnsureShape(&ring_k_[b], k.shape(), k.dtype(), k.device());
    EnsureShape(&ring_v_[b], v.shape(), v.dtype(), v.device());
    for (int h = 0; h < 2; ++h) {
      EnsureShape(&dk_acc_[b][h], HalfShape(k, 1), DType::kF32, k.device());
      EnsureShape(&dv_acc_[b][h], HalfShape(v, 1), DType::kF32, v.device());
    }
  }
}

void ContextParallelAttention::PassGradientsOn() {
  std::vector<Tensor> send, recv;
  for (const Halves* acc : {&dk_acc_[held_], &dv_acc_[held_]}) {
    send.insert(send.end(), acc->begin(), acc->end());
  }
  for (const Halves* acc : {&dk_acc_[1 - held_], &dv_acc_[1 - held_]}) {
    recv.insert(recv.end(), acc->begin(), acc->end());
  }
  std::vector<CommHandle> shift = RingShift(cp_, send, recv);
  WaitAll(shift);
  held_ = 1 - held_;
}

void ContextParallelAttention::BackwardRingStep(const AttentionShape& local, int j,
                                                const Tensor& dout, const Tensor& q,
                                                const Tensor& out, const Tensor& lse,
                                                const Tensor& held_k, const Tensor& held_v) {
  const auto [first_keys, last_queries] = BlockShapes(local);
  if (j < cp_.rank()) {
    Split(held_k, 1, k_halves_);
    Split(held_v, 1, v_halves_);
    ops::AttentionBackward(first_keys, dout, q, k_halves_[0], v_halves_[0], out, lse, block_dq_,
                           half_dk_, half_dv_);
    AccumulateHalves(block_dq_, dq_acc_, /*first=*/false);
    Accumulate(half_dk_, dk_acc_[held_][0], /*first=*/false, widened_);
    Accumulate(half_dv_, dv_acc_[held_][0], /*first=*/false, widened_);
  } else {
    ops::AttentionBackward(last_queries, dout_halves_[1], q_halves_[1], held_k, held_v,
                           final_out_halves_[1], final_lse_halves_[1], half_dq_, block_dk_,
                           block_dv_);
    Accumulate(half_dq_, dq_acc_[1], /*first=*/false, widened_);
    AccumulateHalves(block_dk_, dk_acc_[held_], /*first=*/false);
    AccumulateHalves(block_dv_, dv_acc_[held_], /*first=*/false);
  }
}

void ContextParallelAttention::Backward(const AttentionShape& local, const Tensor& dout,
                                        const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out, const Tensor& lse, const Tensor& dq,
                                        const Tensor& dk, const Tensor& dv) {
  const int n = cp_.size(), r = cp_.rank();
  if (n == 1) {
    ops::AttentionBackward(local, dout, q, k, v, out, lse, dq, dk, dv);
    return;
  }
  PrepareBackward(dout, q, k, v, out, lse);
  // The next block's K/V travel while a block is computed on; its dK/dV
  // accumulator follows once that computation has added to it.
  std::vector<CommHandle> kv_shift = RingShift(cp_, {k, v}, {ring_k_[1], ring_v_[1]});
  // The own block first.
  ops::AttentionBackward(local, dout, q, k, v, out, lse, block_dq_, block_dk_, block_dv_);
  held_ = 0;
  AccumulateHalves(block_dq_, dq_acc_, /*first=*/true);
  AccumulateHalves(block_dk_, dk_acc_[held_], /*first=*/true);
  AccumulateHalves(block_dv_, dv_acc_[held_], /*first=*/true);
  for (int i = 1; i < n; ++i) {
    PassGradientsOn();
    WaitAll(kv_shift);
    const Tensor held_k = ring_k_[i % 2], held_v = ring_v_[i % 2];
    if (i + 1 < n) {
      kv_shift = RingShift(cp_, {held_k, held_v}, {ring_k_[(i + 1) % 2], ring_v_[(i + 1) % 2]});
    }
    BackwardRingStep(local, (r - i + n) % n, dout, q, out, lse, held_k, held_v);
  }
  // One more hop takes each accumulator home.
  PassGradientsOn();
  for (auto [halves, grad] : {std::pair{&dq_acc_, &dq}, std::pair{&dk_acc_[held_], &dk},
                              std::pair{&dv_acc_[held_], &dv}}) {
    EnsureShape(&joined_, grad->shape(), DType::kF32, grad->device());
    Join(*halves, 1, joined_);
    ops::Cast(joined_, *grad);
  }
}

void ContextParallelAttention::ReleaseScratch() {
  for (Tensor* t : {&block_out_, &block_lse_, &joined_, &block_dq_, &block_dk_, &block_dv_,
                    &half_dq_, &half_dk_, &half_dv_, &widened_}) {
    *t = Tensor();
  }
  for (Halves* h :
       {&out_halves_, &lse_halves_, &out_acc_, &lse_acc_, &q_halves_, &dout_halves_,
        &final_out_halves_, &final_lse_halves_, &k_halves_, &v_halves_, &grad_halves_, &dq_acc_,
        &dk_acc_[0], &dk_acc_[1], &dv_acc_[0], &dv_acc_[1], &ring_k_, &ring_v_}) {
    *h = Halves{};
  }
}

}  // namespace tetra
