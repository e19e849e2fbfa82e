// llm.c shards, and the TokenStream plumbing over them: globs of shards as one
// stream, range checks naming file and position, and the open-time errors,
// each one sentence plus a hint line.
#include "data/llmc_shard.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
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

std::string TempPath(const std::string& name) {
  return testing::ScratchDir("llmc_shard_test") + "/" + name;
}

// Little-endian int32 at byte `offset`, decoded by hand.
int32_t Int32At(const std::string& bytes, size_t offset) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[offset + i]);
  return static_cast<int32_t>(v);
}

void PutInt32(std::string* bytes, size_t offset, int32_t value) {
  for (int i = 0; i < 4; ++i) (*bytes)[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

std::vector<int32_t> ReadAll(const TokenStream& stream) {
  std::vector<int32_t> out(stream.size());
  EXPECT_TRUE(stream.Read(0, stream.size(), out.data()).ok());
  return out;
}

using testing::Message;
using testing::UserErrorShape;

constexpr char kNotLlmcHint[] =
    "\nhint: data.format LLMC expects llm.c shards (made by llm.c's dev/data scripts); for "
    "Megatron .bin/.idx use data.format MEGATRON";

TEST(LlmcShardTest, WritesTheLlmcLayoutByteForByte) {
  const std::string path = TempPath("layout.bin");
  ASSERT_TRUE(WriteLlmcShard(path, {1, 258, 65535}).ok());
  const std::string bytes = ReadBytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 3 * 2);
  EXPECT_EQ(Int32At(bytes, 0), 20240520);  // magic, GPT-2 layout
  EXPECT_EQ(Int32At(bytes, 4), 1);         // version
  EXPECT_EQ(Int32At(bytes, 8), 3);         // token count
  for (size_t i = 12; i < 1024; ++i) ASSERT_EQ(bytes[i], 0) << "header byte " << i;
  // uint16 little-endian: 1 = 01 00, 258 = 02 01, 65535 = ff ff.
  EXPECT_EQ(bytes.substr(1024), std::string("\x01\x00\x02\x01\xff\xff", 6));
}

TEST(LlmcShardTest, RoundTripsUint16AndUint32Tokens) {
  const std::vector<int32_t> small = {0, 7, 50256, 65535, 3};
  const std::string path16 = TempPath("u16.bin");
  ASSERT_TRUE(WriteLlmcShard(path16, small).ok());
  auto stream16 = OpenLlmcShard(path16);
  ASSERT_TRUE(stream16.ok()) << stream16.status();
  EXPECT_EQ((*stream16)->size(), 5);
  EXPECT_THAT(ReadAll(**stream16), ElementsAreArray(small));
  std::vector<int32_t> middle(2);
  ASSERT_TRUE((*stream16)->Read(2, 2, middle.data()).ok());
  EXPECT_THAT(middle, ElementsAre(50256, 65535));

  const std::vector<int32_t> large = {128255, 0, 70000, 2147483647};
  const std::string path32 = TempPath("u32.bin");
  ASSERT_TRUE(WriteLlmcShard(path32, large, /*uint32_tokens=*/true).ok());
  const std::string bytes = ReadBytes(path32);
  EXPECT_EQ(Int32At(bytes, 0), 20240801);
  EXPECT_EQ(Int32At(bytes, 4), 7);  // llm.c's Llama-3 shards are version 7
  EXPECT_EQ(bytes.size(), 1024u + 4 * 4);
  auto stream32 = OpenLlmcShard(path32);
  ASSERT_TRUE(stream32.ok()) << stream32.status();
  EXPECT_THAT(ReadAll(**stream32), ElementsAreArray(large));
}

TEST(LlmcShardTest, WriterRejectsTokensTheTypeCannotHold) {
  absl::Status status = WriteLlmcShard(TempPath("wide.bin"), {1, 70000});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(Message(status), HasSubstr("70000"));
  EXPECT_THAT(Message(status), HasSubstr("position 1"));
  EXPECT_THAT(Message(status), UserErrorShape());
  EXPECT_THAT(Message(WriteLlmcShard(TempPath("negative.bin"), {-1}, true)), UserErrorShape());
}

TEST(LlmcShardTest, ReadOutsideTheStreamIsAnError) {
  const std::string path = TempPath("range.bin");
  ASSERT_TRUE(WriteLlmcShard(path, {1, 2, 3}).ok());
  auto stream = OpenLlmcShard(path);
  ASSERT_TRUE(stream.ok());
  std::vector<int32_t> out(4);
  absl::Status status = (*stream)->Read(1, 3, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(Message(status), HasSubstr(path));
  EXPECT_FALSE((*stream)->Read(-1, 1, out.data()).ok());
  EXPECT_TRUE((*stream)->Read(3, 0, out.data()).ok());
}

TEST(LlmcShardTest, FileShorterThanTheHeader) {
  const std::string path = TempPath("short.bin");
  WriteBytes(path, std::string(100, '\0'));
  auto stream = OpenLlmcShard(path);
  ASSERT_FALSE(stream.ok());
  EXPECT_THAT(Message(stream.status()), HasSubstr(path));
  EXPECT_THAT(Message(stream.status()), HasSubstr("100 bytes"));
  EXPECT_THAT(Message(stream.status()), HasSubstr("1024-byte header"));
  EXPECT_THAT(Message(stream.status()), UserErrorShape());
  EXPECT_THAT(Message(stream.status()), HasSubstr(kNotLlmcHint));
}

TEST(LlmcShardTest, WrongMagicSaysWhatWasFoundAndExpected) {
  const std::string path = TempPath("magic.bin");
  ASSERT_TRUE(WriteLlmcShard(path, {1, 2}).ok());
  std::string bytes = ReadBytes(path);
  PutInt32(&bytes, 0, 12345);
  WriteBytes(path, bytes);
  auto stream = OpenLlmcShard(path);
  ASSERT_FALSE(stream.ok());
  EXPECT_THAT(Message(stream.status()), HasSubstr(path));
  EXPECT_THAT(Message(stream.status()), HasSubstr("magic is 12345"));
  EXPECT_THAT(Message(stream.status()), HasSubstr("20240520"));
  EXPECT_THAT(Message(stream.status()), HasSubstr("20240801"));
  EXPECT_THAT(Message(stream.status()), UserErrorShape());
  EXPECT_THAT(Message(stream.status()), HasSubstr(kNotLlmcHint));
}

TEST(LlmcShardTest, UnexpectedVersion) {
  const std::string path = TempPath("version.bin");
  ASSERT_TRUE(WriteLlmcShard(path, {1, 2}).ok());
  std::string bytes = ReadBytes(path);
  PutInt32(&bytes, 4, 3);
  WriteBytes(path, bytes);
  auto stream = OpenLlmcShard(path);
  ASSERT_FALSE(stream.ok());
  EXPECT_THAT(Message(stream.status()), HasSubstr(path));
  EXPECT_THAT(Message(stream.status()), HasSubstr("version 3"));
  EXPECT_THAT(Message(stream.status()), HasSubstr("expected version 1"));
  EXPECT_THAT(Message(stream.status()), UserErrorShape());
}

TEST(LlmcShardTest, TruncatedShardSaysWhatTheHeaderPromised) {
  const std::string path = TempPath("truncated.bin");
  ASSERT_TRUE(WriteLlmcShard(path, std::vector<int32_t>(10, 5)).ok());
  std::string bytes = ReadBytes(path);
  WriteBytes(path, bytes.substr(0, 1024 + 7 * 2));  // 3 tokens missing
  auto stream = OpenLlmcShard(path);
  ASSERT_FALSE(stream.ok());
  EXPECT_THAT(Message(stream.status()), HasSubstr(path));
  EXPECT_THAT(Message(stream.status()), HasSubstr("promises 10 tokens"));
  EXPECT_THAT(Message(stream.status()), HasSubstr("has 1038 bytes"));
  EXPECT_THAT(Message(stream.status()), UserErrorShape());
}

// A shard truncated during training (another process rewriting the data):
// the next read past the new end is an error naming the shard, where the
// mmap'd read used to raise SIGBUS and kill the process with no message.
TEST(LlmcShardTest, ShardTruncatedBetweenTwoReadsIsAnErrorNamingIt) {
  const std::string path = TempPath("truncated_while_training.bin");
  std::vector<int32_t> tokens(1 << 20);  // 2 MiB of uint16 tokens: many pages
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 50000);
  ASSERT_TRUE(WriteLlmcShard(path, tokens).ok());
  absl::StatusOr<std::unique_ptr<TokenStream>> stream = OpenTokenFiles(DataConfig::LLMC, path);
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<int32_t> out(9);
  const int64_t late = (1 << 20) - 9;
  ASSERT_TRUE((*stream)->Read(late, 9, out.data()).ok());
  EXPECT_EQ(out[0], late % 50000);
  ASSERT_EQ(truncate(path.c_str(), 1024 + 2 * 1000), 0);
  for (int64_t begin : {late, int64_t{1000}}) {  // pages past the new end, then its own page
    SCOPED_TRACE(begin);
    const absl::Status status = (*stream)->Read(begin, 9, out.data());
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(Message(status), HasSubstr("llm.c shard " + path +
                                           " shrank from 2098176 to 3024 "
                                           "bytes while tetra was reading it"));
    EXPECT_THAT(Message(status), UserErrorShape());
  }
  ASSERT_TRUE((*stream)->Read(991, 9, out.data()).ok());  // still in the file
  EXPECT_EQ(out[8], 999);
}

// Through a glob the error comes back from the shard that shrank (the
// concatenated stream used to treat a failed part read as a bug).
TEST(TokenFilesTest, AShardOfAGlobTruncatedDuringTrainingIsAnErrorNamingIt) {
  const std::string dir = TempPath("truncated_glob");
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteLlmcShard(dir + "/a.bin", std::vector<int32_t>(1 << 20, 1)).ok());
  ASSERT_TRUE(WriteLlmcShard(dir + "/b.bin", std::vector<int32_t>(1 << 20, 2)).ok());
  auto stream = OpenTokenFiles(DataConfig::LLMC, dir + "/*.bin");
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<int32_t> out(8);
  ASSERT_EQ(truncate((dir + "/b.bin").c_str(), 1024), 0);
  const absl::Status status = (*stream)->Read((1 << 20) - 4, 8, out.data());  // a's end, b's start
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("llm.c shard " + dir + "/b.bin shrank from"));
  EXPECT_TRUE((*stream)->Read(0, 8, out.data()).ok());
}

TEST(LlmcShardTest, MissingFileIsNamed) {
  const std::string path = TempPath("does_not_exist.bin");
  auto stream = OpenLlmcShard(path);
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(stream.status()), HasSubstr(path));
  EXPECT_THAT(Message(stream.status()), UserErrorShape());
  EXPECT_THAT(Message(stream.status()), HasSubstr("data.path"));
}

TEST(TokenFilesTest, GlobOfShardsIsOneStreamInNameOrder) {
  // Written out of name order, with an empty shard in the middle.
  const std::string prefix = TempPath("glob_");
  ASSERT_TRUE(WriteLlmcShard(prefix + "002.bin", {30, 31}).ok());
  ASSERT_TRUE(WriteLlmcShard(prefix + "000.bin", {10, 11, 12}).ok());
  ASSERT_TRUE(WriteLlmcShard(prefix + "001.bin", {}).ok());
  ASSERT_TRUE(WriteLlmcShard(prefix + "003.bin", {40}, /*uint32_tokens=*/true).ok());
  auto stream = OpenTokenFiles(DataConfig::LLMC, prefix + "*.bin");
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ((*stream)->size(), 6);
  EXPECT_THAT(ReadAll(**stream), ElementsAre(10, 11, 12, 30, 31, 40));
  std::vector<int32_t> across(3);
  ASSERT_TRUE((*stream)->Read(2, 3, across.data()).ok());  // spans three shards
  EXPECT_THAT(across, ElementsAre(12, 30, 31));
  TokenLocation where = (*stream)->Locate(4);
  EXPECT_EQ(where.file, prefix + "002.bin");
  EXPECT_EQ(where.position, 1);

  auto single = OpenTokenFiles(DataConfig::LLMC, prefix + "000.bin");
  ASSERT_TRUE(single.ok());
  EXPECT_THAT(ReadAll(**single), ElementsAre(10, 11, 12));
}

TEST(TokenFilesTest, GlobMatchingNothingNamesThePattern) {
  const std::string pattern = TempPath("nothing_here_*.bin");
  auto stream = OpenTokenFiles(DataConfig::LLMC, pattern);
  ASSERT_FALSE(stream.ok());
  EXPECT_THAT(Message(stream.status()), HasSubstr(pattern));
  EXPECT_THAT(Message(stream.status()), UserErrorShape());
}

TEST(TokenFilesTest, SyntheticAndEmptyPathAreErrors) {
  const std::string synthetic = Message(OpenTokenFiles(DataConfig::SYNTHETIC, "x").status());
  EXPECT_THAT(synthetic, HasSubstr("SYNTHETIC"));
  EXPECT_THAT(synthetic, UserErrorShape());
  const std::string empty = Message(OpenTokenFiles(DataConfig::LLMC, "").status());
  EXPECT_THAT(empty, HasSubstr("data.path"));
  EXPECT_THAT(empty, UserErrorShape());
}

TEST(TokenFilesTest, VocabularyCheckNamesTheShardPositionAndValue) {
  const std::string prefix = TempPath("vocab_");
  ASSERT_TRUE(WriteLlmcShard(prefix + "a.bin", {1, 2, 3, 4}).ok());
  ASSERT_TRUE(WriteLlmcShard(prefix + "b.bin", {5, 6, 60000, 7}).ok());
  // One sample of seq_length 7 holds all 8 tokens of the two shards.
  auto load = [&](int64_t vocab_size) {
    auto stream = OpenTokenFiles(DataConfig::LLMC, prefix + "?.bin");
    if (!stream.ok()) return stream.status();
    auto loader = SampleLoader::Create(*std::move(stream), 7, /*shuffle=*/false, 1, vocab_size);
    if (!loader.ok()) return loader.status();
    std::vector<int32_t> inputs(7), targets(7);
    return loader->Load(0, 1, inputs.data(), targets.data());
  };
  EXPECT_TRUE(load(60001).ok());
  absl::Status status = load(50257);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(Message(status), HasSubstr(prefix + "b.bin"));
  EXPECT_THAT(Message(status), HasSubstr("position 2 is 60000"));
  EXPECT_THAT(Message(status), HasSubstr("[0, 50257)"));
  EXPECT_THAT(Message(status), UserErrorShape());
}

TEST(TokenFilesTest, ConvertsEveryTokenTypeAndSaturatesWideValues) {
  // Bytes laid out by hand, little-endian.
  const uint8_t bytes[] = {0xff, 0xfe, 0x01, 0x80, 0x00, 0x00, 0x00, 0x80};
  int32_t out[4];
  ConvertTokens(TokenType::kUint8, bytes, 2, out);
  EXPECT_THAT(std::vector<int32_t>(out, out + 2), ElementsAre(255, 254));
  ConvertTokens(TokenType::kInt8, bytes, 2, out);
  EXPECT_THAT(std::vector<int32_t>(out, out + 2), ElementsAre(-1, -2));
  ConvertTokens(TokenType::kUint16, bytes, 2, out);
  EXPECT_THAT(std::vector<int32_t>(out, out + 2), ElementsAre(0xfeff, 0x8001));
  ConvertTokens(TokenType::kInt16, bytes, 2, out);
  EXPECT_THAT(std::vector<int32_t>(out, out + 2), ElementsAre(-257, -32767));
  ConvertTokens(TokenType::kUint32, bytes + 4, 1, out);  // 0x80000000
  EXPECT_EQ(out[0], 2147483647);
  ConvertTokens(TokenType::kInt32, bytes + 4, 1, out);
  EXPECT_EQ(out[0], -2147483647 - 1);
  ConvertTokens(TokenType::kInt64, bytes, 1, out);  // 0x8000000080 01feff: negative
  EXPECT_EQ(out[0], -2147483647 - 1);
}

}  // namespace
}  // namespace tetra
