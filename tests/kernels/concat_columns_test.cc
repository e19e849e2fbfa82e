#include <vector>

#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"

namespace tetra {
namespace {

Tensor Iota(int64_t rows, int64_t cols, float first) {
  Tensor t = Tensor::Empty({rows, cols});
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = first + static_cast<float>(i);
  return t;
}

TEST(ConcatColumnsTest, RowsAreJoinedLeftThenRight) {
  const Tensor a = Iota(3, 2, 0), b = Iota(3, 3, 100);
  Tensor out = Tensor::Empty({3, 5});
  ops::ConcatColumns(a, b, out);
  const std::vector<float> expected = {0,   1,   100, 101, 102, 2,   3,  103,
                                       104, 105, 4,   5,   106, 107, 108};
  EXPECT_EQ(std::vector<float>(out.f32(), out.f32() + out.numel()), expected);

  Tensor left = Tensor::Empty({3, 2}), right = Tensor::Empty({3, 3});
  ops::SplitColumns(out, left, right);
  EXPECT_EQ(std::vector<float>(left.f32(), left.f32() + 6),
            std::vector<float>(a.f32(), a.f32() + 6));
  EXPECT_EQ(std::vector<float>(right.f32(), right.f32() + 9),
            std::vector<float>(b.f32(), b.f32() + 9));
}

TEST(ConcatColumnsDeathTest, MismatchedShapesAreABug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor out = Tensor::Empty({3, 6});
  EXPECT_DEATH(ops::ConcatColumns(Iota(3, 2, 0), Iota(3, 3, 0), out), "concat_columns");
}

}  // namespace
}  // namespace tetra
