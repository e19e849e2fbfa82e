// Data-parallel gradient reduction, overlapped with backward. The flat
// gradient buffer is cut into buckets of about `bucket_mb`; backward fills
// gradients from the end of the buffer towards the start, and as soon as a
// whole bucket is final its sum over the data-parallel group is launched, non-
// blocking, while backward goes on with the buckets below it (as PyTorch DDP
// and Megatron-LM's DistributedDataParallel do).
//
//   ZeRO-0 (all-reduce):       every rank ends with the whole summed buffer.
//   ZeRO-1 (reduce-scatter):   rank r of dp ends with block r of each bucket
//                              summed (the rest of the buffer is garbage);
//                              DistributedOptimizer updates those blocks.
//
// The sum, not the mean: each rank's gradients are already scaled by 1 / the
// global token count. Buckets are always launched from the highest to the
// lowest, whatever offsets ReadyFrom is called with, so every rank issues the
// same collectives in the same order.
//
// Buffer layout: (total) fp32, total a multiple of kBlockAlignment x dp under
// reduce-scatter (x 1 under all-reduce); allocate PaddedSize(elements, dp)
// and leave the tail zero. Bucket sizes are multiples of that unit, so every
// rank's block starts 64-byte aligned.
#ifndef TETRA_PARALLEL_GRADIENT_REDUCER_H_
#define TETRA_PARALLEL_GRADIENT_REDUCER_H_

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "parallel/flat_segment.h"

namespace tetra {

class GradientReducer {
 public:
  // Elements in 64 bytes of fp32: the alignment of every rank's block.
  static constexpr int64_t kBlockAlignment = 16;
  // parallel.dp_bucket_mb and `bucket_mb` count MiB (2^20 bytes) of fp32
  // gradients, wherever a bucket is sized (the layout planner too).
  static constexpr double kBytesPerMb = 1024.0 * 1024.0;

  // The smallest multiple of kBlockAlignment x dp_size that holds `elements`:
  // the size to allocate the flat value and gradient buffers with.
  static int64_t PaddedSize(int64_t elements, int dp_size);

  // `flat_grads` (total) fp32 is reduced in place; it and `dp` must outlive
  // this. `bucket_mb` (MiB of fp32, > 0) is the target bucket size.
  GradientReducer(Tensor flat_grads, Communicator& dp, double bucket_mb, bool reduce_scatter);
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // "Every gradient at flat offset >= `offset` is final": launches every
  // not-yet-launched bucket lying entirely at >= offset, and lets in-flight
  // ones progress (MPI moves only inside MPI calls). Call it from the
  // backward of the last micro-batch of a step only; earlier micro-batches
  // still accumulate into the buffer.
  void ReadyFrom(int64_t offset);
  // Launches the remaining buckets and waits for all (its wait is a kCommDp
  // span of core/profiler.h). Afterwards the next step starts over with no
  // bucket launched.
  void Finish();
  // Buckets launched since the last Finish() (the highest ones).
  int buckets_launched() const { return static_cast<int>(buckets_.size()) - next_; }

  // Ascending, contiguous, covering [0, total).
  const std::vector<FlatRange>& buckets() const { return buckets_; }
  // Under reduce-scatter: block `dp_rank` of `bucket`, the part that rank
  // holds summed (its 1 / dp of the bucket).
  FlatRange Block(int bucket, int dp_rank) const;
  // What this rank holds summed after Finish(), ascending: Block(b, dp.rank())
  // of every bucket b under reduce-scatter, [0, total) under all-reduce.
  const std::vector<FlatRange>& owned_ranges() const { return owned_ranges_; }

  bool reduce_scatter() const { return reduce_scatter_; }
  Communicator& dp() const { return dp_; }
  const Tensor& flat_grads() const { return flat_grads_; }

 private:
  void Launch(int bucket);

  Tensor flat_grads_;
  Communicator& dp_;
  bool reduce_scatter_;
  std::vector<FlatRange> buckets_;
  std::vector<FlatRange> owned_ranges_;
  std::vector<CommHandle> in_flight_;  // one per bucket; complete when not launched
  int next_ = 0;                       // buckets [next_, size) are launched
  int completed_ = 0;                  // buckets [completed_, size) are known complete
};

}  // namespace tetra

#endif  // TETRA_PARALLEL_GRADIENT_REDUCER_H_
