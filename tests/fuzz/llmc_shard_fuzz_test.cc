// Fuzzing OpenLlmcShard (tests/fuzz/llmc_shard_target.h says what each input
// must satisfy) from shards written by WriteLlmcShard, uint16 and uint32.
#include <string>
#include <vector>

#include "data/llmc_shard.h"
#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_campaign.h"
#include "tests/fuzz/llmc_shard_target.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

std::vector<std::string> Corpus(const std::string& dir) {
  std::vector<std::string> corpus;
  const std::string path = dir + "/seed.bin";
  for (const auto& [tokens, wide] : std::vector<std::pair<std::vector<int32_t>, bool>>{
           {{}, false}, {{0, 1, 65535, 7, 50256}, false}, {{3, 2147483647, 128255}, true}}) {
    EXPECT_TRUE(WriteLlmcShard(path, tokens, wide).ok());
    corpus.push_back(testing::ReadBytes(path));
  }
  return corpus;
}

TEST(LlmcShardFuzzTest, EveryInputOpensSoundOrFailsWithAShortUserError) {
  testing::LimitAddressSpace(uint64_t{4} << 30);
  const std::string dir = testing::ScratchDir("llmc_shard_fuzz_test");
  const std::string path = dir + "/input.bin";
  testing::Run({.parser = "llmc_shard",
                .corpus = Corpus(dir),
                .seed = 20240801,
                .mutations = 20000,
                .max_truncated_bytes = 1100,
                .problem = [&](const std::string& input) {
                  return testing::LlmcShardProblem(input, path);
                }});
}

}  // namespace
}  // namespace tetra
