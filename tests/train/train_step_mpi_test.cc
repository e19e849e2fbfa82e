// A step whose data fails on one rank fails on every rank, and at once: the
// ranks that read the bad sample name it, the others name the lowest of them,
// and none waits in a collective for the communication timeout (which would
// abort the job with a message about the network instead of the data).
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "data/llmc_shard.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/parallel_state.h"
#include "tests/testing/configs.h"
#include "train/config_validation.h"
#include "train/trainer.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr int kSeq = 16;
constexpr int kVocab = 32;

// An llm.c uint16 shard of `samples` samples of kSeq tokens, all valid except
// the one at `bad_position`.
void WriteShard(const std::string& path, int samples, int64_t bad_position) {
  const int64_t tokens = static_cast<int64_t>(samples) * kSeq + 1;
  std::vector<int32_t> header(256, 0);
  header[0] = kLlmcMagicUint16;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens);
  std::vector<uint16_t> body(tokens);
  for (int64_t i = 0; i < tokens; ++i) body[i] = static_cast<uint16_t>(i % kVocab);
  body[bad_position] = 40000;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), header.size() * sizeof(int32_t));
  out.write(reinterpret_cast<const char*>(body.data()), body.size() * sizeof(uint16_t));
}

TEST(TrainStepMpiTest, ABadSampleOnOneRankFailsTheStepOnEveryRank) {
  std::unique_ptr<Communicator> world = MpiWorld(60);
  const int world_size = world->size(), world_rank = world->rank();
  // Two pipeline stages where there are four ranks or more, the rest data parallel.
  const int pp = world_size >= 4 ? 2 : 1, dp = world_size / pp;
  const int pid = static_cast<int>(MaxOverRanks(*world, world_rank == 0 ? getpid() : 0));
  const std::string path =
      ::testing::TempDir() + "train_step_mpi_test_" + std::to_string(pid) + ".bin";
  // Step 1 gives batch-group rank r sample r (one sample each): tokens
  // r*kSeq .. r*kSeq + kSeq. The bad token is in the last one's sample only.
  if (world_rank == 0) WriteShard(path, dp + 1, static_cast<int64_t>(dp - 1) * kSeq + 1);
  world->Barrier();

  TrainerConfig config = testing::RecipeConfig("tiny_dense.textproto");
  const std::vector<std::string> sets = {"train.steps=1",
                                         "train.global_batch_size=" + std::to_string(dp),
                                         "train.micro_batch_size=1",
                                         "train.seq_length=" + std::to_string(kSeq),
                                         "data.format=LLMC",
                                         "data.path=\"" + path + "\"",
                                         "log.metrics_path=\"\"",
                                         "parallel.pipeline=" + std::to_string(pp),
                                         "parallel.data=" + std::to_string(dp),
                                         "parallel.comm_timeout_s=60"};
  for (const std::string& set : sets) {
    testing::SetField(&config, set);
  }
  ASSERT_EQ(config.model().vocab_size(), kVocab);
  ASSERT_TRUE(ValidateConfig(config, world_size).ok()) << ValidateConfig(config, world_size);
  absl::StatusOr<ParallelState> parallel =
      ParallelState::Create(config.parallel(), std::move(world));
  ASSERT_TRUE(parallel.ok()) << parallel.status();

  std::ostringstream progress;
  const absl::StatusOr<TrainResult> result = Train(config, *parallel, progress);
  ASSERT_FALSE(result.ok());
  // The first and the last stage of the last data-parallel replica load its samples.
  const bool loads = parallel->coords().dp == dp - 1 &&
                     (parallel->pipeline().rank() == 0 || parallel->pipeline().rank() == pp - 1);
  if (loads) {
    EXPECT_THAT(result.status().message(), HasSubstr("outside the vocabulary [0, 32)"));
  } else {
    EXPECT_THAT(result.status().message(), HasSubstr("failed (see its error above)"));
  }
  parallel->world().Barrier();
  if (world_rank == 0) fs::remove(path);
}

}  // namespace
}  // namespace tetra
