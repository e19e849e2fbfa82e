// The op table (tests/kernels/op_cases.h) on the GPU: every case's outputs on
// the CUDA backend against the CPU reference, within each output's stated
// tolerance; and every call the op API refuses (tests/kernels/op_refusals.h)
// dies on the device as on the CPU. One gtest per case, so ctest names the
// op that fails.
#include <string>

#include "gtest/gtest.h"
#include "tests/kernels/op_cases.h"
#include "tests/kernels/op_refusals.h"
#include "tests/testing/gpu.h"

namespace tetra {
namespace {

using testing::Backend;
using testing::OpCase;

class OpTableGpuTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpTableGpuTest, MatchesTheCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  const OpCase& c = GetParam();
  const testing::Outputs want = testing::Run(c, Backend::Reference());
  const testing::Outputs got = testing::Run(c, Backend::InCaseDtype(DeviceType::kCUDA));
  testing::ExpectOutputsMatch(got, want);
}

// "linear BF16 37x48 . 29x48^T" -> "linear_BF16_37x48___29x48_T": gtest names
// are letters, digits and underscores.
template <typename Case>
std::string TestName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTableGpuTest, ::testing::ValuesIn(testing::OpCases()),
                         TestName<OpCase>);

class OpRefusalGpuDeathTest : public ::testing::TestWithParam<testing::OpRefusal> {};

TEST_P(OpRefusalGpuDeathTest, DiesAsOnTheCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child starts its own CUDA context
  EXPECT_DEATH(GetParam().call(DeviceType::kCUDA), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(Ops, OpRefusalGpuDeathTest, ::testing::ValuesIn(testing::OpRefusals()),
                         TestName<testing::OpRefusal>);

}  // namespace
}  // namespace tetra
