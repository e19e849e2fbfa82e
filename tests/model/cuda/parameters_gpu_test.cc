// A GPU run's weights are drawn in their slots of the device's flat buffers
// (ParameterStore::Pack): the same values as the CPU's (but for a rare last
// bit of the double log/cos), sharded or not, ones and zeros included, and
// zero gradients, with no host copy of them.
#include <cmath>

#include "gtest/gtest.h"
#include "model/parameters.h"
#include "tests/testing/gpu.h"

namespace tetra {
namespace {

struct Added {
  const char* name;
  Shape shape;
  Init init;
  TensorShard shard;
};

// The store of `params` packed under `placement`, values read to the host.
std::vector<Tensor> PackedValues(const std::vector<Added>& params, const Placement& placement,
                                 std::vector<Tensor>* grads) {
  const ScopedPlacement scope(placement);
  ParameterStore store(17);
  for (const Added& a : params) store.Add(a.name, a.shape, a.init, 0.02, a.shard);
  store.Pack();
  std::vector<Tensor> values;
  for (const Parameter& p : store.all()) {
    EXPECT_EQ(p.value.device(), placement.device) << p.name;
    values.push_back(OnHost(p.value).Clone());
    if (grads) grads->push_back(OnHost(p.grad).Clone());
  }
  return values;
}

TEST(ParameterStoreGpuTest, WeightsAreDrawnOnTheDeviceAsOnTheCpu) {
  TETRA_SKIP_WITHOUT_GPU();
  const std::vector<Added> params = {
      {"model.embed_tokens.weight", {1000, 96}, Init::kNormal, {}},
      {"q_proj.weight", {96, 64}, Init::kNormal, {0, 1, 2, 1}},  // rows 48..95
      {"o_proj.weight", {64, 96}, Init::kNormal, {1, 1, 2, 1}},  // columns 48..95
      {"norm.weight", {64}, Init::kOnes, {}},
      {"bias", {7}, Init::kZeros, {}},
  };
  const std::vector<Tensor> cpu = PackedValues(params, {}, nullptr);
  std::vector<Tensor> grads;
  const std::vector<Tensor> gpu =
      PackedValues(params, {.device = DeviceType::kCUDA, .compute = DType::kBF16}, &grads);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(gpu[i].shape(), cpu[i].shape()) << params[i].name;
    int64_t far = 0, nonzero_grads = 0;
    for (int64_t e = 0; e < cpu[i].numel(); ++e) {
      // Philox's bits are the same; CUDA's double log/cos may differ from
      // glibc's by an ulp or two, which moves a rare fp32 value by its last bit.
      far += std::fabs(gpu[i].f32()[e] - cpu[i].f32()[e]) > 2.4e-7 * std::fabs(cpu[i].f32()[e]);
      nonzero_grads += grads[i].f32()[e] != 0.0f;
    }
    EXPECT_EQ(far, 0) << params[i].name;
    EXPECT_EQ(nonzero_grads, 0) << params[i].name;
  }
}

}  // namespace
}  // namespace tetra
