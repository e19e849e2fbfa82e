#include "core/user_error.h"

#include <string>

#include "gtest/gtest.h"

namespace tetra {
namespace {

TEST(UserTextTest, ShortTextIsQuotedWhole) {
  EXPECT_EQ(UserText("tp-cp-ep-dp-pp"), "\"tp-cp-ep-dp-pp\"");
  EXPECT_EQ(UserText(""), "\"\"");
}

TEST(UserTextTest, LongTextIsCutToItsPrefixWithItsLength) {
  const std::string key(1 << 20, 'k');
  const std::string shown = UserText(key, 8);
  EXPECT_EQ(shown, "\"kkkkkkkk\"... (1048576 bytes)");
}

TEST(UserTextTest, ControlQuoteAndNonAsciiBytesAreEscaped) {
  EXPECT_EQ(UserText(std::string("a\nb\"c\\d\xff", 8)), "\"a\\x0ab\\\"c\\\\d\\xff\"");
}

}  // namespace
}  // namespace tetra
