// The model optimizer's gradient finalisation under data parallelism (alone
// and with tensor parallelism) against the single-rank run, under mpirun: the
// world is split into jobs of tp x dp consecutive ranks (layouts whose tp x dp
// does not divide the world size skip), each with its ParallelState, and each
// job runs step 1 as train/train_step.cc does: data-parallel rank r takes
// samples r*B/dp .. (r+1)*B/dp - 1 of the global batch in micro-batches,
// gradients scaled by 1 / (B x T) accumulate, the gradient-ready callback
// feeds ModelOptimizer::GradientsReadyFrom only on the last micro-batch, then
// FinalizeGradients. For (tp, dp) in (2,1), (4,1), (1,2), (1,4), (2,2) (and
// (2,4), (4,2) with 8 ranks), ZeRO-1 off and on (dp > 1), sequence
// parallelism off and on (tp > 1), untied head, and one tied case per layout:
//   - the step's loss (summed over dp) against the single-rank loss;
//   - the global gradient norm against the single-rank gradients' norm;
//   - every gradient element this rank holds reduced (all of its slice under
//     all-reduce, only its owned_ranges() under ZeRO-1), at its global index,
//     against the gradient of the model built in this process on one rank
//     with the same seed over the whole global batch, micro-batch by
//     micro-batch (sequence-parallel norm weights and shared key-value heads
//     summed by the finalisation);
//   - that the ranks of the job together checked every global element of
//     every parameter, each exactly (TP replicas) x (dp, or 1 under ZeRO-1)
//     times, so no shard or owned block is left out or counted twice.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "core/logging.h"
#include "gtest/gtest.h"
#include "model/language_model.h"
#include "model/model_dims.h"
#include "optimizer/model_optimizer.h"
#include "parallel/gradient_reducer.h"
#include "parallel/parallel_state.h"
#include "proto/config.pb.h"
#include "tests/testing/tiny_models.h"
#include "tests/testing/whole_model.h"

namespace tetra {
namespace {

// Deadline of every collective: far above their run time with 8 ranks on 2
// cores, far below ctest's TIMEOUT, so a hang fails with the watchdog's message.
constexpr double kTimeoutS = 60;

struct Tolerances {
  // The sharded, data-parallel run adds the same fp32 terms in other
  // groupings (per-rank partial sums over samples, heads or features, then
  // sums over ranks): round-off of ~1e-7 per operation through two layers.
  double loss_rel = 1e-5;
  // Measured against the gradient tensor's largest element, so tiny entries
  // do not demand relative accuracy they cannot have; a missing or doubled
  // contribution (a rank's samples, a micro-batch) is off by O(1/dp).
  double grad_rel_to_max = 1e-4;
};
constexpr Tolerances kTol;

constexpr uint64_t kSeed = 23;
// The global batch of the step: 8 samples of 8 tokens, in micro-batches of 2,
// so each data-parallel rank runs 4, 2 or 1 micro-batches at dp 1, 2, 4.
constexpr int64_t kGlobalBatch = 8, kMicroBatch = 2, kSeq = 8;
// Buckets of 0.002 MiB = 524 floats: many buckets, so ZeRO-1 blocks cut
// parameters at arbitrary offsets and reduction overlaps backward.
constexpr double kBucketMb = 0.002;

Communicator& World() {
  static std::unique_ptr<Communicator> world = MpiWorld(kTimeoutS);
  return *world;
}

// The parallel state of one training job of tp x dp consecutive world ranks,
// made once per layout on first use; every rank runs the tests in the same
// order and skips the same ones, so the collective Split calls line up.
const ParallelState& Job(int tp, int dp) {
  static std::map<std::pair<int, int>, std::unique_ptr<ParallelState>> cache;
  std::unique_ptr<ParallelState>& state = cache[{tp, dp}];
  if (!state) {
    const int size = tp * dp, first = World().rank() / size * size;
    std::vector<int> ranks(size);
    std::iota(ranks.begin(), ranks.end(), first);
    ParallelConfig parallel;
    parallel.set_tensor(tp);
    absl::StatusOr<ParallelState> made =
        ParallelState::Create(parallel, World().Split(ranks, "job"));
    TETRA_CHECK(made.ok()) << made.status();
    state = std::make_unique<ParallelState>(*std::move(made));
  }
  return *state;
}

// Samples [first, first + count) of the global batch, (count, T) each: ids
// spread over the whole vocabulary, different for every sample.
void LoadSamples(int64_t first, int64_t count, int vocab, std::vector<int32_t>& inputs,
                 std::vector<int32_t>& targets) {
  inputs.resize(count * kSeq);
  targets.resize(count * kSeq);
  for (int64_t s = 0; s < count; ++s) {
    for (int64_t t = 0; t < kSeq; ++t) {
      const int64_t sample = first + s;
      inputs[s * kSeq + t] = static_cast<int32_t>((sample * 13 + t * 11 + 3) % vocab);
      targets[s * kSeq + t] = static_cast<int32_t>((sample * 7 + t * 5 + 40) % vocab);
    }
  }
}

// (tp, dp) of the job; the last two run only with 8 ranks.
constexpr std::pair<int, int> kLayouts[] = {{2, 1}, {4, 1}, {1, 2}, {1, 4}, {2, 2}, {2, 4}, {4, 2}};

struct Case {
  int tp, dp;
  bool tie, zero1, sequence_parallel;
};

// "tp2_dp2_untied_zero1_sp": the test's name suffix, and how gtest prints it.
std::string Name(const Case& c) {
  return "tp" + std::to_string(c.tp) + "_dp" + std::to_string(c.dp) +
         (c.tie ? "_tied" : "_untied") + (c.zero1 ? "_zero1" : "") +
         (c.sequence_parallel ? "_sp" : "");
}
void PrintTo(const Case& c, std::ostream* os) { *os << Name(c); }

// Untied: every combination of ZeRO-1 and SP the layout allows. Tied: one
// case per layout, with both where they apply.
std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const auto& [tp, dp] : kLayouts) {
    for (bool zero1 : {false, true}) {
      for (bool sp : {false, true}) {
        if ((zero1 && dp == 1) || (sp && tp == 1)) continue;
        cases.push_back({tp, dp, /*tie=*/false, zero1, sp});
      }
    }
    cases.push_back({tp, dp, /*tie=*/true, dp > 1, tp > 1});
  }
  return cases;
}

class DataParallelGradientsTest : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallelGradientsTest, StepOneGradientsMatchTheSingleRankRun) {
  const Case& c = GetParam();
  if (World().size() % (c.tp * c.dp) != 0) {
    GTEST_SKIP() << "tp x dp = " << c.tp * c.dp << " does not divide the world size "
                 << World().size();
  }
  const ParallelState& job = Job(c.tp, c.dp);
  Communicator& dp = job.grad();
  ASSERT_EQ(job.tensor().size(), c.tp);
  ASSERT_EQ(dp.size(), c.dp);
  const ModelConfig config = testing::TinyGqaConfig(c.tie);
  ASSERT_TRUE(ValidateTensorParallel(config, c.tp, c.sequence_parallel, kMicroBatch * kSeq).ok());
  const float grad_scale = 1.0f / static_cast<float>(kGlobalBatch * kSeq);
  std::vector<int32_t> inputs, targets;

  // The single-rank run: the whole global batch, micro-batch by micro-batch.
  LanguageModel reference(config, kSeed);
  double want_loss = 0;
  for (int64_t first = 0; first < kGlobalBatch; first += kMicroBatch) {
    LoadSamples(first, kMicroBatch, config.vocab_size(), inputs, targets);
    want_loss += testing::ForwardBackward(reference, inputs.data(), targets.data(), kMicroBatch,
                                          kSeq, grad_scale);
  }

  // Step 1 as train/train_step.cc runs it, micro-batch by micro-batch.
  TrainerConfig trainer;
  *trainer.mutable_model() = config;
  trainer.mutable_parallel()->set_tensor(c.tp);
  trainer.mutable_parallel()->set_sequence_parallel(c.sequence_parallel);
  trainer.mutable_parallel()->set_dp_bucket_mb(kBucketMb);
  trainer.mutable_optimizer()->set_zero_stage(c.zero1 ? 1 : 0);
  trainer.mutable_train()->set_global_batch_size(kGlobalBatch);
  LanguageModel model(config, kSeed,
                      {&job.tensor(), c.sequence_parallel,
                       /*flat_multiple=*/GradientReducer::PaddedSize(1, c.dp)});
  ParameterStore& store = model.parameters();
  ModelOptimizer optimizer(model, trainer, job);
  const GradientReducer& reducer = optimizer.reducer();
  ASSERT_GT(reducer.buckets().size(), 2u) << "too few buckets to cut parameters";
  optimizer.StartStep();
  const int64_t rank_batch = kGlobalBatch / c.dp;
  double loss_sum = 0;
  for (int64_t first = 0; first < rank_batch; first += kMicroBatch) {
    LoadSamples(dp.rank() * rank_batch + first, kMicroBatch, config.vocab_size(), inputs, targets);
    const bool last = first + kMicroBatch == rank_batch;
    loss_sum += testing::ForwardBackward(
        model, inputs.data(), targets.data(), kMicroBatch, kSeq, grad_scale,
        last ? LanguageModel::GradientReadyCallback(
                   [&](int64_t ready) { optimizer.GradientsReadyFrom(ready); })
             : nullptr);
  }
  const FinalizedGradients finalized = optimizer.FinalizeGradients();

  // The global norm counts every parameter once, whatever holds it.
  double want_squares = 0;
  for (const Parameter& p : reference.parameters().all()) {
    for (int64_t g = 0; g < p.grad.numel(); ++g)
      want_squares += double{p.grad.f32()[g]} * p.grad.f32()[g];
  }
  EXPECT_NEAR(finalized.grad_norm, std::sqrt(want_squares),
              kTol.grad_rel_to_max * std::sqrt(want_squares));
  EXPECT_NEAR(SumOverRanks(dp, loss_sum), want_loss, kTol.loss_rel * std::fabs(want_loss));

  ASSERT_EQ(store.all().size(), reference.parameters().all().size());
  const float* flat_grads = store.flat_grads().f32();
  for (const Parameter& p : store.all()) {
    const Parameter* want = reference.parameters().Find(p.name);
    ASSERT_NE(want, nullptr) << p.name;
    // The single-rank model's real rows (a padded vocabulary's padding follows them).
    ASSERT_EQ(NumElements(p.global_shape), want->RealElements()) << p.name;
    const float* want_grad = want->grad.f32();
    float max_abs = 0;
    for (int64_t g = 0; g < want->RealElements(); ++g) {
      max_abs = std::max(max_abs, std::fabs(want_grad[g]));
    }
    ASSERT_GT(max_abs, 0.0f) << p.name << " has no gradient in the single-rank model";

    // The elements of p this rank holds reduced, against the global gradient.
    std::vector<int32_t> checks(want->RealElements(), 0);
    float max_error = 0;
    int64_t worst = 0;
    const int64_t end = p.flat_offset + p.value.numel();
    for (const FlatRange& owned : reducer.owned_ranges()) {
      for (int64_t f = std::max(owned.begin, p.flat_offset); f < std::min(owned.end, end); ++f) {
        const int64_t g = p.GlobalIndex(f - p.flat_offset);
        if (g < 0) {  // padding: no gradient
          EXPECT_EQ(flat_grads[f], 0.0f) << p.name;
          continue;
        }
        ++checks[g];
        const float error = std::fabs(flat_grads[f] - want_grad[g]);
        if (error > max_error) {
          max_error = error;
          worst = g;
        }
      }
    }
    EXPECT_LE(max_error, kTol.grad_rel_to_max * max_abs)
        << p.name << " (" << ShapeString(p.value.shape()) << " of " << ShapeString(p.global_shape)
        << "): largest error " << max_error << " at global element " << worst << " (want "
        << want_grad[worst] << "), largest gradient " << max_abs;

    const Tensor checks_view =
        Tensor::View(checks.data(), {static_cast<int64_t>(checks.size())}, DType::kI32);
    job.world().AllReduce(checks_view, checks_view, ReduceOp::kSum);
    const int holders = p.shard.replicas * (c.zero1 ? 1 : c.dp);
    const int64_t wrong =
        std::count_if(checks.begin(), checks.end(), [&](int32_t n) { return n != holders; });
    EXPECT_EQ(wrong, 0) << p.name << ": global elements not checked exactly " << holders
                        << " times over the job";
  }

  // The vocabulary of 64 is padded to 128 x tp rows: AdamW, weight decay
  // included, keeps the padding rows' zero weights at exactly 0.
  optimizer.Step(finalized, 1e-2, 1);
  int64_t padding = 0;
  for (const Parameter& p : store.all()) {
    for (int64_t i = p.RealElements(); i < p.value.numel(); ++i, ++padding) {
      ASSERT_EQ(p.value.f32()[i], 0.0f) << p.name << " padding element " << i << " after a step";
    }
  }
  EXPECT_GT(padding, 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataParallelGradientsTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return Name(info.param); });

}  // namespace
}  // namespace tetra
