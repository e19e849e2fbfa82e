// Tensor parallelism against the single-rank run, under mpirun: the world is
// split into groups of tp = 2 or 4 consecutive ranks (tests for a tp that
// does not divide the world size skip), and on every group:
//   - the conjugate comm pairs (parallel/tensor_parallel.h), forward and
//     backward, on small-integer data, compared exactly with sums computed
//     here, and with a group of one rank returning their input untouched;
//   - the vocabulary-parallel embedding pieces and cross-entropy against the
//     single-rank kernels on the whole vocabulary;
//   - the whole Llama model, with grouped-query attention (4 query heads, 2
//     key-value heads: split at tp 2, one head shared by 2 ranks at tp 4),
//     untied and tied head, sequence parallelism off and on: loss and every
//     parameter's value and gradient, gathered from the shards into the
//     global shape, against the model built in this process on one rank
//     (a SelfCommunicator) with the same seed and data, over two
//     micro-batches (so gradients accumulate); and the gradient-ready
//     callback's promise that a reported suffix of the flat buffer is final.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "model/language_model.h"
#include "model/model_dims.h"
#include "parallel/tensor_parallel.h"
#include "parallel/vocab_parallel_cross_entropy.h"
#include "tests/testing/gradient_check.h"
#include "tests/testing/tiny_models.h"
#include "tests/testing/whole_model.h"

namespace tetra {
namespace {

using testing::RandomVector;

// Deadline of every collective: far above their run time with 8 ranks on 2
// cores, far below ctest's TIMEOUT, so a hang fails with the watchdog's message.
constexpr double kTimeoutS = 60;

struct Tolerances {
  // The TP model adds the same fp32 terms in other groupings (partial GEMM
  // sums over heads or features, then a sum over ranks): round-off of ~1e-7
  // per operation through two layers stays near 1e-6.
  double loss_rel = 1e-5;
  // Gradients pass through more such sums (and the vocab-parallel softmax);
  // measured against the gradient's largest element, so tiny entries do not
  // demand relative accuracy they cannot have. A wrong term is off by O(1).
  double grad_rel_to_max = 1e-4;
  // Vocab-parallel cross-entropy: same fp32 exps as the kernel, partial sums
  // in double, so it differs from the kernel only by the double sum's order.
  double cross_entropy_rel = 1e-6;
};
constexpr Tolerances kTol;

Communicator& World() {
  static std::unique_ptr<Communicator> world = MpiWorld(kTimeoutS);
  return *world;
}

// Groups of `tp` consecutive world ranks, split once on first use; every rank
// runs the tests in the same order and skips the same ones, so the collective
// Split calls line up.
Communicator& TensorGroup(int tp) {
  static std::map<int, std::unique_ptr<Communicator>> groups;
  std::unique_ptr<Communicator>& group = groups[tp];
  if (!group) {
    const int first = World().rank() / tp * tp;
    std::vector<int> ranks(tp);
    for (int k = 0; k < tp; ++k) ranks[k] = first + k;
    group = World().Split(ranks, "tp");
  }
  return *group;
}

#define SKIP_UNLESS_WORLD_DIVIDES(tp)                                                      \
  if (World().size() % (tp) != 0) {                                                        \
    GTEST_SKIP() << "tp " << (tp) << " does not divide the world size " << World().size(); \
  }

// Small integers, a closed-form function of (world rank, index): every sum
// over 8 ranks is exact in fp32.
float Value(int world_rank, int64_t i) {
  return static_cast<float>((i * 7 + world_rank * 13) % 31 - 15);
}

Tensor IntegerTensor(const Shape& shape, int world_rank) {
  Tensor t = Tensor::Empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = Value(world_rank, i);
  return t;
}

std::vector<float> Values(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }
// The real elements (no padding rows) of `t`, p's value or gradient.
std::vector<float> RealValues(const Parameter& p, const Tensor& t) {
  return {t.f32(), t.f32() + p.RealElements()};
}

// Element `offset + i` summed over the group's world ranks, for i < count.
std::vector<float> GroupSum(const Communicator& tp, int64_t offset, int64_t count) {
  std::vector<float> sum(count, 0.0f);
  for (int r : tp.ranks()) {
    for (int64_t i = 0; i < count; ++i) sum[i] += Value(r, offset + i);
  }
  return sum;
}

// The group's blocks of `count` elements, block k from group rank k, in order.
std::vector<float> GroupBlocks(const Communicator& tp, int64_t count) {
  std::vector<float> all;
  for (int r : tp.ranks()) {
    for (int64_t i = 0; i < count; ++i) all.push_back(Value(r, i));
  }
  return all;
}

int MyWorldRank(const Communicator& comm) { return comm.ranks()[comm.rank()]; }

constexpr int64_t kBlockRows = 3;
constexpr int64_t kCols = 4;

class PairsTest : public ::testing::TestWithParam<int> {};

TEST_P(PairsTest, CopyToAndReduceFromTensorParallelRegion) {
  SKIP_UNLESS_WORLD_DIVIDES(GetParam());
  Communicator& tp = TensorGroup(GetParam());
  const int me = MyWorldRank(tp);
  const Shape shape = {kBlockRows, kCols};
  const int64_t count = kBlockRows * kCols;

  const Tensor x = IntegerTensor(shape, me);
  EXPECT_EQ(CopyToTensorParallelRegion(x, tp).raw(), x.raw());
  const Tensor dx = IntegerTensor(shape, me);
  CopyToTensorParallelRegionBackward(dx, tp);
  EXPECT_EQ(Values(dx), GroupSum(tp, 0, count));

  const Tensor y = IntegerTensor(shape, me);
  ReduceFromTensorParallelRegion(y, tp);
  EXPECT_EQ(Values(y), GroupSum(tp, 0, count));
  const Tensor dy = IntegerTensor(shape, me);
  EXPECT_EQ(ReduceFromTensorParallelRegionBackward(dy, tp).raw(), dy.raw());
}

TEST_P(PairsTest, SequenceParallelPairs) {
  SKIP_UNLESS_WORLD_DIVIDES(GetParam());
  Communicator& tp = TensorGroup(GetParam());
  const int me = MyWorldRank(tp);
  const int64_t block = kBlockRows * kCols, rows = kBlockRows * tp.size();
  const Shape block_shape = {kBlockRows, kCols}, full_shape = {rows, kCols};
  Tensor buffer;

  // Gather: all-gather forward, reduce-scatter backward.
  Tensor out = GatherFromSequenceParallelRegion(IntegerTensor(block_shape, me), tp, &buffer);
  EXPECT_EQ(out.shape(), full_shape);
  EXPECT_EQ(Values(out), GroupBlocks(tp, block));
  out = GatherFromSequenceParallelRegionBackward(IntegerTensor(full_shape, me), tp, &buffer);
  EXPECT_EQ(out.shape(), block_shape);
  EXPECT_EQ(Values(out), GroupSum(tp, tp.rank() * block, block));

  // Reduce-scatter: the same two collectives the other way round.
  out = ReduceScatterToSequenceParallelRegion(IntegerTensor(full_shape, me), tp, &buffer);
  EXPECT_EQ(out.shape(), block_shape);
  EXPECT_EQ(Values(out), GroupSum(tp, tp.rank() * block, block));
  out = ReduceScatterToSequenceParallelRegionBackward(IntegerTensor(block_shape, me), tp, &buffer);
  EXPECT_EQ(out.shape(), full_shape);
  EXPECT_EQ(Values(out), GroupBlocks(tp, block));

  // Scatter: a view of this rank's rows of a replicated tensor, no copy.
  const Tensor replicated = IntegerTensor(full_shape, /*world_rank=*/0);
  out = ScatterToSequenceParallelRegion(replicated, tp);
  EXPECT_EQ(out.shape(), block_shape);
  EXPECT_EQ(out.raw(), static_cast<void*>(replicated.f32() + tp.rank() * block));
  out = ScatterToSequenceParallelRegionBackward(IntegerTensor(block_shape, me), tp, &buffer);
  EXPECT_EQ(Values(out), GroupBlocks(tp, block));
}

// The vocabulary-parallel embedding: each rank's lookup of its rows, summed
// over the group, is the whole-table lookup, and each rank's table gradient
// is its rows of the whole-table gradient, bit for bit (same adds, same order).
TEST_P(PairsTest, VocabParallelEmbeddingPiecesMakeTheWholeLookup) {
  SKIP_UNLESS_WORLD_DIVIDES(GetParam());
  Communicator& tp = TensorGroup(GetParam());
  const int64_t rows_per_rank = 3, vocab = rows_per_rank * tp.size(), dim = 5, tokens = 11;
  const std::vector<float> table_values = RandomVector(vocab * dim, 1);
  Tensor table = Tensor::Empty({vocab, dim});
  std::memcpy(table.raw(), table_values.data(), table.nbytes());
  Tensor ids = Tensor::Empty({tokens}, DType::kI32);
  for (int64_t i = 0; i < tokens; ++i) {
    ids.data<int32_t>()[i] = static_cast<int32_t>((i * 5 + 2) % vocab);
  }
  const int64_t begin = tp.rank() * rows_per_rank;
  Tensor shard = table.Slice(begin, begin + rows_per_rank);

  Tensor want = Tensor::Empty({tokens, dim}), got = Tensor::Empty({tokens, dim});
  ops::Embedding(ids, table, want);
  ops::EmbeddingShard(ids, shard, begin, got);
  ReduceFromTensorParallelRegion(got, tp);
  EXPECT_EQ(Values(got), Values(want));

  const Tensor dout = IntegerTensor({tokens, dim}, /*world_rank=*/1);
  Tensor dtable = Tensor::Zeros({vocab, dim}), dshard = Tensor::Zeros({rows_per_rank, dim});
  ops::EmbeddingBackward(ids, dout, dtable);
  ops::EmbeddingShardBackward(ids, dout, begin, dshard);
  EXPECT_EQ(Values(dshard), Values(dtable.Slice(begin, begin + rows_per_rank)));
}

TEST_P(PairsTest, VocabParallelCrossEntropyMatchesTheKernel) {
  SKIP_UNLESS_WORLD_DIVIDES(GetParam());
  Communicator& tp = TensorGroup(GetParam());
  // The last slice ends in 3 columns of padding (a padded vocabulary).
  const int64_t rows = 9, local_vocab = 5, vocab = local_vocab * tp.size(), real_vocab = vocab - 3;
  const float grad_scale = 0.25f;
  const std::vector<float> all = RandomVector(rows * vocab, 2, /*scale=*/3.0f);
  Tensor logits = Tensor::Empty({rows, vocab}), targets = Tensor::Empty({rows}, DType::kI32);
  std::memcpy(logits.raw(), all.data(), logits.nbytes());
  for (int64_t r = 0; r < rows; ++r) {
    targets.data<int32_t>()[r] = static_cast<int32_t>((r * 7 + 3) % real_vocab);
  }
  // This rank's columns of the logits.
  Tensor local = Tensor::Empty({rows, local_vocab});
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(local.f32() + r * local_vocab, all.data() + r * vocab + tp.rank() * local_vocab,
                local_vocab * sizeof(float));
  }
  Tensor want_d = Tensor::Empty({rows, vocab});
  const double want = ops::CrossEntropy(logits, targets, grad_scale, want_d, real_vocab);

  Tensor got_d = Tensor::Empty({rows, local_vocab});
  double got = VocabParallelCrossEntropy(local, targets, grad_scale, got_d, tp, real_vocab);
  EXPECT_NEAR(got, want, kTol.cross_entropy_rel * std::fabs(want));
  float max_grad = 0;
  for (int64_t i = 0; i < want_d.numel(); ++i) {
    max_grad = std::max(max_grad, std::fabs(want_d.f32()[i]));
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < local_vocab; ++j) {
      EXPECT_NEAR(got_d.f32()[r * local_vocab + j],
                  want_d.f32()[r * vocab + tp.rank() * local_vocab + j],
                  kTol.cross_entropy_rel * max_grad)
          << "row " << r << " column " << j;
    }
  }
  // Every rank returns the same bits.
  std::vector<double> losses(tp.size());
  tp.AllGather(Tensor::View(&got, {1}, DType::kF64),
               Tensor::View(losses.data(), {tp.size()}, DType::kF64));
  for (double loss : losses) EXPECT_EQ(loss, got);
  // Loss only, and the gradient written over the logits: the same results.
  EXPECT_EQ(VocabParallelCrossEntropy(local, targets, grad_scale, Tensor(), tp, real_vocab), got);
  EXPECT_EQ(VocabParallelCrossEntropy(local, targets, grad_scale, local, tp, real_vocab), got);
  EXPECT_EQ(Values(local), Values(got_d));
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, PairsTest, ::testing::Values(2, 4),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

// With a group of one rank, every pair hands back its input: no copy, no transfer.
TEST(SingleRankPairsTest, ReturnTheirInput) {
  SelfCommunicator self(World().rank());
  const Tensor x = IntegerTensor({kBlockRows, kCols}, 0);
  const std::vector<float> before = Values(x);
  Tensor unused;
  EXPECT_EQ(CopyToTensorParallelRegion(x, self).raw(), x.raw());
  CopyToTensorParallelRegionBackward(x, self);
  ReduceFromTensorParallelRegion(x, self);
  EXPECT_EQ(ReduceFromTensorParallelRegionBackward(x, self).raw(), x.raw());
  EXPECT_EQ(GatherFromSequenceParallelRegion(x, self, &unused).raw(), x.raw());
  EXPECT_EQ(GatherFromSequenceParallelRegionBackward(x, self, &unused).raw(), x.raw());
  EXPECT_EQ(ReduceScatterToSequenceParallelRegion(x, self, &unused).raw(), x.raw());
  EXPECT_EQ(ReduceScatterToSequenceParallelRegionBackward(x, self, &unused).raw(), x.raw());
  EXPECT_EQ(ScatterToSequenceParallelRegion(x, self).raw(), x.raw());
  EXPECT_EQ(ScatterToSequenceParallelRegionBackward(x, self, &unused).raw(), x.raw());
  EXPECT_FALSE(unused.defined());
  EXPECT_EQ(Values(x), before);
}

// ---- the whole model ----

constexpr uint64_t kSeed = 17;
constexpr int64_t kBatch = 2, kSeq = 8;  // 16 token rows: split by 2 and 4
constexpr int kMicroBatches = 2;

// A parameter's tensor (`local`: its value or grad) assembled from the group's
// shards into the global shape. Checks that every global element is held by
// exactly shard.replicas ranks and that padding rows (a padded vocabulary)
// hold 0, and returns in *replica_spread the largest difference between two
// replicas of one element.
std::vector<float> GatherGlobal(const Tensor& local, const Parameter& p, Communicator& tp,
                                float* replica_spread) {
  const int n = tp.size();
  const int64_t count = local.numel();
  std::vector<float> shards(n * count);
  tp.AllGather(local, Tensor::View(shards.data(), {n * count}, DType::kF32));
  std::vector<int32_t> indices(n), dims(n);
  int32_t my_index = p.shard.index, my_dim = p.shard.dim;
  tp.AllGather(Tensor::View(&my_index, {1}, DType::kI32),
               Tensor::View(indices.data(), {n}, DType::kI32));
  tp.AllGather(Tensor::View(&my_dim, {1}, DType::kI32),
               Tensor::View(dims.data(), {n}, DType::kI32));
  for (int k = 0; k < n; ++k) EXPECT_EQ(dims[k], p.shard.dim) << p.name;

  std::vector<float> global(NumElements(p.global_shape), 0.0f);
  std::vector<int> holders(global.size(), 0);
  *replica_spread = 0;
  for (int k = 0; k < n; ++k) {
    for (int64_t i = 0; i < count; ++i) {
      // ShardGlobalIndex is checked against hand-written indices in parameters_test.
      TensorShard shard = p.shard;
      shard.index = indices[k];
      const int64_t g = ShardGlobalIndex(p.global_shape, shard, i);
      const float v = shards[k * count + i];
      if (g < 0) {
        EXPECT_EQ(v, 0.0f) << p.name << ": padding of rank " << k << " at " << i;
        continue;
      }
      if (holders[g]++ > 0) *replica_spread = std::max(*replica_spread, std::fabs(global[g] - v));
      global[g] = v;
    }
  }
  const int64_t wrong =
      std::count_if(holders.begin(), holders.end(), [&](int h) { return h != p.shard.replicas; });
  EXPECT_EQ(wrong, 0) << p.name << ": elements not held by exactly " << p.shard.replicas
                      << " ranks";
  return global;
}

// Micro-batch m's tokens: ids spread over the whole vocabulary, so every
// rank's vocabulary slice sees inputs and targets.
std::vector<int32_t> Tokens(int m, int salt, int vocab) {
  std::vector<int32_t> t(kBatch * kSeq);
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = static_cast<int32_t>((i * 11 + m * 29 + salt) % vocab);
  }
  return t;
}

// Records, at each gradient-ready call, the suffix of the flat gradients it
// declares final, to compare with the gradients once backward has returned.
struct ReadyRecorder {
  explicit ReadyRecorder(const Tensor& grads) : flat_grads(&grads) {}

  const Tensor* flat_grads;
  std::vector<int64_t> offsets;
  std::vector<std::vector<float>> suffixes;

  void operator()(int64_t offset) {
    offsets.push_back(offset);
    const float* g = flat_grads->f32();
    suffixes.emplace_back(g + offset, g + flat_grads->numel());
  }
};

// (tp, tie, sequence parallel, vocabulary): 64 (padded to 128 x tp rows, so
// ranks past the first hold only padding) or 1001, which no tp divides.
class ModelTest : public ::testing::TestWithParam<std::tuple<int, bool, bool, int>> {};

// The model of `config` under tensor parallelism of tp_size (a divisor of the
// world size) against the single-rank model: loss, gradient-ready offsets,
// values and gradients.
void ExpectModelMatchesTheSingleRankModel(const ModelConfig& config, int tp_size,
                                          bool sequence_parallel) {
  Communicator& tp = TensorGroup(tp_size);
  ASSERT_TRUE(ValidateTensorParallel(config, tp_size, sequence_parallel, kBatch * kSeq).ok());
  LanguageModel reference(config, kSeed);
  LanguageModel model(config, kSeed, {.tp = &tp, .sequence_parallel = sequence_parallel});
  const float grad_scale = 1.0f / (kMicroBatches * kBatch * kSeq);

  for (int m = 0; m < kMicroBatches; ++m) {
    const std::vector<int32_t> inputs = Tokens(m, 3, config.vocab_size());
    const std::vector<int32_t> targets = Tokens(m, 40, config.vocab_size());
    const double want = testing::ForwardBackward(reference, inputs.data(), targets.data(), kBatch,
                                                 kSeq, grad_scale);
    ReadyRecorder recorder(model.parameters().flat_grads());
    const double got = testing::ForwardBackward(model, inputs.data(), targets.data(), kBatch, kSeq,
                                                grad_scale, std::ref(recorder));
    EXPECT_NEAR(got, want, kTol.loss_rel * std::fabs(want)) << "micro-batch " << m;
    EXPECT_NEAR(testing::ForwardLoss(model, inputs.data(), targets.data(), kBatch, kSeq), want,
                kTol.loss_rel * std::fabs(want));

    // Ready offsets: the final norm, then each block's first parameter from
    // the last block down, then 0; each reported suffix was already final.
    std::vector<int64_t> want_offsets = {model.parameters().Find("model.norm.weight")->flat_offset};
    for (int layer = config.num_hidden_layers() - 1; layer >= 0; --layer) {
      const std::string name = "model.layers." + std::to_string(layer) + ".input_layernorm.weight";
      want_offsets.push_back(model.parameters().Find(name)->flat_offset);
    }
    want_offsets.push_back(0);
    EXPECT_EQ(recorder.offsets, want_offsets);
    const Tensor& flat = model.parameters().flat_grads();
    for (size_t k = 0; k < recorder.offsets.size(); ++k) {
      const std::vector<float> now(flat.f32() + recorder.offsets[k], flat.f32() + flat.numel());
      EXPECT_TRUE(now == recorder.suffixes[k])
          << "gradients at flat offset >= " << recorder.offsets[k]
          << " changed after being reported final";
    }
  }
  // The step's partial gradients (SP norm weights, shared key-value heads)
  // summed over their groups, as the optimizer's finalisation does.
  testing::SumPartialGradients(model);

  ASSERT_EQ(model.parameters().all().size(), reference.parameters().all().size());
  for (const Parameter& p : model.parameters().all()) {
    const Parameter* want = reference.parameters().Find(p.name);
    ASSERT_NE(want, nullptr) << p.name;
    ASSERT_EQ(p.global_shape, want->global_shape) << p.name;
    ASSERT_EQ(want->RealElements(), NumElements(p.global_shape)) << p.name;
    float spread = 0;
    // Values: each shard drew exactly its slice of the global tensor (the
    // single-rank model's real rows, its padding past them).
    EXPECT_TRUE(GatherGlobal(p.value, p, tp, &spread) == RealValues(*want, want->value)) << p.name;
    EXPECT_EQ(spread, 0.0f) << p.name;

    const std::vector<float> grad = GatherGlobal(p.grad, p, tp, &spread);
    const std::vector<float> want_grad = RealValues(*want, want->grad);
    float max_abs = 0, max_error = 0;
    for (size_t i = 0; i < grad.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(want_grad[i]));
      max_error = std::max(max_error, std::fabs(grad[i] - want_grad[i]));
    }
    ASSERT_GT(max_abs, 0.0f) << p.name << " has no gradient in the single-rank model";
    EXPECT_LE(max_error, kTol.grad_rel_to_max * max_abs)
        << p.name << " (" << ShapeString(p.value.shape()) << " of " << ShapeString(p.global_shape)
        << "): largest error " << max_error << ", largest gradient " << max_abs;
    EXPECT_LE(spread, kTol.grad_rel_to_max * max_abs) << p.name << ": replicas disagree";
  }
}

TEST_P(ModelTest, LossAndGradientsMatchTheSingleRankModel) {
  const auto [tp_size, tie, sequence_parallel, vocab] = GetParam();
  SKIP_UNLESS_WORLD_DIVIDES(tp_size);
  ModelConfig config = testing::TinyGqaConfig(tie);
  config.set_vocab_size(vocab);
  ExpectModelMatchesTheSingleRankModel(config, tp_size, sequence_parallel);
}

// Multi-head latent attention (tp, sequence parallel, q_lora_rank): heads
// split, the down projections and latent norms whole on every rank with
// their gradients summed over the group.
class MlaModelTest : public ::testing::TestWithParam<std::tuple<int, bool, int>> {};

TEST_P(MlaModelTest, LossAndGradientsMatchTheSingleRankModel) {
  const auto [tp_size, sequence_parallel, q_lora_rank] = GetParam();
  SKIP_UNLESS_WORLD_DIVIDES(tp_size);
  ExpectModelMatchesTheSingleRankModel(testing::TinyMlaConfig(/*tie=*/false, q_lora_rank), tp_size,
                                       sequence_parallel);
}

INSTANTIATE_TEST_SUITE_P(Layouts, MlaModelTest,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Bool(),
                                            ::testing::Values(0, 5)),
                         [](const auto& info) {
                           return "tp" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_sp" : "") + "_q_lora" +
                                  std::to_string(std::get<2>(info.param));
                         });

// Padding changes no number: a model whose vocabulary is padded to 128 rows
// (make_vocab_size_divisible_by 128) gives the unpadded model's
// (make_vocab_size_divisible_by 1) loss and every gradient bit for bit, in
// fp32 on the CPU: V 1000 and 1001 (1024 rows against 1000 and 1001),
// untied and tied. Padding rows hold 0 (GatherGlobal checks). Under tp > 1
// the padding moves the vocabulary's split between the ranks, which
// regroups the head's partial sums: ModelTest checks those layouts against
// the single rank within its tolerances, V 1001 included.
class PaddedVocabularyTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(PaddedVocabularyTest, LossAndGradientsAreTheUnpaddedModelsBitForBit) {
  const auto [vocab, tie] = GetParam();
  Communicator& tp = TensorGroup(1);
  ModelConfig config = testing::TinyGqaConfig(tie);
  config.set_vocab_size(vocab);
  ModelConfig unpadded = config;
  unpadded.set_make_vocab_size_divisible_by(1);
  LanguageModel model(config, kSeed, {.tp = &tp});
  LanguageModel reference(unpadded, kSeed, {.tp = &tp});
  ASSERT_EQ(model.parameters().Find("model.embed_tokens.weight")->value.dim(0), 1024);
  ASSERT_EQ(reference.parameters().Find("model.embed_tokens.weight")->value.dim(0), vocab);
  const float grad_scale = 1.0f / (kBatch * kSeq);
  const std::vector<int32_t> inputs = Tokens(0, 3, vocab), targets = Tokens(0, 40, vocab);
  EXPECT_EQ(
      testing::ForwardBackward(model, inputs.data(), targets.data(), kBatch, kSeq, grad_scale),
      testing::ForwardBackward(reference, inputs.data(), targets.data(), kBatch, kSeq, grad_scale));
  testing::SumPartialGradients(model);
  testing::SumPartialGradients(reference);
  for (const Parameter& p : model.parameters().all()) {
    const Parameter* want = reference.parameters().Find(p.name);
    ASSERT_NE(want, nullptr) << p.name;
    float spread = 0;
    EXPECT_TRUE(GatherGlobal(p.value, p, tp, &spread) ==
                GatherGlobal(want->value, *want, tp, &spread))
        << p.name;
    EXPECT_TRUE(GatherGlobal(p.grad, p, tp, &spread) ==
                GatherGlobal(want->grad, *want, tp, &spread))
        << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, PaddedVocabularyTest,
                         ::testing::Combine(::testing::Values(1000, 1001), ::testing::Bool()),
                         [](const auto& info) {
                           return "vocab" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_tied" : "_untied");
                         });

INSTANTIATE_TEST_SUITE_P(Layouts, ModelTest,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Bool(),
                                            ::testing::Bool(), ::testing::Values(64, 1001)),
                         [](const auto& info) {
                           return "tp" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_tied" : "_untied") +
                                  (std::get<2>(info.param) ? "_sp" : "") + "_vocab" +
                                  std::to_string(std::get<3>(info.param));
                         });

}  // namespace
}  // namespace tetra
