// TensorBoard event files read back by a TFRecord reader written here: each
// record's length, its masked CRC-32C, the data's masked CRC-32C (computed by
// a bitwise CRC-32C below, independent of core/crc32c), and the Event parse.
#include "observe/tensorboard_writer.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>

#include "core/json.h"
#include "gtest/gtest.h"
#include "proto/tensorboard_event.pb.h"
#include "tests/testing/scratch_files.h"

namespace tetra {
namespace {

// Tolerances: scalars travel as float (TensorBoard's simple_value), so a
// double metric comes back rounded to float: relative error <= 2^-24.
constexpr double kFloatRelative = 6e-8;

// CRC-32C bit by bit (reflected polynomial 0x82F63B78), and TFRecord's mask.
uint32_t BitwiseCrc32c(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t Masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t LittleEndian(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i)
    value = value << 8 | static_cast<unsigned char>(bytes[at + i]);
  return value;
}

// Reads every record; nullopt when a length or CRC check fails.
std::optional<std::vector<tensorboard::Event>> ReadEvents(const std::string& bytes) {
  std::vector<tensorboard::Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) return std::nullopt;
    const uint64_t length = LittleEndian(bytes, at, 8);
    if (LittleEndian(bytes, at + 8, 4) != Masked(BitwiseCrc32c(bytes.substr(at, 8))))
      return std::nullopt;
    if (bytes.size() - at - 12 < length + 4) return std::nullopt;
    const std::string data = bytes.substr(at + 12, length);
    if (LittleEndian(bytes, at + 12 + length, 4) != Masked(BitwiseCrc32c(data)))
      return std::nullopt;
    tensorboard::Event event;
    if (!event.ParseFromString(data)) return std::nullopt;
    events.push_back(event);
    at += 12 + length + 4;
  }
  return events;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(TensorBoardWriterTest, ReaderGetsBackEveryScalarAndRejectsACorruptByte) {
  const std::string dir = testing::ScratchDir("tensorboard_writer_test") + "/events";
  std::filesystem::remove_all(dir);
  auto writer = TensorBoardWriter::Open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ(
      std::filesystem::path(writer->path()).filename().string().rfind("events.out.tfevents.", 0),
      0u);
  std::vector<StepMetrics> steps(2);
  for (int i = 0; i < 2; ++i) {
    steps[i].step = i + 1;
    steps[i].loss = 3.25 - i * 0.1;
    steps[i].lr = 3e-4;
    steps[i].grad_norm = 1.5;
    steps[i].tokens_per_s = 12345.678;
    steps[i].tflops = 0.0125;
    steps[i].step_time_s = 0.2;
    steps[i].mfu = 0.41;
    ASSERT_TRUE(writer->Write(steps[i]).ok());
  }
  const std::string bytes = ReadFile(writer->path());
  const auto events = ReadEvents(bytes);
  ASSERT_TRUE(events.has_value()) << "a length or CRC check failed";
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].file_version(), "brain.Event:2");
  for (int i = 0; i < 2; ++i) {
    const tensorboard::Event& e = (*events)[i + 1];
    EXPECT_EQ(e.step(), i + 1);
    EXPECT_GT(e.wall_time(), 1.6e9);  // seconds since 1970, after 2020
    std::map<std::string, double> got;
    for (const auto& v : e.summary().value()) got[v.tag()] = v.simple_value();
    const std::map<std::string, double> want = {{"loss", steps[i].loss},
                                                {"lr", 3e-4},
                                                {"grad_norm", 1.5},
                                                {"tokens_per_s", 12345.678},
                                                {"tflops", 0.0125},
                                                {"step_time_s", 0.2},
                                                {"mfu", 0.41}};
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [tag, value] : want) {
      ASSERT_TRUE(got.count(tag)) << tag;
      EXPECT_NEAR(got[tag], value, value * kFloatRelative) << tag;
    }
  }
  // Any flipped byte (length, its CRC, data or data CRC) fails a check.
  for (size_t at : {size_t{3}, size_t{9}, size_t{20}, bytes.size() - 2}) {
    std::string corrupt = bytes;
    corrupt[at] ^= 0x10;
    EXPECT_FALSE(ReadEvents(corrupt).has_value()) << "byte " << at;
  }
}

// Every number of the metrics JSON line but the step (TensorBoard's x axis),
// the run's layout on the first line included, is a TensorBoard scalar.
TEST(TensorBoardWriterTest, EveryNumberOfTheMetricsLineIsAScalar) {
  // A new StepMetrics field changes its size: set it below, so this test
  // checks it reaches TensorBoard, then update the size.
  static_assert(sizeof(StepMetrics) == 552, "StepMetrics has a new field: set it in this test");
  const std::string dir = ::testing::TempDir() + "tensorboard_every_metric";
  std::filesystem::remove_all(dir);
  auto writer = TensorBoardWriter::Open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  StepMetrics m;
  m.step = 7;
  int next = 1;
  for (double* v : {&m.loss, &m.lr, &m.grad_norm, &m.tokens_per_s, &m.tflops, &m.step_time_s})
    *v = next++;
  for (std::optional<double>* v : {&m.mfu,
                                   &m.loss_floor,
                                   &m.val_loss,
                                   &m.param_bytes,
                                   &m.grad_bytes,
                                   &m.optimizer_bytes,
                                   &m.comm_exposed_s_dp,
                                   &m.bubble_fraction,
                                   &m.fwd_s,
                                   &m.bwd_s,
                                   &m.optimizer_s,
                                   &m.comm_exposed_s,
                                   &m.comm_exposed_s_tp,
                                   &m.comm_exposed_s_ep,
                                   &m.comm_exposed_s_pp,
                                   &m.peak_memory_bytes,
                                   &m.aux_loss,
                                   &m.moe_load_imbalance,
                                   &m.dropped_tokens,
                                   &m.all_to_all_bytes,
                                   &m.device_mallocs,
                                   &m.device_launches,
                                   &m.host_waits,
                                   &m.device_allocations,
                                   &m.mtp_loss,
                                   &m.checkpoint_stall_s,
                                   &m.straggler_ratio}) {
    *v = next++;
  }
  m.slowest_rank = next++;
  m.run = RunLayout{MeshShape::Of(2, 2, 2), 16, 2, 128, 1};
  m.run->virtual_stages = 2;
  ASSERT_TRUE(writer->Write(m).ok());
  const auto events = ReadEvents(ReadFile(writer->path()));
  ASSERT_TRUE(events.has_value());
  ASSERT_EQ(events->size(), 2u);
  std::map<std::string, double> scalars;
  for (const auto& v : (*events)[1].summary().value()) scalars[v.tag()] = v.simple_value();

  absl::StatusOr<JsonValue> line = ParseJson(MetricsJson(m));
  ASSERT_TRUE(line.ok()) << line.status();
  std::set<std::string> numbers;
  for (size_t i = 0; i < line->keys.size(); ++i) {
    if (line->keys[i] == "step" || line->items[i].kind != JsonValue::Kind::kNumber) continue;
    numbers.insert(line->keys[i]);
    ASSERT_TRUE(scalars.count(line->keys[i]))
        << line->keys[i] << " is in the metrics but not in TensorBoard";
    EXPECT_EQ(scalars[line->keys[i]], line->items[i].number) << line->keys[i];
  }
  EXPECT_EQ(numbers.size(), scalars.size());
  // Every field StepMetrics has, set above, and the layout's 11 numbers.
  EXPECT_EQ(numbers.size(), 34u + 11u);
  EXPECT_EQ(scalars["virtual_stages"], 2);
}

TEST(TensorBoardWriterTest, RecordFramingMatchesTheFormat) {
  const std::string record = TfRecord("abc");
  ASSERT_EQ(record.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(LittleEndian(record, 0, 8), 3u);
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(LittleEndian(record, 15, 4), Masked(BitwiseCrc32c("abc")));
  // The bitwise CRC itself: RFC 3720's check value of "123456789".
  EXPECT_EQ(BitwiseCrc32c("123456789"), 0xE3069283u);
}

}  // namespace
}  // namespace tetra
