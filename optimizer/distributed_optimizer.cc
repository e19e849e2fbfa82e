#include "optimizer/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/logging.h"
#include "core/profiler.h"
#include "kernels/ops.h"

namespace tetra {
AdamWSettings AdamWSettings::FromConfig(const OptimizerConfig& config) {
  return {.beta1 = config.beta1(),
          .beta2 = config.beta2(),
          .eps = config.eps(),
          .weight_decay = config.weight_decay(),
          .clip_grad = config.clip_grad()};
}

DistributedOptimizer::DistributedOptimizer(Tensor flat_values, Tensor flat_compute,
                                           std::vector<FlatSegment> segments,
                                           const AdamWSettings& settings,
                                           const GradientReducer& reducer, Communicator& norm_group)
    : values_(std::move(flat_values)),
      compute_(std::move(flat_compute)),
      grads_(reducer.flat_grads()),
      settings_(settings),
      reducer_(reducer),
      norm_group_(norm_group) {
  const int64_t total = grads_.numel();
  TETRA_CHECK(values_.dtype() == DType::kF32 && values_.shape() == grads_.shape())
      << "flat values " << DTypeName(values_.dtype()) << " " << ShapeString(values_.shape())
      << " do not match the flat gradients " << ShapeString(grads_.shape());
  TETRA_CHECK(!compute_.defined() || compute_.shape() == values_.shape())
      << "compute copy " << ShapeString(compute_.shape()) << " of flat values "
      << ShapeString(values_.shape());
  std::sort(segments.begin(), segments.end(),
            [](const FlatSegment& a, const FlatSegment& b) { return a.offset < b.offset; });
  int64_t previous_end = 0;
  for (const FlatSegment& s : segments) {
    TETRA_CHECK(s.offset >= previous_end && s.numel >= 0 && s.offset + s.numel <= total &&
                s.norm_weight > 0 && s.norm_weight <= 1)
        << "segment [" << s.offset << ", " << s.offset + s.numel << ") norm weight "
        << s.norm_weight << " overlaps the previous one (ending at " << previous_end
        << "), leaves the " << total << "-element buffer or has a weight outside (0, 1]";
    previous_end = s.offset + s.numel;
  }

  // Both lists are ascending and disjoint: walk them together.
  int64_t moments = 0;
  size_t first = 0;  // the first segment not wholly below the current range
  for (const FlatRange& range : reducer_.owned_ranges()) {
    pieces_of_range_.push_back(pieces_.size());
    while (first < segments.size() &&
           segments[first].offset + segments[first].numel <= range.begin) {
      ++first;
    }
    for (size_t i = first; i < segments.size() && segments[i].offset < range.end; ++i) {
      const FlatSegment& s = segments[i];
      const FlatRange piece{std::max(s.offset, range.begin),
                            std::min(s.offset + s.numel, range.end)};
      if (piece.size() <= 0) continue;
      pieces_.push_back({piece, moments, s.weight_decay, s.norm_weight});
      moments += piece.size();
    }
  }
  pieces_of_range_.push_back(pieces_.size());
  m_ = Tensor::Zeros({moments}, DType::kF32, values_.device());
  v_ = Tensor::Zeros({moments}, DType::kF32, values_.device());
}

std::vector<DistributedOptimizer::MomentView> DistributedOptimizer::moments() const {
  std::vector<MomentView> views;
  for (const Piece& p : pieces_) {
    const int64_t end = p.moment_offset + p.range.size();
    views.push_back({p.range, m_.Slice(p.moment_offset, end), v_.Slice(p.moment_offset, end)});
  }
  return views;
}

double DistributedOptimizer::GradNorm() {
  return std::sqrt(SumOverRanks(norm_group_, LocalGradSquaredSum()));
}

double DistributedOptimizer::LocalGradSquaredSum() {
  // One multi-tensor op: a single wait for the device, not one per piece.
  std::vector<Tensor> pieces;
  std::vector<double> weights;
  for (const Piece& p : pieces_) {
    pieces.push_back(grads_.Slice(p.range.begin, p.range.end));
    weights.push_back(p.norm_weight);
  }
  double local = ops::WeightedSumOfSquares(pieces, weights);
  // Under ZeRO-0 every dp rank holds the same sums: only the norm group adds.
  if (zero1()) local = SumOverRanks(reducer_.dp(), local);
  return local;
}

void DistributedOptimizer::Clip(double norm) {
  if (settings_.clip_grad <= 0) return;
  const double coefficient = settings_.clip_grad / (norm + 1e-6);
  if (coefficient >= 1.0) return;
  std::vector<Tensor> pieces;
  for (const Piece& p : pieces_) pieces.push_back(grads_.Slice(p.range.begin, p.range.end));
  ops::ScaleMultiTensor(pieces, static_cast<float>(coefficient));  // one launch, not one per piece
}

void DistributedOptimizer::Step(double lr, int step) {
  const std::vector<FlatRange>& owned = reducer_.owned_ranges();
  const AdamWHyper hyper{.lr = lr,
                         .beta1 = settings_.beta1,
                         .beta2 = settings_.beta2,
                         .eps = settings_.eps,
                         .weight_decay = settings_.weight_decay,  // on the pieces that decay
                         .step = step};
  auto range_of = [](const Tensor& flat, const FlatRange& r) { return flat.Slice(r.begin, r.end); };
  std::vector<CommHandle> gathers(zero1() ? owned.size() : 0);
  size_t gathered = 0;  // gathers [0, gathered) are known complete
  for (size_t k = 0; k < owned.size(); ++k) {
    std::vector<AdamWTensors> pieces;
    for (size_t i = pieces_of_range_[k]; i < pieces_of_range_[k + 1]; ++i) {
      const Piece& p = pieces_[i];
      const FlatRange moments{p.moment_offset, p.moment_offset + p.range.size()};
      pieces.push_back({.param = range_of(values_, p.range),
                        .grad = range_of(grads_, p.range),
                        .m = range_of(m_, moments),
                        .v = range_of(v_, moments),
                        .param_bf16 = compute_.defined() ? range_of(compute_, p.range) : Tensor(),
                        .decay = p.weight_decay});
    }
    ops::AdamWMultiTensor(pieces, hyper);
    if (!zero1()) continue;
    // Owned range k is this rank's block of bucket k: gathered in place.
    const FlatRange& bucket = reducer_.buckets()[k];
    gathers[k] =
        reducer_.dp().AllGatherAsync(range_of(values_, owned[k]), range_of(values_, bucket));
    // MPI progresses every request inside any MPI call: testing the oldest suffices.
    while (gathered < k && gathers[gathered].Test()) ++gathered;
  }
  if (zero1()) {
    const ScopedSpan span(SpanKind::kCommDp, "parameter all_gather dp");
    for (size_t k = 0; k < gathers.size(); ++k) {
      gathers[k].Wait();
      if (!compute_.defined()) continue;
      const FlatRange& bucket = reducer_.buckets()[k];
      for (const FlatRange& others :
           {FlatRange{bucket.begin, owned[k].begin}, FlatRange{owned[k].end, bucket.end}}) {
        if (others.size() > 0) ops::Cast(range_of(values_, others), range_of(compute_, others));
      }
    }
  }
}

}  // namespace tetra
