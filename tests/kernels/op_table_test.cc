// The op table (tests/kernels/op_cases.h) on the CPU, where every machine can
// run it: each case runs, produces finite outputs, and gives the same bits
// when run again (the reference must be deterministic for the device
// comparison in tests/kernels/cuda/op_table_gpu_test.cc to mean anything).
#include <cmath>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "tests/kernels/op_cases.h"

namespace tetra {
namespace {

using testing::Backend;
using testing::OpCase;
using testing::Outputs;

TEST(OpTableTest, NamesAreUnique) {
  std::set<std::string> names;
  for (const OpCase& c : testing::OpCases()) EXPECT_TRUE(names.insert(c.name).second) << c.name;
  EXPECT_GT(names.size(), 30u);
}

TEST(OpTableTest, EveryCaseRunsOnTheCpuDeterministically) {
  const Backend cpu(DeviceType::kCPU);
  for (const OpCase& c : testing::OpCases()) {
    SCOPED_TRACE(c.name);
    const Outputs first = testing::Run(c, cpu), second = testing::Run(c, cpu);
    ASSERT_FALSE(first.all().empty());
    ASSERT_EQ(first.all().size(), second.all().size());
    for (size_t o = 0; o < first.all().size(); ++o) {
      const testing::Output& a = first.all()[o];
      EXPECT_FALSE(a.values.empty()) << a.name;
      EXPECT_NE(std::string(a.tolerance.reason), "") << a.name << " has a tolerance without a reason";
      for (double v : a.values) ASSERT_TRUE(std::isfinite(v)) << a.name;
      EXPECT_EQ(a.values, second.all()[o].values) << a.name;
    }
  }
}

}  // namespace
}  // namespace tetra
