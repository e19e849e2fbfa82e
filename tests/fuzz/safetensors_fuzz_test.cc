// Fuzzing SafetensorsFile::Open (tests/fuzz/safetensors_target.h says what
// each input must satisfy) from files written by WriteSafetensors, plus one
// hand-written file of the dtypes the writer does not make.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_campaign.h"
#include "tests/fuzz/safetensors_target.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

std::vector<std::string> Corpus(const std::string& dir) {
  std::vector<std::string> corpus;
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f};
  auto add = [&](const std::vector<SafetensorsTensorRef>& tensors, DType dtype,
                 const std::map<std::string, std::string>& metadata) {
    const std::string path = dir + "/seed.safetensors";
    ASSERT_TRUE(WriteSafetensors(path, tensors, dtype, metadata).ok());
    corpus.push_back(testing::ReadBytes(path));
  };
  add({{"model.embed_tokens.weight", {2, 3}, values.data()},
       {"model.norm.weight", {3}, values.data()}},
      DType::kF32, {{"format", "pt"}});
  add({{"scalar", {}, values.data()}, {"empty", {0, 3}, values.data()}, {"v", {6}, values.data()}},
      DType::kBF16, {});
  const std::string header = R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                             R"("ids":{"dtype":"I64","shape":[1],"data_offsets":[4,12]},)"
                             R"("mask":{"dtype":"BOOL","shape":[3],"data_offsets":[12,15]},)"
                             R"("__metadata__":{"a":"b"}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  corpus.push_back(bytes + header +
                   std::string("\x00\x3c\x00\xc0"
                               "\x07\0\0\0\0\0\0\0"
                               "\x01\x00\x01",
                               15));
  return corpus;
}

// Mutations of the header text that keep the length field right (most
// plain byte mutations only break the JSON): numbers set to interesting
// values (offsets, dims), slices duplicated (a tensor entry twice: an alias or
// a duplicate key), a key grown huge; or the data buffer cut or extended.
std::string MutateHeader(testing::Mutator& m, const std::vector<std::string>& corpus) {
  const std::string& file = corpus[m.rng().Below(corpus.size())];
  uint64_t length;
  std::memcpy(&length, file.data(), 8);
  std::string header = file.substr(8, length), data = file.substr(8 + length);
  const int count = 1 + static_cast<int>(m.rng().Below(3));
  for (int i = 0; i < count; ++i) {
    switch (m.rng().Below(8)) {
      case 0:
        m.DuplicateSlice(&header);
        break;
      case 1:
        data.resize(m.rng().Below(data.size() + 16), '\0');
        break;
      case 2:
        if (m.rng().OneIn(8)) {
          m.GrowString(&header);
        } else {
          m.FlipBit(&header);
        }
        break;
      default:
        m.ReplaceNumberText(&header);
        break;
    }
  }
  std::string out(8, '\0');
  const uint64_t size = header.size();
  std::memcpy(out.data(), &size, 8);
  return out + header + data;
}

TEST(SafetensorsFuzzTest, EveryInputOpensSoundOrFailsWithAShortUserError) {
  testing::LimitAddressSpace(uint64_t{4} << 30);
  const std::string dir = testing::ScratchDir("safetensors_fuzz_test");
  const std::string path = dir + "/input.safetensors";
  const std::vector<std::string> corpus = Corpus(dir);
  testing::Run(
      {.parser = "safetensors",
       .corpus = corpus,
       .seed = 20240520,
       .mutations = 30000,
       .problem =
           [&](const std::string& input) { return testing::SafetensorsProblem(input, path); },
       .mutate = [&](testing::Mutator& m) { return MutateHeader(m, corpus); }});
}

}  // namespace
}  // namespace tetra
