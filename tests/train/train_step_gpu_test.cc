// A whole training run of a few steps on the GPU (fp32 and bf16 mixed
// precision) against the same run on the CPU: same config, seed and data, so
// the step losses must agree to the precision's tolerance.
#include <memory>
#include <sstream>
#include <string>

#include "comm/self_communicator.h"
#include "core/cuda/device_arena.h"
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
// through two blocks move a loss of ~3.4 nats by up to ~1%; 3e-2 relative
// still catches a wrong kernel (a wrong gradient shows by step 3).
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

std::vector<double> StepLosses(const std::string& device, const std::string& precision,
                               int steps = 3) {
  TrainerConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kConfig, &config));
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
  std::vector<double> losses;
  if (result.ok()) {
    for (const StepMetrics& m : result->steps) losses.push_back(m.loss);
  }
  return losses;
}

TEST(TrainStepGpuTest, GpuLossesMatchCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  const std::vector<double> cpu = StepLosses("CPU", "FP32");
  ASSERT_EQ(cpu.size(), 3u);
  for (const auto& [precision, tol] : {std::pair{"FP32", kFp32RelTol}, std::pair{"BF16", kBf16RelTol}}) {
    SCOPED_TRACE(precision);
    const std::vector<double> gpu = StepLosses("CUDA", precision);
    ASSERT_EQ(gpu.size(), cpu.size());
    for (size_t s = 0; s < cpu.size(); ++s) {
      EXPECT_NEAR(gpu[s], cpu[s], tol * cpu[s]) << "step " << s + 1;
    }
  }
}

// Buffers are made in the first step and reused after it: a 3-step run makes
// as many cudaMalloc calls as a 1-step run (after a first run has made the
// process-wide ones: cuBLASLt workspace, scratch).
TEST(TrainStepGpuTest, NoDeviceAllocationAfterTheFirstStep) {
  TETRA_SKIP_WITHOUT_GPU();
  StepLosses("CUDA", "BF16", 1);
  const int64_t before_one = cuda::DeviceMallocCount();
  StepLosses("CUDA", "BF16", 1);
  const int64_t one_step = cuda::DeviceMallocCount() - before_one;
  const int64_t before_three = cuda::DeviceMallocCount();
  StepLosses("CUDA", "BF16", 3);
  EXPECT_EQ(cuda::DeviceMallocCount() - before_three, one_step);
}

}  // namespace
}  // namespace tetra
