// Megatron-LM indexed data sets: the writer against the MMIDIDX layout spelled
// out byte by byte, round trips for every integer dtype, and each bad input
// (one sentence naming the file, then a hint line).
#include "data/megatron_dataset.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "data/sample_loader.h"
#include "data/token_stream.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_files.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

using ::tetra::testing::ReadBytes;
using ::tetra::testing::WriteBytes;

std::string TempPrefix(const std::string& name) {
  return testing::ScratchDir("megatron_dataset_test") + "/" + name;
}

// `value` as `width` little-endian bytes, by hand.
std::string LittleEndian(uint64_t value, int width) {
  std::string bytes;
  for (int i = 0; i < width; ++i) bytes.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  return bytes;
}

std::vector<int32_t> ReadAll(const TokenStream& stream) {
  std::vector<int32_t> out(stream.size());
  EXPECT_TRUE(stream.Read(0, stream.size(), out.data()).ok());
  return out;
}

using testing::Message;
using testing::UserErrorShape;

// Opens `prefix` and returns the error message (empty if it opened), which
// must have the shape of a user error.
std::string OpenError(const std::string& prefix) {
  auto stream = OpenMegatronDataset(prefix);
  if (stream.ok()) return "";
  EXPECT_THAT(Message(stream.status()), UserErrorShape());
  return Message(stream.status());
}

TEST(MegatronDatasetTest, WritesTheMmidIdxLayoutByteForByte) {
  const std::string prefix = TempPrefix("layout");
  ASSERT_TRUE(WriteMegatronDataset(prefix, {{1, 2, 3}, {258, 5}}, kMegatronUint16).ok());
  std::string expected_index = std::string("MMIDIDX\0\0", 9) + LittleEndian(1, 8) +  // version
                               LittleEndian(8, 1) +                                  // uint16
                               LittleEndian(2, 8) +                                  // sequences
                               LittleEndian(3, 8) +  // document indices: 0, 1, 2
                               LittleEndian(3, 4) + LittleEndian(2, 4) +  // lengths
                               LittleEndian(0, 8) + LittleEndian(6, 8) +  // byte pointers
                               LittleEndian(0, 8) + LittleEndian(1, 8) + LittleEndian(2, 8);
  EXPECT_EQ(ReadBytes(prefix + ".idx"), expected_index);
  EXPECT_EQ(ReadBytes(prefix + ".bin"), LittleEndian(1, 2) + LittleEndian(2, 2) +
                                            LittleEndian(3, 2) + LittleEndian(258, 2) +
                                            LittleEndian(5, 2));
}

TEST(MegatronDatasetTest, RoundTripsEveryIntegerDtype) {
  struct Case {
    int code;
    std::vector<std::vector<int32_t>> sequences;
  };
  const std::vector<Case> cases = {
      {kMegatronUint8, {{0, 255}, {7}}},      {kMegatronInt8, {{-128, 127}, {}, {5}}},
      {kMegatronInt16, {{-32768, 32767, 1}}}, {kMegatronInt32, {{-5, 2147483647}, {100000}}},
      {kMegatronInt64, {{3, 128255}, {-2}}},  {kMegatronUint16, {{65535}, {50256, 0}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.code);
    const std::string prefix = TempPrefix("dtype" + std::to_string(c.code));
    ASSERT_TRUE(WriteMegatronDataset(prefix, c.sequences, c.code).ok());
    auto stream = OpenMegatronDataset(prefix);
    ASSERT_TRUE(stream.ok()) << stream.status();
    std::vector<int32_t> expected;
    for (const auto& sequence : c.sequences) {
      expected.insert(expected.end(), sequence.begin(), sequence.end());
    }
    EXPECT_THAT(ReadAll(**stream), ElementsAreArray(expected));
  }
}

TEST(MegatronDatasetTest, WriterRejectsFloatCodesAndTokensThatDoNotFit) {
  EXPECT_THAT(Message(WriteMegatronDataset(TempPrefix("float"), {{1}}, kMegatronFloat32)),
              HasSubstr("float32"));
  absl::Status status = WriteMegatronDataset(TempPrefix("fit"), {{1}, {300}}, kMegatronUint8);
  EXPECT_THAT(Message(status), HasSubstr("token 300 of sequence 1"));
  EXPECT_THAT(Message(status), UserErrorShape());
}

TEST(MegatronDatasetTest, SequencesAreReadInIndexOrderWhereverTheyLie) {
  // A hand-made index whose sequences are stored in the .bin in reverse order
  // with a gap: the stream still follows the index.
  const std::string prefix = TempPrefix("scattered");
  WriteBytes(prefix + ".bin", LittleEndian(30, 4) + LittleEndian(31, 4) + LittleEndian(99, 4) +
                                  LittleEndian(10, 4) + LittleEndian(11, 4) + LittleEndian(12, 4));
  WriteBytes(prefix + ".idx", std::string("MMIDIDX\0\0", 9) + LittleEndian(1, 8) +
                                  LittleEndian(kMegatronInt32, 1) + LittleEndian(2, 8) +
                                  LittleEndian(2, 8) + LittleEndian(3, 4) + LittleEndian(2, 4) +
                                  LittleEndian(12, 8) + LittleEndian(0, 8) + LittleEndian(0, 8) +
                                  LittleEndian(2, 8));
  auto stream = OpenMegatronDataset(prefix);
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_THAT(ReadAll(**stream), ElementsAre(10, 11, 12, 30, 31));
  std::vector<int32_t> across(2);
  ASSERT_TRUE((*stream)->Read(2, 2, across.data()).ok());
  EXPECT_THAT(across, ElementsAre(12, 30));
  // Stream position 3 (token 30) is token 0 of the .bin file.
  EXPECT_EQ((*stream)->Locate(3).file, prefix + ".bin");
  EXPECT_EQ((*stream)->Locate(3).position, 0);
  EXPECT_EQ((*stream)->Locate(1).position, 4);
}

TEST(MegatronDatasetTest, BinTruncatedBetweenTwoReadsIsAnErrorNamingIt) {
  const std::string prefix = TempPrefix("truncated_while_training");
  std::vector<int32_t> sequence(1 << 19, 7);  // 2 MiB of int32 tokens: many pages
  ASSERT_TRUE(WriteMegatronDataset(prefix, {sequence, sequence}, kMegatronInt32).ok());
  auto stream = OpenMegatronDataset(prefix);
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<int32_t> out(4);
  ASSERT_TRUE((*stream)->Read((1 << 20) - 4, 4, out.data()).ok());
  ASSERT_EQ(truncate((prefix + ".bin").c_str(), 4 * 1000), 0);
  const absl::Status status = (*stream)->Read((1 << 20) - 4, 4, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("Megatron data file " + prefix +
                                         ".bin shrank from "
                                         "4194304 to 4000 bytes"));
  EXPECT_THAT(Message(status), UserErrorShape());
}

TEST(MegatronDatasetTest, MissingIdxOrBinIsNamed) {
  const std::string prefix = TempPrefix("missing");
  ASSERT_TRUE(WriteMegatronDataset(prefix, {{1, 2}}, kMegatronUint16).ok());
  std::remove((prefix + ".bin").c_str());
  EXPECT_THAT(OpenError(prefix),
              HasSubstr("cannot read Megatron data file " + prefix + ".bin: No such file"));
  std::remove((prefix + ".idx").c_str());
  EXPECT_THAT(OpenError(prefix),
              HasSubstr("cannot read Megatron index " + prefix + ".idx: No such file"));
  EXPECT_THAT(OpenError(prefix), HasSubstr("\nhint: a Megatron data set is " + prefix +
                                           ".idx plus " + prefix + ".bin"));
}

// Writes a valid two-sequence data set and returns its index bytes.
std::string ValidDataset(const std::string& prefix) {
  EXPECT_TRUE(WriteMegatronDataset(prefix, {{1, 2, 3}, {4, 5}}, kMegatronUint16).ok());
  return ReadBytes(prefix + ".idx");
}

TEST(MegatronDatasetTest, BadMagic) {
  const std::string prefix = TempPrefix("magic");
  std::string index = ValidDataset(prefix);
  index[0] = 'X';
  WriteBytes(prefix + ".idx", index);
  std::string error = OpenError(prefix);
  EXPECT_THAT(error, HasSubstr(prefix + ".idx"));
  EXPECT_THAT(error, HasSubstr("XMIDIDX"));
  EXPECT_THAT(error, HasSubstr("expected \"MMIDIDX\\x00\\x00\""));
  EXPECT_THAT(error,
              HasSubstr("\nhint: data.format MEGATRON expects Megatron-LM indexed data sets"));
}

TEST(MegatronDatasetTest, BadVersion) {
  const std::string prefix = TempPrefix("version");
  std::string index = ValidDataset(prefix);
  index.replace(9, 8, LittleEndian(2, 8));
  WriteBytes(prefix + ".idx", index);
  std::string error = OpenError(prefix);
  EXPECT_THAT(error, HasSubstr(prefix + ".idx"));
  EXPECT_THAT(error, HasSubstr("version 2, expected 1"));
}

TEST(MegatronDatasetTest, UnsupportedDtype) {
  const std::string prefix = TempPrefix("dtype");
  std::string index = ValidDataset(prefix);
  index[17] = 6;  // float64
  WriteBytes(prefix + ".idx", index);
  std::string error = OpenError(prefix);
  EXPECT_THAT(error, HasSubstr(prefix + ".idx"));
  EXPECT_THAT(error, HasSubstr("dtype code 6 is float64"));
  index[17] = 9;
  WriteBytes(prefix + ".idx", index);
  EXPECT_THAT(OpenError(prefix), HasSubstr("unknown dtype code 9"));
}

TEST(MegatronDatasetTest, TruncatedIndex) {
  const std::string prefix = TempPrefix("truncated");
  std::string index = ValidDataset(prefix);
  WriteBytes(prefix + ".idx", index.substr(0, index.size() - 1));
  std::string error = OpenError(prefix);
  EXPECT_THAT(error, HasSubstr(prefix + ".idx"));
  EXPECT_THAT(error, HasSubstr("truncated"));
  EXPECT_THAT(error, HasSubstr("2 sequences and 3 documents"));
  WriteBytes(prefix + ".idx", index.substr(0, 20));
  EXPECT_THAT(OpenError(prefix), HasSubstr("fewer than the 34-byte header"));
  // A sequence count so large the multiplication would overflow.
  index.replace(18, 8, LittleEndian(~uint64_t{0}, 8));
  WriteBytes(prefix + ".idx", index);
  EXPECT_THAT(OpenError(prefix), HasSubstr("truncated"));
}

TEST(MegatronDatasetTest, SequencePastTheEndOfTheBin) {
  const std::string prefix = TempPrefix("short_bin");
  ValidDataset(prefix);
  std::string data = ReadBytes(prefix + ".bin");
  WriteBytes(prefix + ".bin", data.substr(0, data.size() - 2));  // drop token 5
  std::string error = OpenError(prefix);
  EXPECT_THAT(error, HasSubstr(prefix + ".bin"));
  EXPECT_THAT(error, HasSubstr("sequence 1 (byte offset 6, 2 tokens of 2 bytes)"));
  EXPECT_THAT(error, HasSubstr("(8 bytes)"));
}

TEST(MegatronDatasetTest, OpenTokenFilesTakesPrefixesSuffixesAndGlobs) {
  const std::string base = TempPrefix("glob_");
  ASSERT_TRUE(WriteMegatronDataset(base + "b", {{20, 21}}, kMegatronUint16).ok());
  ASSERT_TRUE(WriteMegatronDataset(base + "a", {{10}, {11}}, kMegatronInt32).ok());
  auto prefix = OpenTokenFiles(DataConfig::MEGATRON, base + "a");
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  EXPECT_THAT(ReadAll(**prefix), ElementsAre(10, 11));
  auto with_suffix = OpenTokenFiles(DataConfig::MEGATRON, base + "b.bin");
  ASSERT_TRUE(with_suffix.ok()) << with_suffix.status();
  EXPECT_THAT(ReadAll(**with_suffix), ElementsAre(20, 21));
  auto glob = OpenTokenFiles(DataConfig::MEGATRON, base + "*");
  ASSERT_TRUE(glob.ok()) << glob.status();
  EXPECT_THAT(ReadAll(**glob), ElementsAre(10, 11, 20, 21));

  // The vocabulary check names the .bin file and the position in it.
  auto loader = SampleLoader::Create(*std::move(glob), 3, /*shuffle=*/false, 1, /*vocab_size=*/21);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<int32_t> inputs(3), targets(3);
  absl::Status invalid = loader->Load(0, 1, inputs.data(), targets.data());
  EXPECT_THAT(Message(invalid), HasSubstr(base + "b.bin: token at position 1 is 21"));
  EXPECT_THAT(Message(invalid), UserErrorShape());

  const std::string nothing = base + "nothing*";
  const std::string no_match = Message(OpenTokenFiles(DataConfig::MEGATRON, nothing).status());
  EXPECT_THAT(no_match, HasSubstr(nothing));
  EXPECT_THAT(no_match, UserErrorShape());
}

}  // namespace
}  // namespace tetra
