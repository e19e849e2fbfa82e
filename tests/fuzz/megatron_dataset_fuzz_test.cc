// Fuzzing OpenMegatronDataset (tests/fuzz/megatron_dataset_target.h says
// what each input must satisfy) from data sets written by
// WriteMegatronDataset, one per integer dtype, plus one whose sequences lie
// out of order in the .bin.
#include <cstring>
#include <string>
#include <vector>

#include "data/megatron_dataset.h"
#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_campaign.h"
#include "tests/fuzz/megatron_dataset_target.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

std::vector<std::string> Corpus(const std::string& dir) {
  std::vector<std::string> corpus;
  const std::string prefix = dir + "/seed";
  for (int code : {kMegatronUint8, kMegatronInt8, kMegatronInt16, kMegatronInt32, kMegatronInt64,
                   kMegatronUint16}) {
    EXPECT_TRUE(WriteMegatronDataset(prefix, {{1, 2, 3}, {}, {4, 5}, {100}}, code).ok());
    corpus.push_back(testing::MegatronInput(testing::ReadBytes(prefix + ".idx"),
                                            testing::ReadBytes(prefix + ".bin")));
  }
  // Sequence 0 stored after sequence 1: two runs.
  EXPECT_TRUE(WriteMegatronDataset(prefix, {{7, 8}, {9}}, kMegatronInt32).ok());
  std::string idx = testing::ReadBytes(prefix + ".idx");
  const int64_t pointers[] = {4, 0};
  std::memcpy(idx.data() + 34 + 2 * 4, pointers, sizeof(pointers));
  const std::string bin = testing::ReadBytes(prefix + ".bin");
  corpus.push_back(testing::MegatronInput(idx, bin.substr(8) + bin.substr(0, 8)));
  return corpus;
}

// Most mutations go to the index; some cut or grow the .bin.
std::string MutateOnePart(testing::Mutator& m, const std::vector<std::string>& corpus) {
  const std::string& input = corpus[m.rng().Below(corpus.size())];
  uint32_t n;
  std::memcpy(&n, input.data(), 4);
  std::string idx = input.substr(4, n), bin = input.substr(4 + n);
  if (m.rng().OneIn(4)) {
    bin = m.Mutate(bin);
  } else {
    idx = m.Mutate(idx);
  }
  return testing::MegatronInput(idx, bin);
}

TEST(MegatronDatasetFuzzTest, EveryInputOpensSoundOrFailsWithAShortUserError) {
  testing::LimitAddressSpace(uint64_t{4} << 30);
  const std::string dir = testing::ScratchDir("megatron_dataset_fuzz_test");
  const std::vector<std::string> corpus = Corpus(dir);
  testing::Run({.parser = "megatron_dataset",
                .corpus = corpus,
                .seed = 1729,
                .mutations = 20000,
                .problem =
                    [&](const std::string& input) {
                      return testing::MegatronDatasetProblem(input, dir + "/input");
                    },
                .mutate = [&](testing::Mutator& m) { return MutateOnePart(m, corpus); }});
}

}  // namespace
}  // namespace tetra
