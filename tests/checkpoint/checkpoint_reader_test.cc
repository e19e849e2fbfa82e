// CheckpointReader on checkpoints built here by hand (not by the writer): a
// (4, 6) tensor whose global element g holds 100 + g, split one way into
// column halves, and the right half further cut into two flat pieces (as
// ZeRO-1 cuts moments). Any box must come back with exactly its global
// values; damage must be an error naming the file and the tensor.
#include "checkpoint/checkpoint_reader.h"

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_files.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::tetra::testing::Message;
using ::tetra::testing::ReadBytes;
using ::tetra::testing::UserErrorShape;
using ::tetra::testing::WriteBytes;

constexpr int64_t kRows = 4, kCols = 6;

float GlobalValue(int64_t row, int64_t col) {
  return 100.0f + static_cast<float>(row * kCols + col);
}

std::vector<DimRange> Box(int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  std::vector<DimRange> box(2);
  box[0].set_begin(r0);
  box[0].set_end(r1);
  box[1].set_begin(c0);
  box[1].set_end(c1);
  return box;
}

class CheckpointReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tetra::testing::ScratchDir("checkpoint_reader_test") + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
    manifest_.set_format_version(kCheckpointFormatVersion);
    tensor_ = manifest_.add_tensors();
    tensor_->set_name("w");
    tensor_->add_shape(kRows);
    tensor_->add_shape(kCols);
    // a.bin: the left half (columns 0..2) whole. b.bin: 8 bytes of padding,
    // then the right half's row-major elements [5, 12), then [0, 5).
    AddShard("a.bin", 0, 0, 3, 0, 12);
    AddShard("b.bin", 8 + 7 * 4, 3, 6, 0, 5);
    AddShard("b.bin", 8, 3, 6, 5, 12);
    WriteBytes(dir_ + "/a.bin", files_["a.bin"]);
    WriteBytes(dir_ + "/b.bin", std::string(8, 'x') + files_["b.bin/5"] + files_["b.bin/0"]);
    WriteManifest();
  }

  // A shard of elements [flat_begin, flat_end) of the column box [c0, c1).
  void AddShard(const std::string& file, uint64_t offset, int64_t c0, int64_t c1,
                int64_t flat_begin, int64_t flat_end) {
    std::string bytes;
    for (int64_t i = flat_begin; i < flat_end; ++i) {
      const float v = GlobalValue(i / (c1 - c0), c0 + i % (c1 - c0));
      bytes.append(reinterpret_cast<const char*>(&v), sizeof(v));
    }
    ShardRecord* shard = tensor_->add_shards();
    shard->set_file(file);
    shard->set_offset(offset);
    shard->set_bytes(bytes.size());
    for (const DimRange& r : Box(0, kRows, c0, c1)) *shard->add_box() = r;
    shard->set_flat_begin(flat_begin);
    shard->set_flat_end(flat_end);
    shard->set_crc32c(ShardCrc32c(*tensor_, *shard, bytes.data()));
    files_[file == "a.bin" ? file : file + "/" + std::to_string(flat_begin)] = bytes;
  }
  // `manifest` (manifest_ by default) and the COMPLETE marker holding its checksum.
  void WriteManifest() { WriteManifest(manifest_); }
  void WriteManifest(const CheckpointManifest& manifest) {
    const std::string bytes = manifest.SerializeAsString();
    WriteBytes(dir_ + "/" + kManifestFileName, bytes);
    WriteBytes(dir_ + "/" + kCompleteMarkerName, CompleteMarkerText(7, bytes));
  }
  // A copy of w's records as the tensor `name` of `kind`, over the same
  // bytes, with the checksums a writer would give it.
  TensorRecord* AddCopyOfW(const std::string& name, TensorRecord::Kind kind) {
    TensorRecord* copy = manifest_.add_tensors();
    *copy = *tensor_;
    copy->set_name(name);
    copy->set_kind(kind);
    for (ShardRecord& shard : *copy->mutable_shards()) {
      const std::string bytes =
          ReadBytes(dir_ + "/" + shard.file()).substr(shard.offset(), shard.bytes());
      shard.set_crc32c(ShardCrc32c(*copy, shard, bytes.data()));
    }
    return copy;
  }

  absl::Status ReadAll() {
    absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(dir_);
    if (!reader.ok()) return reader.status();
    return reader->ReadGlobal(*reader->Find("w", TensorRecord::WEIGHT)).status();
  }

  std::string dir_;
  CheckpointManifest manifest_;
  TensorRecord* tensor_;
  std::map<std::string, std::string> files_;
};

TEST_F(CheckpointReaderTest, AnyBoxComesBackWithItsGlobalValues) {
  absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(dir_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const TensorRecord* w = reader->Find("w", TensorRecord::WEIGHT);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(reader->Find("w", TensorRecord::EXP_AVG), nullptr);
  absl::StatusOr<Tensor> global = reader->ReadGlobal(*w);
  ASSERT_TRUE(global.ok()) << global.status();
  ASSERT_EQ(global->shape(), (Shape{kRows, kCols}));
  for (int64_t g = 0; g < kRows * kCols; ++g)
    EXPECT_EQ(global->f32()[g], GlobalValue(g / kCols, g % kCols));
  // A box across both halves and both pieces of the right half.
  absl::StatusOr<Tensor> box = reader->ReadBox(*w, Box(1, 3, 2, 5));
  ASSERT_TRUE(box.ok()) << box.status();
  ASSERT_EQ(box->shape(), (Shape{2, 3}));
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(box->f32()[r * 3 + c], GlobalValue(1 + r, 2 + c));
  }
}

TEST_F(CheckpointReaderTest, FlippedByteIsAnErrorNamingFileAndTensor) {
  std::string bytes = ReadBytes(dir_ + "/b.bin");
  bytes[8 + 7 * 4 + 1] ^= 0x01;  // inside the piece [0, 5) of the right half
  WriteBytes(dir_ + "/b.bin", bytes);
  const absl::Status status = ReadAll();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("checkpoint file " + dir_ +
                                          "/b.bin is corrupt: \"w\" (weight) at bytes [36, 56)"));
  // A box that never touches the damaged piece still reads.
  absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(dir_);
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE(reader->ReadBox(*reader->Find("w", TensorRecord::WEIGHT), Box(0, 4, 0, 3)).ok());
}

TEST_F(CheckpointReaderTest, TruncatedFileIsAnErrorNamingFileAndTensor) {
  std::filesystem::resize_file(dir_ + "/b.bin", 50);
  EXPECT_THAT(ReadAll().message(),
              HasSubstr("checkpoint file " + dir_ +
                        "/b.bin is truncated: \"w\" (weight) needs 20 bytes at "
                        "offset 36 but the file has 50"));
  std::filesystem::remove(dir_ + "/a.bin");
  EXPECT_THAT(ReadAll().message(),
              HasSubstr("cannot read checkpoint file " + dir_ + "/a.bin: No such file"));
}

TEST_F(CheckpointReaderTest, UncoveredElementsAreAnError) {
  tensor_->mutable_shards()->RemoveLast();  // the piece [5, 12) of the right half
  WriteManifest();
  EXPECT_THAT(ReadAll().message(),
              HasSubstr("holds only 17 of the 24 elements of \"w\" (weight) in [0:4, 0:6]"));
}

TEST_F(CheckpointReaderTest, InconsistentOrDamagedManifestIsAnError) {
  tensor_->mutable_shards(0)->set_bytes(44);  // 12 elements need 48
  WriteManifest();
  EXPECT_THAT(ReadAll().message(),
              HasSubstr("is inconsistent: a shard of \"w\" (weight) in file \"a.bin\""));
  tensor_->mutable_shards(0)->set_bytes(48);
  tensor_->mutable_shards(0)->mutable_box(1)->set_end(7);  // past the 6 columns
  WriteManifest();
  EXPECT_THAT(ReadAll().message(), HasSubstr("is inconsistent"));
  manifest_.set_format_version(kCheckpointFormatVersion + 1);
  WriteManifest();
  EXPECT_THAT(ReadAll().message(), HasSubstr("has format version 3, this tetra reads version 2"));
  manifest_.set_format_version(1);  // before shard checksums covered their records
  WriteManifest();
  EXPECT_THAT(ReadAll().message(), HasSubstr("has format version 1, this tetra reads version 2"));
  WriteBytes(dir_ + "/" + kManifestFileName, "\xff\xff\xff garbage");
  EXPECT_THAT(ReadAll().message(), HasSubstr("is corrupt: it does not parse"));
  std::filesystem::remove(dir_ + "/" + kManifestFileName);
  EXPECT_THAT(ReadAll().message(),
              HasSubstr("cannot read checkpoint manifest " + dir_ + "/manifest.pb"));
}

// A tensor record no data could fill: a negative dim, a shape whose element
// count overflows int64 (or whose F32 bytes would), or one that claims far
// more elements than its shards or files hold. Each is an error naming the
// tensor, found before anything of that size is allocated.
TEST_F(CheckpointReaderTest, ShapesNoDataCanFillAreErrorsNamingTheTensor) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<std::vector<int64_t>> shapes = {
      {-1},   {kMax}, {int64_t{1} << 32, int64_t{1} << 32}, {int64_t{1} << 62}, {1000000, 1000000},
      {3, -2}};
  for (const std::vector<int64_t>& shape : shapes) {
    CheckpointManifest manifest = manifest_;
    TensorRecord* big = manifest.add_tensors();
    big->set_name("big");
    for (int64_t extent : shape) big->add_shape(extent);
    WriteManifest(manifest);
    absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(dir_);
    absl::Status status = reader.status();
    if (reader.ok())
      status = reader->ReadGlobal(*reader->Find("big", TensorRecord::WEIGHT)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << ShapeString(shape) << ": " << status;
    EXPECT_THAT(Message(status), HasSubstr("\"big\" (weight)")) << ShapeString(shape);
    EXPECT_THAT(Message(status), UserErrorShape());
  }
}

// A shard that claims 4e12 bytes of a 48-byte file: the reader checks the
// file before it allocates the tensor.
TEST_F(CheckpointReaderTest, ShardLargerThanItsFileIsFoundBeforeAllocating) {
  constexpr int64_t kElements = 1000000000000;
  TensorRecord* big = manifest_.add_tensors();
  big->set_name("big");
  big->add_shape(kElements);
  ShardRecord* shard = big->add_shards();
  shard->set_file("a.bin");
  shard->set_bytes(kElements * 4);
  shard->add_box()->set_end(kElements);
  shard->set_flat_end(kElements);
  WriteManifest();
  absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(dir_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const absl::Status status =
      reader->ReadGlobal(*reader->Find("big", TensorRecord::WEIGHT)).status();
  EXPECT_THAT(Message(status), HasSubstr("checkpoint file " + dir_ +
                                         "/a.bin is truncated: \"big\" (weight) needs "
                                         "4000000000000 bytes at offset 0 but the file has 48"));
}

// A flat range of 2^62 elements whose byte count, 2^64, wraps to 0 in uint64.
TEST_F(CheckpointReaderTest, ByteCountsThatWrapAreInconsistent) {
  TensorRecord* big = manifest_.add_tensors();
  big->set_name("big");
  big->add_shape(int64_t{1} << 62);
  ShardRecord* shard = big->add_shards();
  shard->set_file("a.bin");
  shard->set_bytes(0);
  shard->add_box()->set_end(int64_t{1} << 62);
  shard->set_flat_end(int64_t{1} << 62);
  WriteManifest();
  absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(dir_);
  absl::Status status = reader.status();
  if (reader.ok()) status = reader->ReadGlobal(*reader->Find("big", TensorRecord::WEIGHT)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(Message(status), HasSubstr("\"big\" (weight)"));
}

// Counts in a manifest are the records it holds, so a file cannot claim more
// than its bytes: a length prefix saying 10^12 bytes of tensor records in a
// file of a few dozen is an error, not an allocation.
TEST_F(CheckpointReaderTest, ManifestClaimingMoreThanItsBytesIsCorrupt) {
  std::string bytes = manifest_.SerializeAsString();
  bytes += '\x2a';                  // field 5 (tensors), length-delimited
  uint64_t length = 1000000000000;  // as a varint: 7 bits a byte, low first
  for (; length >= 0x80; length >>= 7) bytes += static_cast<char>((length & 0x7f) | 0x80);
  bytes += static_cast<char>(length);
  bytes += "short";
  WriteBytes(dir_ + "/" + kManifestFileName, bytes);
  WriteBytes(dir_ + "/" + kCompleteMarkerName, CompleteMarkerText(7, bytes));
  const absl::Status status = CheckpointReader::Open(dir_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("is corrupt: it does not parse"));
}

TEST_F(CheckpointReaderTest, TensorListedTwiceIsAnError) {
  *manifest_.add_tensors() = *tensor_;
  WriteManifest();
  const absl::Status status = CheckpointReader::Open(dir_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("lists \"w\" (weight) twice"));
}

TEST_F(CheckpointReaderTest, ManifestThatIsADirectoryIsAnError) {
  std::filesystem::remove(dir_ + "/" + kManifestFileName);
  std::filesystem::create_directory(dir_ + "/" + kManifestFileName);
  const absl::Status status = CheckpointReader::Open(dir_).status();
  EXPECT_THAT(Message(status), HasSubstr("checkpoint manifest " + dir_ +
                                         "/manifest.pb is a directory, not a "
                                         "regular file"));
  EXPECT_THAT(Message(status), UserErrorShape());
}

// Records swapped in the manifest leave every data byte as it was; each
// shard's checksum covers its record, so the swap is corruption naming the
// tensor, even when the manifest's own checksum was rewritten to match.
TEST_F(CheckpointReaderTest, SwappedNamesAreCorruptionNamingTheTensor) {
  TensorRecord* v = AddCopyOfW("v", TensorRecord::WEIGHT);
  WriteManifest();
  ASSERT_TRUE(ReadAll().ok());
  v->set_name("w");
  tensor_->set_name("v");
  WriteManifest();
  const absl::Status status = ReadAll();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("checkpoint file " + dir_ +
                                         "/a.bin is corrupt: \"w\" (weight) at bytes [0, 48)"));
  EXPECT_THAT(Message(status), UserErrorShape());
}

TEST_F(CheckpointReaderTest, SwappedMomentsAreCorruptionNamingTheTensor) {
  TensorRecord* m = AddCopyOfW("w", TensorRecord::EXP_AVG);
  TensorRecord* v = AddCopyOfW("w", TensorRecord::EXP_AVG_SQ);
  WriteManifest();
  m->set_kind(TensorRecord::EXP_AVG_SQ);
  v->set_kind(TensorRecord::EXP_AVG);
  WriteManifest();
  absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(dir_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const absl::Status status =
      reader->ReadGlobal(*reader->Find("w", TensorRecord::EXP_AVG)).status();
  EXPECT_THAT(Message(status), HasSubstr("is corrupt: \"w\" (exp_avg) at bytes [0, 48)"));
}

// The manifest is checked against the checksum its COMPLETE marker holds.
TEST_F(CheckpointReaderTest, ManifestAlteredAfterItsMarkerIsCorrupt) {
  const std::string marker = ReadBytes(dir_ + "/" + kCompleteMarkerName);
  manifest_.mutable_state()->set_step(99);
  WriteManifest();
  WriteBytes(dir_ + "/" + kCompleteMarkerName, marker);
  absl::Status status = ReadAll();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("checkpoint manifest " + dir_ +
                                         "/manifest.pb is corrupt: its bytes have "
                                         "CRC-32C "));
  EXPECT_THAT(Message(status), HasSubstr(" but " + dir_ + "/COMPLETE says "));
  EXPECT_THAT(Message(status), UserErrorShape());
  WriteBytes(dir_ + "/" + kCompleteMarkerName, "step 7\n");
  EXPECT_THAT(Message(ReadAll()), HasSubstr("the completion marker " + dir_ +
                                            "/COMPLETE holds no valid "
                                            "manifest_crc32c line"));
  std::filesystem::remove(dir_ + "/" + kCompleteMarkerName);
  std::filesystem::create_directory(dir_ + "/" + kCompleteMarkerName);
  EXPECT_THAT(Message(ReadAll()), HasSubstr("completion marker " + dir_ +
                                            "/COMPLETE is a directory, not a "
                                            "regular file"));
  // A save that died before its marker: the manifest reads, unchecked (the
  // reader's callers skip such a directory or say so).
  std::filesystem::remove(dir_ + "/" + kCompleteMarkerName);
  EXPECT_TRUE(ReadAll().ok());
}

// Shapes in a damaged manifest are checked before anything multiplies them
// (NumElements would overflow) or allocates them: a tensor of 2^40 elements
// that no file holds is an error, not a 4 TB allocation.
TEST_F(CheckpointReaderTest, ShapesThatOverflowOrThatNoFileHoldsAreErrors) {
  tensor_->set_shape(0, int64_t{1} << 32);
  tensor_->set_shape(1, int64_t{1} << 32);
  WriteManifest();
  EXPECT_THAT(
      ReadAll().message(),
      HasSubstr("gives \"w\" (weight) the shape [4294967296, 4294967296], which no tensor has"));
  tensor_->set_shape(0, -4);
  WriteManifest();
  EXPECT_THAT(ReadAll().message(), HasSubstr("the shape [-4, 4294967296]"));

  tensor_->set_shape(0, int64_t{1} << 40);
  tensor_->set_shape(1, kCols);
  WriteManifest();
  EXPECT_THAT(ReadAll().message(),
              HasSubstr("holds only 24 of the 6597069766656 elements of \"w\" (weight)"));
  // One shard claiming all of it, in a file far too small.
  tensor_->clear_shards();
  ShardRecord* shard = tensor_->add_shards();
  shard->set_file("a.bin");
  shard->set_bytes((int64_t{1} << 40) * kCols * 4);
  *shard->add_box() = Box(0, 1, 0, kCols)[0];
  shard->mutable_box(0)->set_end(int64_t{1} << 40);
  *shard->add_box() = Box(0, 1, 0, kCols)[1];
  shard->set_flat_end((int64_t{1} << 40) * kCols);
  WriteManifest();
  EXPECT_THAT(ReadAll().message(),
              HasSubstr("a.bin is truncated: \"w\" (weight) needs 26388279066624 bytes at offset 0 "
                        "but the file has 48"));
  // An offset near 2^64 does not wrap around the size check.
  tensor_->set_shape(0, kRows);
  shard->mutable_box(0)->set_end(kRows);
  shard->set_flat_end(kRows * kCols);
  shard->set_bytes(kRows * kCols * 4);
  shard->set_offset(~uint64_t{0} - 8);
  WriteManifest();
  EXPECT_THAT(ReadAll().message(),
              HasSubstr("is inconsistent: a shard of \"w\" (weight) in file \"a.bin\""));
}

TEST(CheckpointReader3dTest, PiecesCutMidRowReadIntoAnInnerBox) {
  // A (3, 4, 5) tensor, element g = 1000 + g: dim 1 split in halves, the
  // second half cut into flat pieces [0, 7) and [7, 30) (mid-row), one file.
  const std::string dir = tetra::testing::ScratchDir("checkpoint_reader_test") + "/3d";
  std::filesystem::create_directories(dir);
  const Shape shape = {3, 4, 5};
  CheckpointManifest manifest;
  manifest.set_format_version(kCheckpointFormatVersion);
  TensorRecord* tensor = manifest.add_tensors();
  tensor->set_name("t");
  tensor->set_kind(TensorRecord::EXP_AVG);
  for (int64_t e : shape) tensor->add_shape(e);
  std::string file;
  auto add = [&](int64_t c0, int64_t flat_begin, int64_t flat_end) {
    ShardRecord* shard = tensor->add_shards();
    std::vector<DimRange> box(3);
    box[0].set_end(3);
    box[1].set_begin(c0);
    box[1].set_end(c0 + 2);
    box[2].set_end(5);
    std::string bytes;
    for (int64_t i = flat_begin; i < flat_end; ++i) {  // (3, 2, 5) box, row-major
      const float v = 1000.0f + static_cast<float>(((i / 10) * 4 + c0 + i / 5 % 2) * 5 + i % 5);
      bytes.append(reinterpret_cast<const char*>(&v), sizeof(v));
    }
    for (const DimRange& r : box) *shard->add_box() = r;
    shard->set_file("r.bin");
    shard->set_offset(file.size());
    shard->set_bytes(bytes.size());
    shard->set_flat_begin(flat_begin);
    shard->set_flat_end(flat_end);
    shard->set_crc32c(ShardCrc32c(*tensor, *shard, bytes.data()));
    file += bytes;
  };
  add(0, 0, 30);
  add(2, 7, 30);
  add(2, 0, 7);
  WriteBytes(dir + "/r.bin", file);
  WriteBytes(dir + "/" + kManifestFileName, manifest.SerializeAsString());
  absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<DimRange> box(3);
  const int64_t begin[3] = {1, 1, 2}, end[3] = {3, 4, 5};
  for (int d = 0; d < 3; ++d) {
    box[d].set_begin(begin[d]);
    box[d].set_end(end[d]);
  }
  absl::StatusOr<Tensor> read = reader->ReadBox(*reader->Find("t", TensorRecord::EXP_AVG), box);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->shape(), (Shape{2, 3, 3}));
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t b = 0; b < 3; ++b) {
      for (int64_t c = 0; c < 3; ++c) {
        const int64_t g = ((1 + a) * 4 + 1 + b) * 5 + 2 + c;
        EXPECT_EQ(read->f32()[(a * 3 + b) * 3 + c], 1000.0f + static_cast<float>(g)) << a << b << c;
      }
    }
  }
}

TEST(CheckpointFormatTest, ShardBoxOfATensorParallelSlice) {
  EXPECT_EQ(BoxString(ShardBox({4, 6}, {.dim = 1, .index = 1, .count = 2})), "[0:4, 3:6]");
  EXPECT_EQ(BoxString(ShardBox({4, 6}, {.dim = 0, .index = 3, .count = 4})), "[3:4, 0:6]");
  EXPECT_EQ(BoxString(ShardBox({8}, {})), "[0:8]");
  EXPECT_EQ(BoxNumElements(ShardBox({4, 6}, {.dim = 1, .index = 0, .count = 3})), 8);
}

}  // namespace
}  // namespace tetra
