#include "core/json.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tetra {
namespace {

using ::testing::HasSubstr;

JsonValue Parse(const std::string& text) {
  absl::StatusOr<JsonValue> value = ParseJson(text);
  EXPECT_TRUE(value.ok()) << text << ": " << value.status();
  return value.ok() ? *value : JsonValue();
}

TEST(JsonTest, ReadsAHuggingFaceConfig) {
  const JsonValue config = Parse(R"({
    "architectures": ["LlamaForCausalLM"], "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}, "tie_word_embeddings": false,
    "bos_token_id": 128000, "eos_token_id": [128001, 128009], "pretraining_tp": 1,
    "attention_dropout": 0.0, "sliding_window": null, "max_position_embeddings": -1})");
  ASSERT_EQ(config.kind, JsonValue::Kind::kObject);
  EXPECT_EQ(config.keys.size(), 11u);
  EXPECT_EQ(config.Find("architectures")->items[0].string, "LlamaForCausalLM");
  EXPECT_EQ(config.Find("rms_norm_eps")->number, 1e-5);
  EXPECT_FALSE(config.Find("rms_norm_eps")->integer.has_value());
  EXPECT_EQ(config.Find("rope_theta")->number, 500000.0);
  EXPECT_FALSE(config.Find("rope_theta")->integer.has_value());  // written with a fraction
  EXPECT_EQ(config.Find("rope_scaling")->Find("rope_type")->string, "llama3");
  EXPECT_EQ(config.Find("tie_word_embeddings")->kind, JsonValue::Kind::kBool);
  EXPECT_FALSE(config.Find("tie_word_embeddings")->boolean);
  EXPECT_EQ(*config.Find("bos_token_id")->integer, 128000);
  EXPECT_EQ(config.Find("eos_token_id")->items.size(), 2u);
  EXPECT_EQ(config.Find("sliding_window")->kind, JsonValue::Kind::kNull);
  EXPECT_EQ(*config.Find("max_position_embeddings")->integer, -1);
  EXPECT_EQ(config.Find("absent"), nullptr);
  EXPECT_EQ(config.Find("architectures")->Find("x"), nullptr);  // not an object
}

TEST(JsonTest, IntegersAreExactBeyondDoublePrecision) {
  const JsonValue v = Parse("[9007199254740993, -9223372036854775808, 9223372036854775808]");
  EXPECT_EQ(*v.items[0].integer, 9007199254740993);  // 2^53 + 1: not a double
  EXPECT_EQ(*v.items[1].integer, INT64_MIN);
  EXPECT_FALSE(v.items[2].integer.has_value());  // 2^63 does not fit: a number only
  EXPECT_EQ(v.items[2].number, 9223372036854775808.0);
}

TEST(JsonTest, StringsDecodeEscapesAndUtf8) {
  const JsonValue v = Parse(R"(["q\"\\\/\b\f\n\r\t", "\u00e9\ud83d\ude00", "é"])");
  EXPECT_EQ(v.items[0].string, "q\"\\/\b\f\n\r\t");
  EXPECT_EQ(v.items[1].string, "\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.items[2].string, "\xc3\xa9");
}

TEST(JsonTest, AppendJsonStringRoundTrips) {
  const std::string original = "a\"b\\c\nd\x01\xc3\xa9";
  std::string literal;
  AppendJsonString(original, &literal);
  EXPECT_EQ(literal, "\"a\\\"b\\\\c\\nd\\u0001\xc3\xa9\"");
  EXPECT_EQ(Parse(literal).string, original);
}

struct BadJson {
  std::string text;
  size_t offset;
  std::string message;
};

TEST(JsonTest, MalformedTextSaysWhereAndWhat) {
  // Offsets counted by hand from the text (0-based).
  const BadJson cases[] = {
      {"", 0, "ends where a value was expected"},
      {"{\"a\" 1}", 5, "expected ':'"},
      {"[1,]", 3, "expected a JSON value"},
      {"{\"a\":1,}", 7, "expected a string key"},
      {"{\"a\":1,\"a\":2}", 7, "object key \"a\" appears twice"},
      {"01", 0, "leading zeros"},
      {"1.", 2, "after the decimal point"},
      {"1e", 2, "in the exponent"},
      {"-", 1, "expected a digit"},
      {"1e400", 0, "out of the range of a double"},
      {"nul", 0, "expected a JSON value"},
      {"true false", 5, "unexpected characters after the JSON value"},
      {"\"a\nb\"", 2, "unescaped control byte 0x0a"},
      {"\"\\udc00\"", 7, "unpaired low surrogate"},
      {"\"\xc3(\"", 2, "invalid UTF-8 continuation byte"},
      {"[1, 2", 5, "ends inside an array"},
      {std::string(100, '['), 65, "nested deeper than 64 levels"},
  };
  for (const BadJson& c : cases) {
    size_t offset = 12345;
    absl::StatusOr<JsonValue> value = ParseJson(c.text, &offset);
    ASSERT_FALSE(value.ok()) << c.text;
    EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(value.status().message()), HasSubstr(c.message)) << c.text;
    EXPECT_EQ(offset, c.offset) << c.text;
  }
}

TEST(JsonTest, ADuplicateKeyIsQuotedShort) {
  const std::string key(1 << 20, 'k');
  absl::StatusOr<JsonValue> value = ParseJson("{\"" + key + "\":1,\"" + key + "\":2}");
  ASSERT_FALSE(value.ok());
  EXPECT_LT(value.status().message().size(), 200u);
  EXPECT_THAT(std::string(value.status().message()), HasSubstr("(1048576 bytes)"));
}

}  // namespace
}  // namespace tetra
