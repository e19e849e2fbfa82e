// Fuzzing the checkpoint manifest reader (tests/fuzz/
// checkpoint_manifest_target.h says what each input must satisfy) from the
// manifest of a real checkpoint, written by `tetra train` for a tiny model:
// byte mutations of manifest.pb, and field mutations of the parsed manifest
// (shapes, boxes, offsets, byte counts and CRCs set to 0, -1, 2^31, 2^62,
// INT64_MAX...; shard records duplicated, swapped, removed).
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fuzz/checkpoint_manifest_target.h"
#include "tests/fuzz/fuzz_campaign.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointManifestFuzzTest, EveryManifestReadsSoundOrFailsWithAShortUserError) {
  const std::string scratch = testing::ScratchDir("checkpoint_manifest_fuzz_test");
  const std::string command =
      std::string(TETRA_BINARY) +
      " train --config /dev/null --set model.vocab_size=32 --set model.hidden_size=16"
      " --set model.num_hidden_layers=1 --set model.num_attention_heads=2"
      " --set model.intermediate_size=32 --set train.global_batch_size=2"
      " --set train.micro_batch_size=2 --set train.seq_length=8 --set train.threads=1"
      " --set train.steps=1 --set checkpoint.interval=1 --set checkpoint.dir=" +
      scratch + "/ckpt >" + scratch + "/train.log 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << testing::ReadBytes(scratch + "/train.log");
  const std::string written = scratch + "/ckpt/step_00000001";
  const std::string dir = scratch + "/input";
  fs::create_directories(dir);
  fs::copy_file(written + "/rank_00000.bin", dir + "/rank_00000.bin");
  const std::vector<std::string> corpus = {testing::ReadBytes(written + "/" + kManifestFileName)};
  if (const char* seeds = std::getenv("TETRA_FUZZ_SEEDS_DIR")) {  // the data file for tools/fuzz/
    const std::string data = std::string(seeds) + "/checkpoint_manifest.data";
    fs::create_directories(data);
    fs::copy_file(written + "/rank_00000.bin", data + "/rank_00000.bin",
                  fs::copy_options::overwrite_existing);
  }
  testing::LimitAddressSpace(uint64_t{4} << 30);
  testing::Run(
      {.parser = "checkpoint_manifest",
       .corpus = corpus,
       .seed = 31,
       .mutations = 8000,
       .problem =
           [&](const std::string& input) { return testing::CheckpointManifestProblem(input, dir); },
       .mutate =
           [&](testing::Mutator& m) {
             CheckpointManifest manifest;
             EXPECT_TRUE(manifest.ParseFromString(corpus[0]));
             const int count = 1 + static_cast<int>(m.rng().Below(3));
             for (int i = 0; i < count; ++i) m.MutateMessage(&manifest);
             return manifest.SerializeAsString();
           }});
}

}  // namespace
}  // namespace tetra
