// Element counts of shapes: NumElements is for shapes already known to fit
// (an overflow there is a bug and crashes), CheckedNumElements for shapes
// read from files, where a negative dim or an overflowing product is an
// answer, not undefined behaviour. And the host side of device copies:
// OnHost hands a host tensor back as it is, and PinnedHost is usable host
// memory wherever it comes from (ordinary memory without a GPU).
#include "core/tensor.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace tetra {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(NumElementsTest, MultipliesTheDims) {
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({2, 3, 4}), 24);
  EXPECT_EQ(NumElements({5, 0, kMax}), 0);
  EXPECT_EQ(NumElements({kMax}), kMax);
  EXPECT_EQ(NumElements({int64_t{1} << 31, int64_t{1} << 31}), int64_t{1} << 62);
}

TEST(NumElementsTest, CheckedNumElementsRefusesOverflowAndNegativeDims) {
  EXPECT_EQ(CheckedNumElements({2, 3}), 6);
  EXPECT_EQ(CheckedNumElements({}), 1);
  EXPECT_EQ(CheckedNumElements({kMax, 0}), 0);
  EXPECT_EQ(CheckedNumElements({int64_t{1} << 32, int64_t{1} << 31}), std::nullopt);
  EXPECT_EQ(CheckedNumElements({kMax, 2}), std::nullopt);
  EXPECT_EQ(CheckedNumElements({3, -1}), std::nullopt);
}

TEST(NumElementsDeathTest, OverflowIsABugThatCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(NumElements({int64_t{1} << 32, int64_t{1} << 32}), "more elements than int64 holds");
  EXPECT_DEATH(NumElements({kMax, 2}), "more elements than int64 holds");
}

TEST(OnHostTest, AHostTensorIsItsOwnHostCopy) {
  std::vector<float> values = {1, 2};
  const Tensor host = Tensor::View(values.data(), {2}, DType::kF32);
  EXPECT_EQ(OnHost(host).raw(), host.raw());
}

TEST(OnHostTest, PinnedHostHoldsValuesOfEverySize) {
  for (const int64_t n : {int64_t{3}, int64_t{1} << 19}) {  // below and above the page-locking size
    const Tensor pinned = Tensor::PinnedHost({n}, DType::kI32);
    EXPECT_EQ(pinned.device(), DeviceType::kCPU);
    for (int64_t i = 0; i < n; ++i) pinned.data<int32_t>()[i] = static_cast<int32_t>(i);
    EXPECT_EQ(pinned.data<int32_t>()[n - 1], n - 1);
  }
}

}  // namespace
}  // namespace tetra
