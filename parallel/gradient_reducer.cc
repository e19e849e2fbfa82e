#include "parallel/gradient_reducer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/logging.h"
#include "core/profiler.h"

namespace tetra {
namespace {

int64_t RoundUp(int64_t n, int64_t unit) { return (n + unit - 1) / unit * unit; }

}  // namespace

int64_t GradientReducer::PaddedSize(int64_t elements, int dp_size) {
  TETRA_CHECK(elements >= 0 && dp_size >= 1) << "elements " << elements << " dp " << dp_size;
  return RoundUp(elements, kBlockAlignment * dp_size);
}

GradientReducer::GradientReducer(Tensor flat_grads, Communicator& dp, double bucket_mb,
                                 bool reduce_scatter)
    : flat_grads_(std::move(flat_grads)), dp_(dp), reduce_scatter_(reduce_scatter) {
  TETRA_CHECK(flat_grads_.dtype() == DType::kF32 && flat_grads_.rank() == 1)
      << "flat gradients must be (total) fp32, got " << DTypeName(flat_grads_.dtype()) << " "
      << ShapeString(flat_grads_.shape());
  TETRA_CHECK(bucket_mb > 0) << "bucket size " << bucket_mb << " MB";
  const int64_t total = flat_grads_.numel();
  const int64_t unit = kBlockAlignment * (reduce_scatter_ ? dp_.size() : 1);
  TETRA_CHECK(total % unit == 0) << "flat gradient buffer of " << total
                                 << " elements is not a multiple of " << unit
                                 << "; allocate GradientReducer::PaddedSize(elements, "
                                 << dp_.size() << ")";

  // Equal buckets of whole units, as many as it takes to stay near bucket_mb.
  const int64_t units = total / unit;
  const int64_t target_units =
      std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * kBytesPerMb / sizeof(float)) / unit);
  const int64_t count = (units + target_units - 1) / target_units;
  int64_t begin = 0;
  for (int64_t b = 0; b < count; ++b) {
    // The higher buckets, launched first, take the remainder's extra units.
    const int64_t size = (units / count + (b >= count - units % count ? 1 : 0)) * unit;
    buckets_.push_back({begin, begin + size});
    begin += size;
  }
  TETRA_CHECK(begin == total) << begin << " != " << total;
  next_ = completed_ = static_cast<int>(buckets_.size());
  in_flight_.resize(buckets_.size());

  if (reduce_scatter_) {
    for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
      owned_ranges_.push_back(Block(b, dp_.rank()));
    }
  } else if (total > 0) {
    owned_ranges_.push_back({0, total});
  }
}

FlatRange GradientReducer::Block(int bucket, int dp_rank) const {
  TETRA_CHECK(reduce_scatter_) << "blocks exist only under reduce-scatter";
  const FlatRange& range = buckets_[bucket];
  const int64_t block = range.size() / dp_.size();
  return {range.begin + dp_rank * block, range.begin + (dp_rank + 1) * block};
}

void GradientReducer::Launch(int bucket) {
  const FlatRange& range = buckets_[bucket];
  const Tensor data = flat_grads_.Slice(range.begin, range.end);
  if (reduce_scatter_) {
    const FlatRange own = Block(bucket, dp_.rank());  // in place: this rank's block of the bucket
    in_flight_[bucket] =
        dp_.ReduceScatterAsync(data, flat_grads_.Slice(own.begin, own.end), ReduceOp::kSum);
  } else {
    in_flight_[bucket] = dp_.AllReduceAsync(data, data, ReduceOp::kSum);
  }
}

void GradientReducer::ReadyFrom(int64_t offset) {
  if (dp_.size() == 1) return;
  while (next_ > 0 && buckets_[next_ - 1].begin >= offset) Launch(--next_);
  // MPI progresses every request inside any MPI call: testing the oldest suffices.
  while (completed_ > next_ && in_flight_[completed_ - 1].Test()) --completed_;
}

void GradientReducer::Finish() {
  if (dp_.size() > 1) {
    const ScopedSpan span(SpanKind::kCommDp, "gradient reduce dp");
    while (next_ > 0) Launch(--next_);
    for (CommHandle& handle : in_flight_) handle.Wait();
  }
  next_ = completed_ = static_cast<int>(buckets_.size());
}

}  // namespace tetra
