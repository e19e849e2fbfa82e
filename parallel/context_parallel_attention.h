// Causal attention over sequences split across the context-parallel group
// (context_shard.h): ring attention, as Megatron-Core's context parallelism
// (Transformer Engine's P2P ring) computes it.
//
// Each rank keeps its queries; key/value blocks travel round the ring, one
// hop per step, each rank receiving from the previous and sending to the next
// while it attends to the block it holds. With the load-balanced chunks, at
// step i rank r holds the block of rank j = r - i (mod cp):
//   i = 0     its own two chunks: causal attention over its 2S tokens;
//   j < r     its queries see only j's first chunk (j's second lies after
//             both of r's): every query, keys [0, S) of the block, unmasked;
//   j > r     only r's second chunk sees j, all of it: queries [S, 2S),
//             every key of the block, unmasked.
// Whole masked blocks are skipped, and each rank does the same work. The
// partial results merge by their log-sum-exps (ops::AttentionMerge) into
// fp32 accumulators, rounded to the activations' dtype once at the end.
//
// The backward sends the blocks round again (the next one travelling while
// the current one is computed on), each followed by its fp32 dK/dV
// accumulator, which every rank adds its share to (with the final out and
// lse, the blocks' gradients are exact shares of the whole's); after cp
// steps and one more hop each accumulator is back at its owner.
//
// One rank (cp = 1) is plain ops::Attention.
#ifndef TETRA_PARALLEL_CONTEXT_PARALLEL_ATTENTION_H_
#define TETRA_PARALLEL_CONTEXT_PARALLEL_ATTENTION_H_

#include <array>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/op_types.h"

namespace tetra {

class ContextParallelAttention {
 public:
  // `cp` is the context group (outlives this).
  explicit ContextParallelAttention(Communicator& cp) : cp_(cp) {}

  // `local`: the causal attention shape of this rank's tokens (B, T / cp);
  // q (B, T/cp, Hq, D), k (B, T/cp, Hkv, D), v (B, T/cp, Hkv, Dv) -> out
  // (B, T/cp, Hq, Dv), lse (B, Hq, T/cp): this rank's rows of attention over
  // the whole sequences.
  void Forward(const AttentionShape& local, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& out, const Tensor& lse);
  // The gradients of this rank's q, k and v (written), given its rows of
  // dout and the forward's out and lse.
  void Backward(const AttentionShape& local, const Tensor& dout, const Tensor& q, const Tensor& k,
                const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq,
                const Tensor& dk, const Tensor& dv);
  // Frees the scratch (the next call allocates anew).
  void ReleaseScratch();

 private:
  // A pair of half-length (B, S, ...) tensors: the two local chunks.
  using Halves = std::array<Tensor, 2>;

  // Merges the step's attention of chunk `half`'s queries (out_halves_,
  // lse_halves_) into its accumulators; the first step initialises them.
  void Merge(bool first, int half);
  // acc (fp32 halves) = or += whole's two chunks.
  void AccumulateHalves(const Tensor& whole, Halves& acc, bool first);
  // The backward's scratch, shaped for these tensors, and q, dout, out and
  // lse split into their chunks.
  void PrepareBackward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& out, const Tensor& lse);
  // Ring step i >= 1 of the backward: the gradients from the block held
  // (K/V of rank j = r - i) into dq_acc_ and its dK/dV accumulators.
  void BackwardRingStep(const AttentionShape& local, int j, const Tensor& dout, const Tensor& q,
                        const Tensor& out, const Tensor& lse, const Tensor& held_k,
                        const Tensor& held_v);
  // Passes the held block's dK/dV accumulators on to the next rank, taking
  // the previous rank's in their place.
  void PassGradientsOn();

  Communicator& cp_;
  // Scratch, reused across calls: one step's attention over every local
  // query, its halves, and the fp32 accumulators of out and lse.
  Tensor block_out_, block_lse_;
  Halves out_halves_, lse_halves_, out_acc_, lse_acc_;
  Halves q_halves_, dout_halves_, final_out_halves_, final_lse_halves_;
  Halves k_halves_, v_halves_, grad_halves_;  // a held block's chunks; a gradient's
  Halves ring_k_, ring_v_;                    // the blocks in flight (double-buffered)
  Tensor joined_;                             // fp32, before the final cast
  Tensor block_dq_, block_dk_, block_dv_, half_dq_, half_dk_, half_dv_, widened_;
  Halves dq_acc_;
  // dK and dV accumulators (fp32 halves) of the block held and of the one arriving.
  std::array<Halves, 2> dk_acc_, dv_acc_;
  int held_ = 0;  // which of dk_acc_/dv_acc_ belongs to the block held
};

}  // namespace tetra

#endif  // TETRA_PARALLEL_CONTEXT_PARALLEL_ATTENTION_H_
