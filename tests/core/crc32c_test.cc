#include "core/crc32c.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tetra {
namespace {

// Published check values: RFC 3720 (iSCSI) appendix B.4 and the CRC catalogue.
TEST(Crc32cTest, MatchesPublishedCheckValues) {
  const std::string digits = "123456789";
  EXPECT_EQ(Crc32c(digits.data(), digits.size()), 0xE3069283u);
  const std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xFF);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::vector<uint8_t> ascending(32);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
}

TEST(Crc32cTest, PiecewiseEqualsWhole) {
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  const uint32_t whole = Crc32c(bytes.data(), bytes.size());
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    const uint32_t first = Crc32c(bytes.data(), cut);
    EXPECT_EQ(Crc32c(bytes.data() + cut, bytes.size() - cut, first), whole) << "cut " << cut;
  }
}

// TFRecord's mask, computed by hand: rotr15(0xE3069283) + 0xA282EAD8 mod 2^32.
TEST(Crc32cTest, MaskRotatesAndAdds) {
  const uint32_t crc = 0xE3069283u;
  const uint32_t rotated = (crc >> 15) | (crc << 17);
  EXPECT_EQ(rotated, 0x2507C60Du);
  EXPECT_EQ(MaskCrc32c(crc), static_cast<uint32_t>(0x2507C60Du + 0xA282EAD8u));
}

}  // namespace
}  // namespace tetra
