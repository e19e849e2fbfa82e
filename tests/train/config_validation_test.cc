// ValidateConfig: broken constraints name the numbers, and a table of absurd
// and hostile values (the kind a sanitizer build fed in: overflowing sizes and
// products, negative counts, nan and inf) each ends in one user error naming
// the field, never a crash, an overflow or a silent acceptance.
#include "train/config_validation.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/threads.h"
#include "tests/testing/user_errors.h"
#include "train/config_loader.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;

using testing::Message;
using testing::UserErrorShape;

TEST(ConfigValidationTest, ReportsBrokenConstraintsWithNumbers) {
  TrainerConfig config;
  config.mutable_model()->set_hidden_size(100);
  config.mutable_model()->set_num_attention_heads(3);
  auto status = ValidateConfig(config);
  EXPECT_THAT(status.message(),
              HasSubstr("model.hidden_size 100 is not divisible by model.num_attention_heads 3"));
  EXPECT_THAT(status.message(), HasSubstr("hint:"));

  config = TrainerConfig();
  config.mutable_model()->set_num_key_value_heads(3);  // 4 heads
  EXPECT_THAT(ValidateConfig(config).message(),
              HasSubstr("num_key_value_heads 3 must divide model.num_attention_heads 4"));

  config = TrainerConfig();
  config.mutable_train()->set_global_batch_size(10);
  config.mutable_train()->set_micro_batch_size(4);
  EXPECT_THAT(
      ValidateConfig(config).message(),
      HasSubstr(
          "global_batch_size 10 is not a multiple of train.micro_batch_size 4\nhint: set "
          "train.micro_batch_size to 2, or train.global_batch_size to a multiple of 4 (e.g. 12)"));
  // configs/tiny_moe.textproto on 4 data-parallel ranks: 16 samples cannot
  // make 16-sample micro-batches on each.
  config = TrainerConfig();
  config.mutable_train()->set_global_batch_size(16);
  config.mutable_train()->set_micro_batch_size(16);
  EXPECT_THAT(ValidateConfig(config, 4).message(),
              HasSubstr("train.global_batch_size 16 is not a multiple of train.micro_batch_size 16 "
                        "x data-parallel "
                        "size 4 = 64\nhint: each data-parallel rank takes whole micro-batches: set "
                        "train.micro_batch_size to 4, or train.global_batch_size to a multiple of "
                        "64 (e.g. 64), or "
                        "run 1 data-parallel rank instead of 4"));

  config = TrainerConfig();
  config.mutable_data()->set_format(DataConfig::LLMC);
  EXPECT_THAT(ValidateConfig(config).message(), HasSubstr("data.path is empty"));

  config = TrainerConfig();
  config.mutable_model()->set_make_vocab_size_divisible_by(0);
  EXPECT_THAT(ValidateConfig(config).message(),
              HasSubstr("model.make_vocab_size_divisible_by is 0 but must be a finite number > 0"));

  // A vocabulary no tensor size divides is padded (to a multiple of 128 x 4): accepted.
  config = TrainerConfig();
  config.mutable_model()->set_vocab_size(50257);
  config.mutable_parallel()->set_tensor(4);
  EXPECT_TRUE(ValidateConfig(config, 4).ok()) << ValidateConfig(config, 4);

  EXPECT_TRUE(ValidateConfig(TrainerConfig()).ok());
}

TEST(ConfigValidationTest, BadMixtureOfExpertsConfigsNameTheNumbers) {
  auto moe_config = [] {
    TrainerConfig config;
    MoeConfig* moe = config.mutable_model()->mutable_moe();
    moe->set_n_routed_experts(8);
    moe->set_num_experts_per_tok(2);
    moe->set_moe_intermediate_size(16);
    return config;
  };
  EXPECT_TRUE(ValidateConfig(moe_config()).ok());
  TrainerConfig config = moe_config();
  config.mutable_model()->mutable_moe()->set_num_experts_per_tok(9);
  EXPECT_THAT(ValidateConfig(config).message(),
              HasSubstr("model.moe.num_experts_per_tok 9 exceeds model.moe.n_routed_experts 8"));
  config = moe_config();
  config.mutable_model()->mutable_moe()->set_n_group(3);
  EXPECT_THAT(ValidateConfig(config).message(),
              HasSubstr("model.moe.n_group 3 does not divide model.moe.n_routed_experts 8"));
  config = moe_config();
  config.mutable_model()->mutable_moe()->set_n_group(4);
  config.mutable_model()->mutable_moe()->set_topk_group(5);
  EXPECT_THAT(ValidateConfig(config).message(),
              HasSubstr("model.moe.topk_group 5 exceeds model.moe.n_group 4"));
  config = moe_config();
  config.mutable_model()->mutable_moe()->set_n_group(4);
  config.mutable_model()->mutable_moe()->set_num_experts_per_tok(3);  // 1 group of 2 experts
  EXPECT_THAT(ValidateConfig(config).message(),
              HasSubstr("num_experts_per_tok 3 exceeds the 2 candidate experts"));
  config = moe_config();
  config.mutable_model()->mutable_moe()->set_scoring_func("relu");
  EXPECT_THAT(ValidateConfig(config).message(), HasSubstr("scoring_func is \"relu\""));
  config = moe_config();
  config.mutable_parallel()->set_expert(3);
  EXPECT_THAT(ValidateConfig(config, /*world_size=*/3).message(),
              HasSubstr("model.moe.n_routed_experts 8 is not divisible by parallel.expert 3"));
  // transformers' balance loss: softmax routers, every layer and whole
  // sequences on each rank.
  config = moe_config();
  config.mutable_model()->mutable_moe()->set_router_aux_loss_coef(0.01);
  EXPECT_THAT(ValidateConfig(config).message(),
              HasSubstr("but model.moe.scoring_func is \"sigmoid\""));
  config.mutable_model()->mutable_moe()->set_scoring_func("softmax");
  EXPECT_TRUE(ValidateConfig(config).ok());
  config.mutable_model()->set_num_hidden_layers(4);
  config.mutable_parallel()->set_pipeline(2);
  EXPECT_THAT(
      ValidateConfig(config, /*world_size=*/2).message(),
      HasSubstr("needs all layers and whole sequences on each rank, but parallel.pipeline is 2"));
}

// Multi-head latent attention: DeepSeek-V3's head dims over a hidden size
// that 4 heads do not divide (MLA's heads need not), each bad value named.
TEST(ConfigValidationTest, ContextParallelismNeedsEqualChunksAndNoMultiTokenPrediction) {
  TrainerConfig config;
  config.mutable_parallel()->set_context(2);
  config.mutable_train()->set_seq_length(64);
  EXPECT_TRUE(ValidateConfig(config, 2).ok()) << ValidateConfig(config, 2);
  config.mutable_train()->set_seq_length(66);  // 2 x 2 chunks of 16.5 tokens
  EXPECT_THAT(ValidateConfig(config, 2).message(),
              HasSubstr("train.seq_length 66 is not a multiple of 2 x parallel.context 2 = 4"));
  config.mutable_train()->set_seq_length(64);
  config.mutable_model()->set_num_nextn_predict_layers(1);
  EXPECT_THAT(ValidateConfig(config, 2).message(),
              HasSubstr("model.num_nextn_predict_layers 1 with parallel.context 2"));
  // Sequence parallelism splits this rank's 64 / 2 = 32 rows per sequence.
  config = TrainerConfig();
  config.mutable_parallel()->set_context(2);
  config.mutable_parallel()->set_tensor(2);
  config.mutable_parallel()->set_sequence_parallel(true);
  config.mutable_train()->set_micro_batch_size(1);
  config.mutable_train()->set_global_batch_size(1);
  config.mutable_train()->set_seq_length(12);  // 6 rows a rank: fine for tp 2
  EXPECT_TRUE(ValidateConfig(config, 4).ok()) << ValidateConfig(config, 4);
  config.mutable_parallel()->set_tensor(4);  // 6 rows over 4 ranks
  config.mutable_model()->set_num_key_value_heads(4);
  EXPECT_THAT(ValidateConfig(config, 8).message(),
              HasSubstr("splits the 6 token rows a rank holds"));
}

TEST(ConfigValidationTest, MlaSizesAreCheckedOneByOne) {
  TrainerConfig config;
  for (const char* set :
       {"model.hidden_size=70", "model.kv_lora_rank=32", "model.q_lora_rank=48",
        "model.qk_nope_head_dim=16", "model.qk_rope_head_dim=8", "model.v_head_dim=16"}) {
    ASSERT_TRUE(ApplyOverride(set, &config).ok()) << set;
  }
  ASSERT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model.kv_lora_rank=-1", "model.kv_lora_rank is -1 but cannot be negative"},
      {"model.q_lora_rank=-2", "model.q_lora_rank is -2 but must be a finite number >= 0"},
      {"model.qk_nope_head_dim=0", "model.qk_nope_head_dim is 0 but must be a finite number > 0"},
      {"model.qk_rope_head_dim=7", "model.qk_rope_head_dim 7 is odd"},
      {"model.v_head_dim=0", "model.v_head_dim is 0 but must be a finite number > 0"},
      {"model.kv_lora_rank=0",
       "model.kv_lora_rank is 0, which turns multi-head latent attention off"},
  };
  for (const auto& [set, message] : cases) {
    TrainerConfig bad = config;
    ASSERT_TRUE(ApplyOverride(set, &bad).ok()) << set;
    const absl::Status status = ValidateConfig(bad);
    EXPECT_THAT(Message(status), HasSubstr(message)) << set;
    EXPECT_THAT(Message(status), UserErrorShape()) << set;
  }
  // Exported as DeepseekV3ForCausalLM.
  ASSERT_TRUE(ApplyOverride("export_path=hf_out", &config).ok());
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
}

// A MoE block that routes: 8 experts, 2 per token.
const std::vector<std::string> kMoe = {"model.moe.n_routed_experts=8",
                                       "model.moe.num_experts_per_tok=2",
                                       "model.moe.moe_intermediate_size=16"};

struct HostileCase {
  std::vector<std::string> sets;  // --set overrides of the default (valid) config
  int world_size;
  std::string names;  // what the message must contain: the field (and its value)
};

std::vector<std::string> With(std::vector<std::string> sets, const std::vector<std::string>& more) {
  sets.insert(sets.end(), more.begin(), more.end());
  return sets;
}

// Every layout, MoE and checkpoint runs on GPUs (a CUDA build); NCCL moves
// only device tensors, so a CPU run naming it is told what to set.
TEST(ConfigValidationTest, DevicesTakeEveryLayoutAndNcclOnlyOnGpus) {
  TrainerConfig config =
      LoadConfig(TETRA_SOURCE_DIR "/configs/moe_small_tp2_pp2_ep2.textproto", {}, 8).value();
  config.mutable_checkpoint()->set_dir("/tmp/checkpoints");
  config.mutable_parallel()->set_comm_backend(CommBackend::NCCL);
  const absl::Status on_cpu = ValidateConfig(config, 8);
  EXPECT_THAT(Message(on_cpu),
              HasSubstr("parallel.comm_backend is NCCL, which moves GPU tensors, but "
                        "train.device is not CUDA"));
  EXPECT_THAT(Message(on_cpu), UserErrorShape());
  config.mutable_parallel()->set_comm_backend(CommBackend::MPI);
  EXPECT_TRUE(ValidateConfig(config, 8).ok());
  config.mutable_train()->set_device(Device::CUDA);
  for (const CommBackend::Value backend :
       {CommBackend::AUTO, CommBackend::NCCL, CommBackend::MPI}) {
    config.mutable_parallel()->set_comm_backend(backend);
#if TETRA_HAVE_CUDA
    EXPECT_TRUE(ValidateConfig(config, 8).ok()) << CommBackend::Value_Name(backend);
#else
    EXPECT_THAT(Message(ValidateConfig(config, 8)),
                HasSubstr("this build of tetra has no CUDA path"));
#endif
  }
}

#if TETRA_HAVE_CUDA
// DeepSeek-V3's query/key heads of 192 dims: cuDNN's fused attention takes
// them in bf16; tetra's own fp32 kernel stops at 128, said at launch.
TEST(ConfigValidationTest, Fp32AttentionOnCudaTakesHeadDimsUpTo128) {
  TrainerConfig config;
  for (const char* set :
       {"model.kv_lora_rank=32", "model.qk_nope_head_dim=128", "model.qk_rope_head_dim=64",
        "model.v_head_dim=128", "train.device=CUDA"}) {
    ASSERT_TRUE(ApplyOverride(set, &config).ok()) << set;
  }
  config.mutable_train()->set_precision(Precision::BF16);
  EXPECT_TRUE(ValidateConfig(config, 1).ok()) << ValidateConfig(config, 1);
  config.mutable_train()->set_precision(Precision::FP32);
  const absl::Status status = ValidateConfig(config, 1);
  EXPECT_THAT(Message(status), HasSubstr("query/key heads have 192 dims and its value heads 128"));
  EXPECT_THAT(Message(status), UserErrorShape());
}
#endif

TEST(ConfigValidationTest, HostileValuesAreUserErrorsNamingTheField) {
  const std::string too_many_threads = std::to_string(4 * cpu::AffinityCores() + 1);
  const std::vector<HostileCase> cases = {
      // Counts and products past int32 / int64.
      {{"train.steps=2147483647", "train.global_batch_size=2147483647", "train.micro_batch_size=1",
        "train.seq_length=2147483647"},
       1,
       "train.steps 2147483647 x global_batch_size 2147483647 x seq_length 2147483647 tokens "
       "overflow"},
      {{"train.steps=2147483647", "train.global_batch_size=2147483647", "train.micro_batch_size=1",
        "train.seq_length=3", "data.synthetic.num_tokens=9223372036854775807"},
       1,
       "train.steps 2147483647 x global_batch_size 2147483647 x seq_length 3 tokens overflow"},
      {{"model.hidden_size=33554432"}, 1, "model.hidden_size 33554432"},  // 9e15 parameters
      {{"model.vocab_size=2147483647", "model.hidden_size=1073741824"}, 1, "vocab_size 2147483647"},
      // micro_batch_size x data computed in int was 2^32 -> 0 in the message.
      {{"train.global_batch_size=1073741824", "train.micro_batch_size=1073741824",
        "data.synthetic.num_tokens=9223372036854775807"},
       4,
       "train.micro_batch_size 1073741824 x data-parallel size 4 = 4294967296"},
      // pipeline x virtual_stages = 2^31 overflowed int and allocated before checking.
      {{"parallel.pipeline=2", "parallel.virtual_stages=1073741824"},
       2,
       "virtual_stages 1073741824"},
      // 2^30 micro-batches would be a schedule table of 2^31 actions per rank.
      {{"parallel.pipeline=2", "train.global_batch_size=1073741824", "train.micro_batch_size=1",
        "data.synthetic.num_tokens=9223372036854775807"},
       2,
       "1073741824 micro-batches per step"},
      // Threads: bounded by the cores.
      {{"train.threads=2147483647"}, 1, "train.threads is 2147483647"},
      {{"train.threads=" + too_many_threads}, 1, "train.threads is " + too_many_threads},
      {{"train.threads=-1"}, 1, "train.threads is -1"},
      {{"train.recompute=FULL", "train.recompute_layers=-1"}, 1, "train.recompute_layers is -1"},
      // Gradient buckets and the watchdog: no fatal checks, no silent "never".
      {{"parallel.dp_bucket_mb=0"}, 1, "parallel.dp_bucket_mb is 0"},
      {{"parallel.dp_bucket_mb=-1"}, 1, "parallel.dp_bucket_mb is -1"},
      {{"parallel.dp_bucket_mb=nan"}, 1, "parallel.dp_bucket_mb is nan"},
      {{"parallel.dp_bucket_mb=1e300"}, 1, "parallel.dp_bucket_mb is 1e+300"},
      {{"parallel.comm_timeout_s=0"}, 1, "parallel.comm_timeout_s is 0"},
      {{"parallel.comm_timeout_s=-5"}, 1, "parallel.comm_timeout_s is -5"},
      {{"parallel.comm_timeout_s=nan"}, 1, "parallel.comm_timeout_s is nan"},
      {{"parallel.comm_timeout_s=inf"}, 1, "parallel.comm_timeout_s is inf"},
      {{"parallel.comm_timeout_s=1e9"}, 1, "parallel.comm_timeout_s is 1e+09"},
      // The straggler warning: a ratio at or below 1 names some rank every few steps.
      {{"log.straggler_threshold=1"}, 1, "log.straggler_threshold is 1"},
      {{"log.straggler_threshold=-1.5"}, 1, "log.straggler_threshold is -1.5"},
      {{"log.straggler_threshold=nan"}, 1, "log.straggler_threshold is nan"},
      {{"log.straggler_threshold=inf"}, 1, "log.straggler_threshold is inf"},
      {{"log.straggler_steps=0"}, 1, "log.straggler_steps is 0"},
      // Copies in memory come between saves to checkpoint.dir, at an interval.
      {{"checkpoint.local_dir=/dev/shm/t", "checkpoint.local_interval=5"},
       1,
       "checkpoint.local_dir is set but checkpoint.dir is not"},
      {{"checkpoint.dir=ckpt", "checkpoint.local_dir=/dev/shm/t"},
       1,
       "checkpoint.local_interval is 0 but must be >= 1"},
      {{"checkpoint.dir=ckpt", "checkpoint.local_interval=5"},
       1,
       "checkpoint.local_interval is 5 but checkpoint.local_dir is not set"},
      // Every moe field whenever model.moe is present, routed experts or not.
      {{"model.moe.n_routed_experts=-5"}, 1, "model.moe.n_routed_experts is -5"},
      {{"model.moe.num_experts_per_tok=-1"}, 1, "model.moe.num_experts_per_tok is -1"},
      {With(kMoe, {"model.moe.n_shared_experts=-1"}), 1, "model.moe.n_shared_experts is -1"},
      {With(kMoe, {"model.moe.moe_intermediate_size=-16"}), 1,
       "model.moe.moe_intermediate_size is -16"},
      {{"model.moe.routed_scaling_factor=nan"}, 1, "model.moe.routed_scaling_factor is nan"},
      {{"model.moe.aux_loss_alpha=-1"}, 1, "model.moe.aux_loss_alpha is -1"},
      {{"model.moe.bias_update_speed=inf"}, 1, "model.moe.bias_update_speed is inf"},
      {{"model.moe.capacity_factor=nan"}, 1, "model.moe.capacity_factor is nan"},
      {{"model.moe.n_group=0"}, 1, "model.moe.n_group is 0"},
      {{"model.moe.scoring_func=relu"}, 1, "model.moe.scoring_func is \"relu\""},
      {{"model.moe.first_k_dense_replace=-1"}, 1, "model.moe.first_k_dense_replace -1"},
      {With(kMoe, {"model.moe.capacity_factor=1e300"}), 1, "model.moe.capacity_factor 1e+300"},
  };
  for (const HostileCase& c : cases) {
    TrainerConfig config;
    for (const std::string& set : c.sets) ASSERT_TRUE(ApplyOverride(set, &config).ok()) << set;
    const absl::Status status = ValidateConfig(config, c.world_size);
    const std::string sets = ::testing::PrintToString(c.sets);
    ASSERT_FALSE(status.ok()) << sets;
    EXPECT_THAT(Message(status), HasSubstr(c.names)) << sets;
    EXPECT_THAT(Message(status), UserErrorShape()) << sets;
  }
}

TEST(ConfigValidationTest, BoundsLeaveRealSettingsAlone) {
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{
           {"train.threads=" + std::to_string(4 * cpu::AffinityCores())},
           {"parallel.comm_timeout_s=604800", "parallel.dp_bucket_mb=1048576"},
           {"log.straggler_threshold=0", "log.straggler_steps=1"},  // no warning
           {"log.straggler_threshold=1.05", "log.straggler_steps=2147483647"},
           {"checkpoint.dir=ckpt", "checkpoint.local_dir=/dev/shm/t",
            "checkpoint.local_interval=1"},
           {"model.moe.n_routed_experts=0", "model.moe.num_experts_per_tok=0"},  // a dense model
           With(kMoe, {"model.moe.capacity_factor=8"}),
       }) {
    TrainerConfig config;
    for (const std::string& set : sets) ASSERT_TRUE(ApplyOverride(set, &config).ok()) << set;
    EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
  }
}

// DeepSeek-V3's YaRN settings, and the context they stretch to.
const std::vector<std::string> kYarn = {"model.rope_scaling.rope_type=yarn",
                                        "model.rope_scaling.factor=40",
                                        "model.rope_scaling.original_max_position_embeddings=4096",
                                        "model.rope_scaling.mscale=1",
                                        "model.rope_scaling.mscale_all_dim=1",
                                        "model.max_position_embeddings=163840"};

TEST(ConfigValidationTest, YarnSettingsAreCheckedOneByOne) {
  TrainerConfig config;
  for (const std::string& set : kYarn) ASSERT_TRUE(ApplyOverride(set, &config).ok()) << set;
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);

  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"model.rope_scaling.factor=0.5"},
       "model.rope_scaling.factor is 0.5 but YaRN stretches the context, so it must be a finite "
       "number >= 1"},
      {{"model.rope_scaling.original_max_position_embeddings=0"},
       "model.rope_scaling.original_max_position_embeddings is 0 but must be a finite number > 0"},
      {{"model.rope_scaling.beta_fast=0"},
       "model.rope_scaling.beta_fast is 0 but must be a finite number > 0"},
      {{"model.rope_scaling.beta_slow=-1"},
       "model.rope_scaling.beta_slow is -1 but must be a finite number > 0"},
      {{"model.rope_scaling.beta_fast=2", "model.rope_scaling.beta_slow=2"},
       "model.rope_scaling.beta_fast 2 is not above beta_slow 2"},
      {{"model.rope_scaling.mscale=-1"},
       "model.rope_scaling.mscale is -1 but must be a finite number >= 0"},
      {{"model.rope_scaling.mscale_all_dim=nan"}, "model.rope_scaling.mscale_all_dim is nan"},
      {{"model.rope_scaling.attention_factor=inf"}, "model.rope_scaling.attention_factor is inf"},
      {{"model.max_position_embeddings=4096"},
       "model.max_position_embeddings is 4096 but YaRN's factor 40 times "
       "original_max_position_embeddings 4096 is "
       "163840, and transformers computes YaRN with their ratio\nhint: set "
       "model.max_position_embeddings to 163840"},
      {{"model.rope_scaling.factor=256",
        "model.rope_scaling.original_max_position_embeddings=65536"},
       "set model.max_position_embeddings to 16777216"},
      {{"model.rope_scaling.rope_type=longrope"},
       "model.rope_scaling.rope_type is \"longrope\", which tetra does not"},
  };
  for (const auto& [sets, message] : cases) {
    TrainerConfig bad = config;
    for (const std::string& set : sets) ASSERT_TRUE(ApplyOverride(set, &bad).ok()) << set;
    const absl::Status status = ValidateConfig(bad);
    EXPECT_THAT(Message(status), HasSubstr(message)) << ::testing::PrintToString(sets);
    EXPECT_THAT(Message(status), UserErrorShape()) << ::testing::PrintToString(sets);
  }
}

TEST(ConfigValidationTest, PlannerInputsCheckOnlyWhatThePlannerReads) {
  TrainerConfig config;
  config.mutable_model()->set_num_attention_heads(0);  // the planner divides by it
  EXPECT_THAT(Message(ValidatePlannerInputs(config)), HasSubstr("model.num_attention_heads"));
  config = TrainerConfig();
  config.mutable_train()->set_micro_batch_size(0);
  EXPECT_THAT(Message(ValidatePlannerInputs(config)), HasSubstr("train.micro_batch_size 0"));
  // A run's data does not matter to a plan for another cluster.
  config = TrainerConfig();
  config.mutable_data()->mutable_synthetic()->set_num_tokens(1);
  EXPECT_TRUE(ValidatePlannerInputs(config).ok());
  EXPECT_FALSE(ValidateConfig(config).ok());
}

}  // namespace
}  // namespace tetra
