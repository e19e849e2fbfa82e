// A whole training run of a few steps on the GPU (fp32 and bf16 mixed
// precision) against the same run on the CPU: same config, seed and data, so
// the step losses must agree to the precision's tolerance.
#include <memory>
#include <sstream>
#include <string>

#include "comm/self_communicator.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "parallel/parallel_state.h"
#include "tests/testing/gpu.h"
#include "train/config_validation.h"
#include "train/trainer.h"

namespace tetra {
namespace {

// fp32 on the GPU: the same arithmetic in other orders (cuBLASLt, block
// reductions, atomics in the embedding gradient): ~1e-6 relative in the
// loss, grown a little by three AdamW steps.
constexpr double kFp32RelTol = 1e-4;
// bf16 weights and activations (8-bit mantissa, 2^-9 relative per rounding)
// through two blocks move a loss of ~3.4 nats by up to ~1% (on the CPU, bf16
// against fp32: 1e-4 in the loss, 2e-3 in the gradient norm); 3e-2 relative
// still catches a wrong kernel, whose gradient norm is off by more.
constexpr double kBf16RelTol = 3e-2;

constexpr char kConfig[] = R"pb(
  model {
    vocab_size: 32
    hidden_size: 64
    num_hidden_layers: 2
    num_attention_heads: 4
    num_key_value_heads: 2
    intermediate_size: 176
  }
  train { steps: 3 global_batch_size: 8 micro_batch_size: 4 seq_length: 64 seed: 1234 }
  optimizer { lr: 3e-3 min_lr: 3e-3 }
  data {
    format: SYNTHETIC
    synthetic { order: 2 branching: 4 concentration: 1.0 }
  }
)pb";

// The same model with DeepSeek-V3-style MoE blocks: sigmoid group-limited
// routing of 2 of 8 experts beside a shared one.
constexpr char kMoe[] = R"pb(
  model {
    moe {
      n_routed_experts: 8
      num_experts_per_tok: 2
      n_shared_experts: 1
      moe_intermediate_size: 48
      scoring_func: "sigmoid"
      n_group: 2
      topk_group: 1
      aux_loss_alpha: 0.0001
      bias_update_speed: 0.001
    }
  }
)pb";

// Each step's loss and gradient norm: the loss barely moves in three steps,
// but a wrong gradient shows in its norm at once.
struct Steps {
  std::vector<double> loss, grad_norm;
  std::vector<double> device_mallocs, device_allocations;  // device runs
};

Steps RunSteps(const std::string& device, const std::string& precision, int steps = 3,
               bool moe = false) {
  TrainerConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kConfig, &config));
  if (moe) {
    EXPECT_TRUE(google::protobuf::TextFormat::MergeFromString(kMoe, &config));
  }
  Device::Value device_value;
  Precision::Value precision_value;
  EXPECT_TRUE(Device::Value_Parse(device, &device_value));
  EXPECT_TRUE(Precision::Value_Parse(precision, &precision_value));
  config.mutable_train()->set_device(device_value);
  config.mutable_train()->set_precision(precision_value);
  config.mutable_train()->set_steps(steps);
  const absl::Status valid = ValidateConfig(config, 1);
  EXPECT_TRUE(valid.ok()) << valid;
  auto parallel = ParallelState::Create(config.parallel(), std::make_unique<SelfCommunicator>());
  EXPECT_TRUE(parallel.ok()) << parallel.status();
  std::ostringstream progress;
  auto result = Train(config, *parallel, progress);
  EXPECT_TRUE(result.ok()) << result.status();
  Steps run;
  if (result.ok()) {
    for (const StepMetrics& m : result->steps) {
      run.loss.push_back(m.loss);
      run.grad_norm.push_back(m.grad_norm);
      if (m.device_mallocs) run.device_mallocs.push_back(*m.device_mallocs);
      if (m.device_allocations) run.device_allocations.push_back(*m.device_allocations);
    }
  }
  return run;
}

void ExpectStepsMatch(const Steps& gpu, const Steps& cpu, double rel_tol) {
  ASSERT_EQ(cpu.loss.size(), 3u);
  ASSERT_EQ(gpu.loss.size(), cpu.loss.size());
  for (size_t s = 0; s < cpu.loss.size(); ++s) {
    EXPECT_NEAR(gpu.loss[s], cpu.loss[s], rel_tol * cpu.loss[s]) << "loss, step " << s + 1;
    EXPECT_NEAR(gpu.grad_norm[s], cpu.grad_norm[s], rel_tol * cpu.grad_norm[s])
        << "grad norm, step " << s + 1;
  }
}

TEST(TrainStepGpuTest, GpuLossesMatchCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  const Steps cpu = RunSteps("CPU", "FP32");
  for (const auto& [precision, tol] :
       {std::pair{"FP32", kFp32RelTol}, std::pair{"BF16", kBf16RelTol}}) {
    SCOPED_TRACE(precision);
    ExpectStepsMatch(RunSteps("CUDA", precision), cpu, tol);
  }
}

// The MoE path on the GPU (router, dispatch, expert GEMMs, balance loss)
// against the CPU's, in bf16 mixed precision.
TEST(TrainStepGpuTest, GpuMoeLossesMatchCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  ExpectStepsMatch(RunSteps("CUDA", "BF16", 3, /*moe=*/true),
                   RunSteps("CPU", "FP32", 3, /*moe=*/true), kBf16RelTol);
}

// No step waits for the device to allocate or free memory (cudaMalloc and
// cudaFree synchronise it): every step of a dense and an MoE run (whose
// dispatch sizes change from step to step) reports device_mallocs 0. The
// multi-rank layouts (tensor, expert, pipeline parallel) check the same on
// one GPU: tools/gpu/check_gpu_layouts.py.
TEST(TrainStepGpuTest, NoStepWaitsForADeviceAllocation) {
  TETRA_SKIP_WITHOUT_GPU();
  for (bool moe : {false, true}) {
    const Steps run = RunSteps("CUDA", "BF16", 3, moe);
    ASSERT_EQ(run.device_mallocs.size(), 3u);
    for (size_t s = 0; s < run.device_mallocs.size(); ++s) {
      EXPECT_EQ(run.device_mallocs[s], 0) << (moe ? "MoE" : "dense") << " step " << s + 1;
    }
  }
}

// After the first step, which sizes every buffer, a step allocates no
// device memory at all, not even from the pool (core/device_work.h).
TEST(TrainStepGpuTest, OnlyTheFirstStepAllocatesDeviceMemory) {
  TETRA_SKIP_WITHOUT_GPU();
  for (bool moe : {false, true}) {
    const Steps run = RunSteps("CUDA", "BF16", 3, moe);
    ASSERT_EQ(run.device_allocations.size(), 3u);
    EXPECT_GT(run.device_allocations[0], 0) << (moe ? "MoE" : "dense");
    for (size_t s = 1; s < run.device_allocations.size(); ++s) {
      EXPECT_EQ(run.device_allocations[s], 0) << (moe ? "MoE" : "dense") << " step " << s + 1;
    }
  }
}

}  // namespace
}  // namespace tetra
