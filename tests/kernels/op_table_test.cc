// The op table (tests/kernels/op_cases.h) on the CPU, where every machine can
// run it: each case runs, produces finite outputs, and gives the same bits
// when run again (the reference must be deterministic for the device
// comparison in tests/kernels/cuda/op_table_gpu_test.cc to mean anything);
// and the CPU on the case's own dtype (bf16 tensors in, bf16 out, as a bf16
// run on the CPU computes) matches the reference within the case's tolerance;
// and every call the device refuses (tests/kernels/op_refusals.h) dies on
// the CPU too, naming the rule.
#include <cmath>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "kernels/op_list.h"
#include "kernels/op_profile.h"
#include "tests/kernels/op_cases.h"
#include "tests/kernels/op_refusals.h"

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

// The op list (kernels/op_list.h), which the op profile sums by kind, names
// every op the cases run (the profile dies on an op it lacks) and no op the
// cases leave out.
TEST(OpTableTest, CasesRunEveryListedOpAndNoOther) {
  ops::EnableOpProfile();
  for (const OpCase& c : testing::OpCases()) testing::Run(c, Backend::Reference());
  for (const ops::OpEntry& op : ops::OpList()) {
    EXPECT_GT(ops::OpProfileCalls(std::string(op.name).c_str()), 0)
        << op.name << " is listed in kernels/op_list.cc but no op case runs it";
  }
}

TEST(OpTableTest, EveryCaseRunsOnTheCpuDeterministically) {
  const Backend cpu = Backend::Reference();
  for (const OpCase& c : testing::OpCases()) {
    SCOPED_TRACE(c.name);
    const Outputs first = testing::Run(c, cpu), second = testing::Run(c, cpu);
    ASSERT_FALSE(first.all().empty());
    ASSERT_EQ(first.all().size(), second.all().size());
    for (size_t o = 0; o < first.all().size(); ++o) {
      const testing::Output& a = first.all()[o];
      EXPECT_FALSE(a.values.empty()) << a.name;
      EXPECT_NE(std::string(a.tolerance.reason), "")
          << a.name << " has a tolerance without a reason";
      for (double v : a.values) ASSERT_TRUE(std::isfinite(v)) << a.name;
      EXPECT_EQ(a.values, second.all()[o].values) << a.name;
    }
  }
}

TEST(OpTableTest, TheCpuOnEachCaseDtypeMatchesTheReference) {
  int narrow_cases = 0;
  for (const OpCase& c : testing::OpCases()) {
    SCOPED_TRACE(c.name);
    if (c.name.find("BF16") != std::string::npos) ++narrow_cases;
    testing::ExpectOutputsMatch(testing::Run(c, Backend::InCaseDtype(DeviceType::kCPU)),
                                testing::Run(c, Backend::Reference()));
  }
  EXPECT_GT(narrow_cases, 10);
}

TEST(OpTableDeathTest, TheCpuRefusesWhatTheDeviceRefuses) {
  const std::vector<testing::OpRefusal> refusals = testing::OpRefusals();
  EXPECT_GT(refusals.size(), 15u);
  for (const testing::OpRefusal& r : refusals) {
    SCOPED_TRACE(r.name);
    EXPECT_DEATH(r.call(DeviceType::kCPU), r.message);
  }
}

// A (rows, 0) view is rows of no columns: no work, not a division by zero.
TEST(OpTableTest, ZeroWidthRowsAreNoWork) {
  const Tensor y = testing::HostRandom({3, 0}, 1);
  ops::AddBias(testing::HostRandom({0}, 2), y);
  ops::BiasGradient(y, testing::HostRandom({0}, 3));
  EXPECT_EQ(y.numel(), 0);
}

}  // namespace
}  // namespace tetra
