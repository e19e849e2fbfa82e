#include "checkpoint/safetensors.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/gradient_check.h"
#include "tests/testing/scratch_files.h"
#include "tests/testing/user_errors.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// Tolerances. F32 is copied bit for bit, so its round trip is exact. BF16
// keeps 8 significant bits; rounding to nearest errs by at most half an ulp,
// 2^-8 of the value's magnitude.
constexpr double kBf16RelError = 1.0 / 256;

using ::tetra::testing::ReadBytes;
using ::tetra::testing::WriteBytes;

// Gives each test an empty directory of its own inside this process's scratch
// directory, and removes it afterwards.
class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    dir_ = std::filesystem::path(testing::ScratchDir("safetensors_test")) / name;
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string TempPath(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

using SafetensorsTest = ScratchDirTest;

// The 8-byte little-endian header length field.
std::string LengthField(uint64_t n) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return bytes;
}

// A file with `header` as given (unpadded, so the data may start unaligned).
std::string HandWritten(const std::string& header, const std::string& data) {
  return LengthField(header.size()) + header + data;
}

std::string Uint16Bytes(const std::vector<uint16_t>& values) {
  std::string out;
  for (uint16_t v : values) {
    out.push_back(static_cast<char>(v & 0xff));
    out.push_back(static_cast<char>(v >> 8));
  }
  return out;
}

std::string FloatBytes(const std::vector<float>& values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

using testing::Message;
using testing::UserErrorShape;

TEST_F(SafetensorsTest, F32RoundTripIsBitExactAndLaidOutAsTheFormatSays) {
  const std::string path = TempPath("f32.safetensors");
  const std::vector<float> a = {
      1.0f,       -0.0f, 1e-40f /* subnormal */, 3.4e38f, std::numeric_limits<float>::infinity(),
      3.14159265f};
  const float b = 7.5f;
  const std::vector<float> c = tetra::testing::RandomVector(4 * 5, /*stream=*/1);
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"z.first", {2, 3}, a.data()},
                                {"scalar", {}, &b},
                                {"empty", {0, 4}, nullptr},
                                {"a.last", {4, 5}, c.data()}},
                               DType::kF32)
                  .ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  // Layout, read back by hand: length field, space-padded header, data in order.
  const std::string bytes = ReadBytes(path);
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + header_size + 4 * (6 + 1 + 0 + 20));
  const std::string header = bytes.substr(8, header_size);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.substr(header.find_last_of('}') + 1),
            std::string(header_size - 1 - header.find_last_of('}'), ' '));
  EXPECT_EQ(bytes.substr(8 + header_size, 24), FloatBytes(a));
  EXPECT_EQ(bytes.substr(8 + header_size + 28, 80), FloatBytes(c));

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->entries().size(), 4u);
  const std::vector<std::string> names = {"z.first", "scalar", "empty", "a.last"};
  const std::vector<Shape> shapes = {{2, 3}, {}, {0, 4}, {4, 5}};
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(file->entries()[i].name, names[i]);
    EXPECT_EQ(file->entries()[i].shape, shapes[i]);
    EXPECT_EQ(file->entries()[i].dtype, DType::kF32);
  }
  EXPECT_TRUE(file->metadata().empty());
  ASSERT_NE(file->Find("scalar"), nullptr);
  EXPECT_EQ(file->Find("scalar")->shape, Shape{});
  EXPECT_EQ(file->Find("missing"), nullptr);

  std::vector<float> got_a(6), got_c(20);
  float got_b = 0;
  ASSERT_TRUE(file->ReadF32("z.first", got_a.data()).ok());
  ASSERT_TRUE(file->ReadF32("scalar", &got_b).ok());
  ASSERT_TRUE(file->ReadF32("empty", nullptr).ok());
  ASSERT_TRUE(file->ReadF32("a.last", got_c.data()).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(Bits(got_a[i]), Bits(a[i])) << i;
  EXPECT_EQ(got_b, b);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Bits(got_c[i]), Bits(c[i])) << i;
}

TEST_F(SafetensorsTest, Bf16RoundsToNearestEven) {
  const std::string path = TempPath("bf16.safetensors");
  // Inputs with their bf16 bit patterns worked out by hand: ties go to the
  // even mantissa, anything past the tie rounds up.
  const float ulp = std::ldexp(1.0f, -7);  // bf16 spacing in [1, 2)
  const std::vector<float> inputs = {1.0f,
                                     1.0f + ulp / 2,                          // tie, 1.0 is even
                                     1.0f + 3 * ulp / 2,                      // tie, 1+2ulp is even
                                     1.0f + ulp / 2 + std::ldexp(1.0f, -20),  // past the tie
                                     -2.0f,
                                     3.14159265f};  // 0x40490fdb: low half < 0x8000
  const std::vector<uint16_t> expected_bits = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc000, 0x4049};
  const std::vector<float> random = tetra::testing::RandomVector(64, /*stream=*/2, 3.0f);
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"known", {6}, inputs.data()}, {"random", {8, 8}, random.data()}},
                               DType::kBF16)
                  .ok());

  const std::string bytes = ReadBytes(path);
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);
  ASSERT_EQ(bytes.size(), 8 + header_size + 2 * (6 + 64));
  EXPECT_EQ(bytes.substr(8 + header_size, 12), Uint16Bytes(expected_bits));
  std::vector<uint16_t> random_bits;
  for (float x : random) random_bits.push_back(FloatToBf16(x));
  EXPECT_EQ(bytes.substr(8 + header_size + 12), Uint16Bytes(random_bits));

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->Find("random")->dtype, DType::kBF16);
  std::vector<float> got(64);
  ASSERT_TRUE(file->ReadF32("random", got.data()).ok());
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(got[i], Bf16ToFloat(random_bits[i])) << i;
    EXPECT_NEAR(got[i], random[i], kBf16RelError * std::fabs(random[i])) << i;
  }
}

TEST_F(SafetensorsTest, ReadsHandWrittenF16Bf16AndF32) {
  const std::string path = TempPath("hand.safetensors");
  // Header order differs from data order, with whitespace and escapes in a
  // name; the header length (odd) leaves the data unaligned.
  const std::string header =
      "{ \"__metadata__\": {\"format\": \"pt\"},\n"
      "  \"half\": {\"dtype\": \"F16\", \"shape\": [2, 3], \"data_offsets\": [16, 28]},\n"
      "  \"q\\\"\\u00e9\\ud83d\\ude00\\/\": {\"shape\": [2], \"data_offsets\": [28, 32], "
      "\"dtype\": \"BF16\"},\n"
      "  \"single\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}  }";
  ASSERT_EQ(header.size() % 2, 1u);
  // F16: 1, -2, 2^-24 (smallest subnormal), 1023 * 2^-24 (largest subnormal),
  // 65504 (largest finite), -0.
  const std::vector<uint16_t> half = {0x3c00, 0xc000, 0x0001, 0x03ff, 0x7bff, 0x8000};
  const std::vector<float> single = {0.5f, -1.25f, 1e30f, -7.0f};
  WriteBytes(path, HandWritten(header, FloatBytes(single) + Uint16Bytes(half) +
                                           Uint16Bytes({0x3f80, 0xc0a0} /* 1, -5 */)));

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string emoji_name = "q\"\xc3\xa9\xf0\x9f\x98\x80/";
  ASSERT_EQ(file->entries().size(), 3u);
  EXPECT_EQ(file->entries()[0].name, "half");
  EXPECT_EQ(file->entries()[1].name, emoji_name);
  EXPECT_EQ(file->entries()[2].name, "single");
  EXPECT_EQ(file->entries()[0].dtype, DType::kF16);
  EXPECT_EQ(file->entries()[0].shape, (Shape{2, 3}));
  EXPECT_EQ(file->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));

  std::vector<float> got(6);
  ASSERT_TRUE(file->ReadF32("half", got.data()).ok());
  const std::vector<float> expected = {
      1.0f, -2.0f, std::ldexp(1.0f, -24), 1023 * std::ldexp(1.0f, -24), 65504.0f, -0.0f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(Bits(got[i]), Bits(expected[i])) << i;
  ASSERT_TRUE(file->ReadF32(emoji_name, got.data()).ok());
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], -5.0f);
  ASSERT_TRUE(file->ReadF32("single", got.data()).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], single[i]) << i;
}

TEST_F(SafetensorsTest, MetadataRoundTripsWithEscapes) {
  const std::string path = TempPath("meta.safetensors");
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"quote\"key", "back\\slash, newline\n, tab\t, control \x01, utf-8 \xc3\xa9"},
      {"empty", ""}};
  const float x = 2.0f;
  ASSERT_TRUE(WriteSafetensors(path, {{"x", {1}, &x}}, DType::kF32, metadata).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata(), metadata);
  ASSERT_EQ(file->entries().size(), 1u);
}

TEST_F(SafetensorsTest, ReadF32RejectsMissingNamesAndIntegerTensors) {
  const std::string path = TempPath("i32.safetensors");
  WriteBytes(path, HandWritten(R"({"ids":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
                               std::string(8, '\0')));
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->Find("ids")->dtype, DType::kI32);
  float out[2];
  absl::Status status = file->ReadF32("ids", out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("only F32, BF16 and F16"));
  EXPECT_THAT(Message(status), HasSubstr(path));
  EXPECT_THAT(Message(status), UserErrorShape());
  status = file->ReadF32("nope", out);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(status), HasSubstr("no tensor named \"nope\""));
  EXPECT_THAT(Message(status), HasSubstr(path));
  EXPECT_THAT(Message(status), UserErrorShape());
}

TEST_F(SafetensorsTest, TensorsOfDtypesTetraDoesNotReadAreListedNotFatal) {
  // An I64, a U8 and a 4-bit F4 tensor (two elements, one byte) beside an F32
  // one, as in checkpoints that carry position ids or masks.
  const std::string path = TempPath("mixed.safetensors");
  WriteBytes(path, HandWritten(R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
                               R"("w":{"dtype":"F32","shape":[1],"data_offsets":[16,20]},)"
                               R"("mask":{"dtype":"U8","shape":[3],"data_offsets":[20,23]},)"
                               R"("packed":{"dtype":"F4","shape":[2],"data_offsets":[23,24]}})",
                               std::string(16, '\0') + FloatBytes({1.5f}) +
                                   std::string("\x01\x00\x01\x00", 4)));
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->entries().size(), 4u);
  const std::vector<std::string> names = {"ids", "w", "mask", "packed"};
  const std::vector<std::string> dtype_names = {"I64", "F32", "U8", "F4"};
  const std::vector<Shape> shapes = {{2}, {1}, {3}, {2}};
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(file->entries()[i].name, names[i]);
    EXPECT_EQ(file->entries()[i].dtype_name, dtype_names[i]);
    EXPECT_EQ(file->entries()[i].shape, shapes[i]);
    EXPECT_EQ(file->entries()[i].dtype.has_value(), names[i] == "w") << names[i];
  }
  float w = 0;
  ASSERT_TRUE(file->ReadF32("w", &w).ok());
  EXPECT_EQ(w, 1.5f);
  float out[3];
  absl::Status status = file->ReadF32("ids", out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("tensor \"ids\" is I64, but only F32, BF16 and F16"));
  EXPECT_THAT(Message(status), HasSubstr(path));
  EXPECT_THAT(Message(status), UserErrorShape());
  EXPECT_THAT(Message(file->ReadF32("mask", out)), HasSubstr("is U8"));
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  const std::string path = TempPath("does_not_exist.safetensors");
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(file.status()), HasSubstr(path));
  EXPECT_THAT(Message(file.status()), UserErrorShape());
  EXPECT_THAT(Message(file.status()), HasSubstr("\nhint: check init_from"));
}

struct BadFileCase {
  std::string test_name;
  std::string bytes;
  std::string expected_message;
};

void PrintTo(const BadFileCase& c, std::ostream* os) { *os << c.test_name; }

class BadSafetensorsFileTest : public ScratchDirTest,
                               public ::testing::WithParamInterface<BadFileCase> {};

TEST_P(BadSafetensorsFileTest, OpenFailsNamingFileAndProblem) {
  const std::string path = TempPath("bad.safetensors");
  WriteBytes(path, GetParam().bytes);
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(Message(file.status()), HasSubstr(path));
  EXPECT_THAT(Message(file.status()), HasSubstr(GetParam().expected_message));
  EXPECT_THAT(Message(file.status()), UserErrorShape());
  EXPECT_THAT(Message(file.status()),
              HasSubstr("init_from must be a .safetensors file, e.g. model.safetensors from a "
                        "Hugging Face checkpoint or `tetra export`"));
}

// Byte positions in the malformed-JSON cases are counted by hand from the
// header text (0-based; the file offset adds the 8-byte length field).
const BadFileCase kBadFiles[] = {
    {"Short", std::string("\x10\0\0\0\0", 5), "5 bytes, shorter than the 8-byte header length"},
    {"HeaderPastEnd", LengthField(100) + "{}", "says 100 bytes of JSON but only 2 bytes follow"},
    {"EmptyHeader", HandWritten("", ""), "at byte 0 of the header (file offset 8)"},
    {"MissingColon", HandWritten(R"({"a" 1})", ""),
     "at byte 5 of the header (file offset 13): "
     "expected ':' after an object key"},
    {"TrailingComma", HandWritten(R"({"a":{"dtype":"F32",}})", ""),
     "at byte 20 of the header (file offset 28): expected a string key"},
    {"Fraction", HandWritten(R"({"a":1.5})", ""), "tensor \"a\" is described by a number"},
    {"BadEscape", HandWritten(R"({"a":"\q"})", ""), "at byte 7 of the header"},
    {"Unterminated", HandWritten(R"({"a":[1,2)", ""),
     "at byte 9 of the header (file offset 17): the text ends inside an array"},
    {"Literal", HandWritten(R"({"a":true})", ""), "tensor \"a\" is described by a boolean"},
    {"BadLiteral", HandWritten(R"({"a":tru})", ""), "at byte 5 of the header"},
    {"TrailingGarbage", HandWritten("{} x", ""), "at byte 3 of the header"},
    {"RawNewlineInString", HandWritten("{\"a\nb\":1}", ""),
     "at byte 3 of the header (file offset 11): unescaped control byte 0x0a"},
    {"LoneSurrogate", HandWritten(R"({"\udc00":1})", ""), "unpaired low surrogate"},
    {"BadUtf8", HandWritten("{\"\xc3(\":1}", ""), "at byte 3 of the header"},
    {"NotAnObject", HandWritten("[]", ""), "expected a JSON object"},
    {"UnknownDtype",
     HandWritten(R"({"w":{"dtype":"F9","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
     "tensor \"w\" has unknown dtype \"F9\""},
    {"UnreadableDtypeWrongSize",
     HandWritten(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
     "spanning 8 bytes, but shape [2] of F64 needs 16 bytes"},
    {"SubByteDtypeNotWholeBytes",
     HandWritten(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", std::string(2, '\0')),
     "shape [3] of F4, 12 bits, which is not whole bytes"},
    {"OffsetsPastData",
     HandWritten(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                 std::string(8, '\0')),
     "data_offsets [0, 16] outside the 8-byte data buffer"},
    {"OffsetsReversed",
     HandWritten(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", std::string(8, '\0')),
     "outside the 8-byte data buffer"},
    {"OffsetsWrongSize",
     HandWritten(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})",
                 std::string(8, '\0')),
     "spanning 8 bytes, but shape [3] of BF16 needs 6 bytes"},
    {"NegativeDim", HandWritten(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""),
     "shape entry that is not a non-negative integer"},
    {"MissingKey", HandWritten(R"({"w":{"dtype":"F32","shape":[1]}})", std::string(4, '\0')),
     "needs exactly one each of dtype, shape and data_offsets"},
    {"ExtraKey",
     HandWritten(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})",
                 std::string(4, '\0')),
     "unexpected key \"x\""},
    {"DuplicateName",
     HandWritten(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                 R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                 std::string(4, '\0')),
     "at byte 54 of the header (file offset 62): object key \"w\" appears twice"},
    {"MetadataNotStrings", HandWritten(R"({"__metadata__":{"a":1}})", ""),
     "\"__metadata__\" entry \"a\" is a number"},
};

INSTANTIATE_TEST_SUITE_P(AllCases, BadSafetensorsFileTest, ::testing::ValuesIn(kBadFiles),
                         [](const ::testing::TestParamInfo<BadFileCase>& info) {
                           return info.param.test_name;
                         });

// Hugging Face's reader (the safetensors crate's `validate`) accepts a file
// only when its tensors, sorted by offset, tile the data buffer exactly; so
// does tetra, naming the tensors or bytes at fault.
struct TilingCase {
  std::string test_name;
  std::string header;
  size_t data_bytes;
  std::string expected_message;
};

void PrintTo(const TilingCase& c, std::ostream* os) { *os << c.test_name; }

class SafetensorsTilingTest : public ScratchDirTest,
                              public ::testing::WithParamInterface<TilingCase> {};

TEST_P(SafetensorsTilingTest, RefusedNamingTheTensorsOrBytes) {
  const std::string path = TempPath("tiling.safetensors");
  WriteBytes(path, HandWritten(GetParam().header, std::string(GetParam().data_bytes, '\0')));
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(Message(file.status()), HasSubstr(path));
  EXPECT_THAT(Message(file.status()), HasSubstr(GetParam().expected_message));
  EXPECT_THAT(Message(file.status()), UserErrorShape());
  EXPECT_THAT(Message(file.status()),
              HasSubstr("hint: Hugging Face's safetensors library refuses"));
}

// Two F32 tensors of shape [2] (8 bytes each) at the offsets given.
std::string TwoTensors(int a_begin, int b_begin) {
  return absl::StrFormat(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[%d,%d]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[%d,%d]}})",
                         a_begin, a_begin + 8, b_begin, b_begin + 8);
}

const TilingCase kTilingCases[] = {
    {"Overlapping", TwoTensors(0, 4), 12,
     R"(tensors "a" (data_offsets [0, 8]) and "b" (data_offsets [4, 12]) overlap: the second )"
     "begins at byte 4, before the first ends at byte 8"},
    {"Aliased", TwoTensors(0, 0), 8,
     R"(tensors "a" (data_offsets [0, 8]) and "b" (data_offsets [0, 8]) overlap)"},
    {"EmptyTensorInsideAnother",
     R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
     R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
     8, R"(and "e" (data_offsets [4, 4]) overlap)"},
    {"HoleBetween", TwoTensors(0, 12), 20,
     R"(bytes [8, 12) of the data buffer belong to no tensor (a hole before "b")"},
    {"HoleAtTheStart", TwoTensors(16, 8), 24,
     R"(bytes [0, 8) of the data buffer belong to no tensor (a hole before "b")"},
    {"TrailingBytes", TwoTensors(8, 0), 20,
     R"(the data buffer has 4 bytes after the last tensor, "a" (data_offsets [8, 16]))"},
    {"DataButNoTensors", R"({"__metadata__":{"format":"pt"}})", 4,
     "the header lists no tensors but 4 data bytes follow it"},
};

INSTANTIATE_TEST_SUITE_P(AllCases, SafetensorsTilingTest, ::testing::ValuesIn(kTilingCases),
                         [](const ::testing::TestParamInfo<TilingCase>& info) {
                           return info.param.test_name;
                         });

TEST_F(SafetensorsTest, TensorsInAnyHeaderOrderThatTileTheBufferOpen) {
  // Header order is not offset order; empty tensors may sit at any boundary.
  const std::string path = TempPath("tiled.safetensors");
  WriteBytes(path, HandWritten(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                               R"("e":{"dtype":"BF16","shape":[0],"data_offsets":[4,4]},)"
                               R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("z":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]}})",
                               FloatBytes({1.0f, 2.0f})));
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  float b = 0;
  ASSERT_TRUE(file->ReadF32("b", &b).ok());
  EXPECT_EQ(b, 2.0f);
}

// A hostile header's names are user text: messages quote a short prefix of
// them (UserText), so a 1 MB key never floods the terminal.
TEST_F(SafetensorsTest, AHugeKeyIsQuotedShort) {
  const std::string key(1 << 20, 'k');
  const std::string path = TempPath("huge_key.safetensors");
  for (const std::string& header :
       {R"({")" + key + R"(":{"dtype":"F9","shape":[1],"data_offsets":[0,4]}})",
        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],")" + key + R"(":1}})",
        R"({"__metadata__":{")" + key + R"(":1}})",
        R"({"w":{"dtype":")" + key + R"(","shape":[1],"data_offsets":[0,4]}})",
        R"({")" + key + R"(":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)" +
            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})"}) {
    WriteBytes(path, HandWritten(header, std::string(4, '\0')));
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok());
    EXPECT_THAT(Message(file.status()), HasSubstr("\"kkkkkkkk"));
    EXPECT_THAT(Message(file.status()), HasSubstr("... (1048576 bytes)"));
    EXPECT_LT(Message(file.status()).size(), 1000u);
    EXPECT_THAT(Message(file.status()), UserErrorShape());
  }
  // ReadF32 of a name that is not there quotes it short too.
  const float x = 1.0f;
  ASSERT_TRUE(WriteSafetensors(path, {{"w", {1}, &x}}, DType::kF32).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  float out;
  EXPECT_LT(Message(file->ReadF32(key, &out)).size(), 1000u);
}

// As in Hugging Face's reader: a header over 100 MB is refused before it is
// parsed (the JSON parser's memory grows with it).
TEST_F(SafetensorsTest, AHeaderOverTheFormatsLimitIsRefused) {
  const std::string path = TempPath("huge_header.safetensors");
  WriteBytes(path, LengthField(100'000'002) + "[");
  std::filesystem::resize_file(path, 8 + 100'000'002);  // sparse: no 100 MB write
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(Message(file.status()),
              HasSubstr("the header length field says 100000002 bytes of JSON, more than the "
                        "format's limit of 100000000"));
  EXPECT_THAT(Message(file.status()), UserErrorShape());
}

// Weights rewritten while tetra loads them: an error naming the file, not a
// SIGBUS from the mapping.
TEST_F(SafetensorsTest, AFileTruncatedAfterOpenIsAnErrorOnRead) {
  const std::string path = TempPath("truncated_after_open.safetensors");
  const std::vector<float> big(1 << 20, 1.0f);  // 4 MiB: many pages
  ASSERT_TRUE(WriteSafetensors(path, {{"big", {1 << 20}, big.data()}}, DType::kF32).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(truncate(path.c_str(), 1000), 0);
  std::vector<float> out(1 << 20);
  const absl::Status status = file->ReadF32("big", out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("safetensors file " + path + " shrank from"));
  EXPECT_THAT(Message(status), UserErrorShape());
}

TEST_F(SafetensorsTest, WriteRejectsBadRequestsAndUnwritablePaths) {
  const float x = 1.0f;
  const std::string path = TempPath("reject.safetensors");
  absl::Status status = WriteSafetensors(path, {{"a", {1}, &x}, {"a", {1}, &x}}, DType::kF32);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("\"a\" appears twice"));
  EXPECT_THAT(Message(status), HasSubstr(path));
  EXPECT_THAT(Message(status), UserErrorShape());
  status = WriteSafetensors(path, {{"a", {1}, &x}}, DType::kF16);
  EXPECT_THAT(Message(status), HasSubstr("F32 or BF16"));
  EXPECT_THAT(Message(status), UserErrorShape());
  EXPECT_FALSE(std::filesystem::exists(path));

  const std::string unwritable = TempPath("no_such_dir/w.safetensors");
  status = WriteSafetensors(unwritable, {{"a", {1}, &x}}, DType::kF32);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(Message(status), HasSubstr(unwritable));
  EXPECT_THAT(Message(status), UserErrorShape());
}

TEST_F(SafetensorsTest, WriteReplacesAnExistingFileWhole) {
  const std::string path = TempPath("replace.safetensors");
  const std::vector<float> big(100, 1.0f);
  const float small = 3.0f;
  ASSERT_TRUE(WriteSafetensors(path, {{"big", {100}, big.data()}}, DType::kF32).ok());
  ASSERT_TRUE(WriteSafetensors(path, {{"small", {1}, &small}}, DType::kBF16).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->entries().size(), 1u);
  float got = 0;
  ASSERT_TRUE(file->ReadF32("small", &got).ok());
  EXPECT_EQ(got, 3.0f);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

}  // namespace
}  // namespace tetra
