// DistributedOptimizer on a dp x tp grid of the world (tp innermost; the tp
// group is the norm group), ZeRO-0 and ZeRO-1, against a single-process
// reference computed here on every rank: ops::AdamW on each whole segment with
// the gradients summed over dp in closed form, the global norm summed over
// every tp slice with each segment's norm weight, torch's clip coefficient.
// Segments are random (sizes, gaps, decay, norm weights) and straddle bucket
// and block boundaries. Gradients are multiples of 1/16 with small
// numerators, so the dp sums are exact whatever order the reduction takes.
// Runs under mpirun with 2, 4 and 8 ranks; a dp size that does not divide the
// world skips.
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "gtest/gtest.h"
#include "kernels/op_profile.h"
#include "kernels/ops.h"
#include "optimizer/distributed_optimizer.h"
#include "parallel/gradient_reducer.h"

namespace tetra {
namespace {

constexpr double kTimeoutS = 30;  // far above the run time, far below ctest's TIMEOUT
constexpr int kSteps = 3;
// 0.002 MiB = 524 floats per bucket: several buckets over the ~2500 elements.
constexpr double kBucketMb = 0.002;
constexpr AdamWSettings kSettings{
    .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .clip_grad = 1.0};

// Tolerances.
// The norm under ZeRO-1 adds its sums of squares in other pieces than the
// reference (segments split at block boundaries), so it differs in double
// round-off only. ZeRO-0 adds the same pieces in the same order: exact.
constexpr double kZero1NormRelTol = 1e-13;
// Values are compared exactly: AdamW is elementwise, and the only input that
// could differ, the fp32 clip coefficient, comes from norms that agree to
// 1e-13 (a coefficient one ulp apart would need the norm to straddle an fp32
// rounding boundary; then this test would report it).

Communicator& World() {
  static std::unique_ptr<Communicator> world = MpiWorld(kTimeoutS);
  return *world;
}

// The dp x tp grid for a dp size: world rank w = d * tp + t.
struct Grid {
  int dp_size, tp_size, d, t;
  std::unique_ptr<Communicator> dp, tp;
};

// Split once per dp size, on first use; every rank runs the tests in the same
// order, so the collective Splits line up.
Grid& GridFor(int dp_size) {
  static std::map<int, Grid> grids;
  auto [it, inserted] = grids.try_emplace(dp_size);
  Grid& grid = it->second;
  if (inserted) {
    const int world = World().size(), me = World().rank();
    grid.dp_size = dp_size;
    grid.tp_size = world / dp_size;
    grid.d = me / grid.tp_size;
    grid.t = me % grid.tp_size;
    std::vector<int> dp_ranks, tp_ranks;
    for (int d = 0; d < dp_size; ++d) dp_ranks.push_back(d * grid.tp_size + grid.t);
    for (int t = 0; t < grid.tp_size; ++t) tp_ranks.push_back(grid.d * grid.tp_size + t);
    grid.dp = World().Split(dp_ranks, "dp");
    grid.tp = World().Split(tp_ranks, "tp");
  }
  return grid;
}

// 13 segments of 1..400 elements at 16-aligned offsets, some with an extra
// 16-element gap, random decay and norm weights. Same on every rank.
std::vector<FlatSegment> RandomSegments() {
  std::mt19937 rng(20240611);
  std::vector<FlatSegment> segments;
  int64_t offset = 0;
  for (int i = 0; i < 13; ++i) {
    const int64_t numel = 1 + rng() % 400;
    const double weights[] = {1.0, 0.5, 0.25};
    segments.push_back({offset, numel, rng() % 2 == 0, weights[rng() % 3]});
    offset += (numel + 15) / 16 * 16 + (rng() % 4 == 0 ? 16 : 0);
  }
  return segments;
}

int64_t EndOf(const std::vector<FlatSegment>& segments) {
  return segments.back().offset + segments.back().numel;
}

// Values of tp slice t and gradients of dp rank d on slice t at `step`,
// inside segments; zero in the gaps.
float Value(int t, int64_t i) { return static_cast<float>((i * 37 + t * 11) % 101 - 50) / 64.0f; }
float Grad(int d, int t, int step, int64_t i) {
  return static_cast<float>((i * 7 + d * 13 + t * 5 + step * 3) % 31 - 15) / 16.0f;
}

template <typename F>
Tensor FlatTensor(const std::vector<FlatSegment>& segments, int64_t total, F element) {
  Tensor flat = Tensor::Zeros({total});
  for (const FlatSegment& s : segments) {
    for (int64_t i = s.offset; i < s.offset + s.numel; ++i) flat.f32()[i] = element(i);
  }
  return flat;
}

Tensor SummedGrads(const std::vector<FlatSegment>& segments, int64_t total, int dp_size, int t,
                   int step) {
  return FlatTensor(segments, total, [&](int64_t i) {
    float sum = 0;
    for (int d = 0; d < dp_size; ++d) sum += Grad(d, t, step, i);
    return sum;
  });
}

Tensor SegmentOf(const Tensor& flat, const FlatSegment& s) {
  return flat.Slice(s.offset, s.offset + s.numel);
}

// The single-process run of tp slice `t`: whole segments, summed gradients.
struct Reference {
  std::vector<double> norms = {};  // per step, before clipping
  Tensor values;
};

Reference RunReference(const std::vector<FlatSegment>& segments, int64_t total, const Grid& grid,
                       double clip_grad) {
  Reference ref{.values = FlatTensor(segments, total, [&](int64_t i) { return Value(grid.t, i); })};
  Tensor m = Tensor::Zeros({total}), v = Tensor::Zeros({total});
  for (int step = 1; step <= kSteps; ++step) {
    double sum = 0;
    for (int t = 0; t < grid.tp_size; ++t) {
      const Tensor grads = SummedGrads(segments, total, grid.dp_size, t, step);
      double slice_sum = 0;
      for (const FlatSegment& s : segments) {
        slice_sum += s.norm_weight * ops::SumOfSquares(SegmentOf(grads, s));
      }
      sum += slice_sum;
    }
    const double norm = std::sqrt(sum);
    ref.norms.push_back(norm);
    const Tensor grads = SummedGrads(segments, total, grid.dp_size, grid.t, step);
    const double coefficient = clip_grad / (norm + 1e-6);
    for (const FlatSegment& s : segments) {
      if (clip_grad > 0 && coefficient < 1)
        ops::Scale(SegmentOf(grads, s), static_cast<float>(coefficient));
      const AdamWHyper hyper{.lr = 0.01 * step,
                             .beta1 = kSettings.beta1,
                             .beta2 = kSettings.beta2,
                             .eps = kSettings.eps,
                             .weight_decay = s.weight_decay ? kSettings.weight_decay : 0.0,
                             .step = step};
      ops::AdamW(SegmentOf(ref.values, s), SegmentOf(grads, s), SegmentOf(m, s), SegmentOf(v, s),
                 hyper);
    }
  }
  return ref;
}

struct Outcome {
  std::vector<double> norms = {};
  Tensor values;
  Tensor compute;  // the bf16 compute copy Step keeps
  int64_t optimizer_bytes = 0, param_bytes = 0, grad_bytes = 0;
  std::vector<int64_t> clip_ops = {};  // op-API calls each Clip made (kernels/op_profile.h)
};

Outcome RunDistributed(const std::vector<FlatSegment>& segments, int64_t total, Grid& grid,
                       double clip_grad, bool zero1) {
  ops::EnableOpProfile();  // counts the ops clipping launches
  Outcome run{.values = FlatTensor(segments, total, [&](int64_t i) { return Value(grid.t, i); }),
              .compute = Tensor::Zeros({total}, DType::kBF16)};
  const Tensor grads = Tensor::Zeros({total});
  GradientReducer reducer(grads, *grid.dp, kBucketMb, zero1);
  AdamWSettings settings = kSettings;
  settings.clip_grad = clip_grad;
  DistributedOptimizer optimizer(run.values, run.compute, segments, settings, reducer, *grid.tp);
  for (int step = 1; step <= kSteps; ++step) {
    grads.CopyFrom(
        FlatTensor(segments, total, [&](int64_t i) { return Grad(grid.d, grid.t, step, i); }));
    reducer.ReadyFrom(total / 2);
    reducer.Finish();
    const double norm = optimizer.GradNorm();
    run.norms.push_back(norm);
    const auto scale_ops = [] {
      return ops::OpProfileCalls("Scale") + ops::OpProfileCalls("ScaleMultiTensor");
    };
    const int64_t before = scale_ops();
    optimizer.Clip(norm);
    run.clip_ops.push_back(scale_ops() - before);
    optimizer.Step(0.01 * step, step);
  }
  run.optimizer_bytes = optimizer.optimizer_bytes();
  run.param_bytes = optimizer.param_bytes();
  run.grad_bytes = optimizer.grad_bytes();
  return run;
}

// Elements where `actual` and `expected` differ (bitwise), with the first few.
void ExpectSameValues(const Tensor& actual, const Tensor& expected, const char* what) {
  int64_t mismatches = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    if (actual.f32()[i] == expected.f32()[i]) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << actual.f32()[i] << ", expected "
                    << expected.f32()[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
}

// Every rank of the world holds the same bits of `value`.
void ExpectSameOnEveryRank(double value) {
  std::vector<double> all(World().size());
  World().AllGather(Tensor::View(&value, {1}, DType::kF64),
                    Tensor::View(all.data(), {World().size()}, DType::kF64));
  for (int r = 0; r < World().size(); ++r) EXPECT_EQ(all[r], value) << "world rank " << r;
}

int64_t SumOverGroup(Communicator& group, int64_t value) {
  int32_t local = static_cast<int32_t>(value), sum = 0;
  group.AllReduce(Tensor::View(&local, {1}, DType::kI32), Tensor::View(&sum, {1}, DType::kI32),
                  ReduceOp::kSum);
  return sum;
}

TEST(AdamWSettingsTest, TakesTheConfigsHyperparameters) {
  OptimizerConfig config;
  config.set_beta1(0.8);
  config.set_beta2(0.99);
  config.set_eps(1e-6);
  config.set_weight_decay(0.05);
  config.set_clip_grad(2.5);
  const AdamWSettings settings = AdamWSettings::FromConfig(config);
  EXPECT_EQ(settings.beta1, 0.8);
  EXPECT_EQ(settings.beta2, 0.99);
  EXPECT_EQ(settings.eps, 1e-6);
  EXPECT_EQ(settings.weight_decay, 0.05);
  EXPECT_EQ(settings.clip_grad, 2.5);
}

// (dp size, clip_grad)
class DistributedOptimizerTest : public testing::TestWithParam<std::tuple<int, double>> {};

TEST_P(DistributedOptimizerTest, Zero0AndZero1MatchTheSingleProcessReference) {
  const auto [dp_size, clip_grad] = GetParam();
  if (World().size() % dp_size != 0) {
    GTEST_SKIP() << "dp " << dp_size << " does not divide world " << World().size();
  }
  Grid& grid = GridFor(dp_size);
  const std::vector<FlatSegment> segments = RandomSegments();
  const int64_t total = GradientReducer::PaddedSize(EndOf(segments), dp_size);
  const Reference ref = RunReference(segments, total, grid, clip_grad);
  if (clip_grad > 0) {
    for (double norm : ref.norms) ASSERT_GT(norm, clip_grad) << "the test wants clipping active";
  }
  const Outcome zero0 = RunDistributed(segments, total, grid, clip_grad, /*zero1=*/false);
  const Outcome zero1 = RunDistributed(segments, total, grid, clip_grad, /*zero1=*/true);

  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE(testing::Message() << "step " << s + 1);
    EXPECT_EQ(zero0.norms[s], ref.norms[s]);
    EXPECT_NEAR(zero1.norms[s], ref.norms[s], kZero1NormRelTol * ref.norms[s]);
    ExpectSameOnEveryRank(zero0.norms[s]);
    ExpectSameOnEveryRank(zero1.norms[s]);
    // Clipping scales every one of the segments in one op (one launch on a
    // device), not one per segment; without clipping it does nothing.
    ASSERT_GT(segments.size(), 1u);
    EXPECT_EQ(zero0.clip_ops[s], clip_grad > 0 ? 1 : 0);
    EXPECT_LE(zero1.clip_ops[s], clip_grad > 0 ? 1 : 0);
  }
  ExpectSameValues(zero0.values, ref.values, "ZeRO-0 vs reference");
  ExpectSameValues(zero1.values, ref.values, "ZeRO-1 vs reference");
  // The compute copy is the values rounded to bf16, written by the update
  // itself (and, under ZeRO-1, cast from the other ranks' gathered blocks).
  Tensor rounded = Tensor::Empty({total}, DType::kBF16);
  ops::Cast(ref.values, rounded);
  for (const Outcome* run : {&zero0, &zero1}) {
    int64_t differ = 0;
    for (int64_t i = 0; i < total; ++i)
      differ += run->compute.data<uint16_t>()[i] != rounded.data<uint16_t>()[i];
    EXPECT_EQ(differ, 0) << (run == &zero0 ? "ZeRO-0" : "ZeRO-1") << " compute copy";
  }

  // Moments: ZeRO-0 holds m and v for every segment element; ZeRO-1 splits
  // exactly those over the dp ranks, each at most its 1 / dp of the buffer.
  int64_t parameters = 0;
  for (const FlatSegment& s : segments) parameters += s.numel;
  const int64_t moment_bytes = 2 * sizeof(float);
  EXPECT_EQ(zero0.optimizer_bytes, moment_bytes * parameters);
  EXPECT_EQ(SumOverGroup(*grid.dp, zero1.optimizer_bytes), zero0.optimizer_bytes);
  EXPECT_LE(zero1.optimizer_bytes, moment_bytes * total / dp_size);
  for (const Outcome* run : {&zero0, &zero1}) {
    EXPECT_EQ(run->param_bytes, static_cast<int64_t>(sizeof(float)) * total);
    EXPECT_EQ(run->grad_bytes, static_cast<int64_t>(sizeof(float)) * total);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, DistributedOptimizerTest,
                         testing::Combine(testing::Values(1, 2, 4), testing::Values(1.0, 0.0)),
                         [](const testing::TestParamInfo<std::tuple<int, double>>& info) {
                           return "dp" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) > 0 ? "_clip" : "_noclip");
                         });

}  // namespace
}  // namespace tetra
