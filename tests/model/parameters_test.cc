#include "model/parameters.h"

#include <cstring>

#include "core/philox.h"
#include "gtest/gtest.h"
#include "kernels/cpu/threads.h"

namespace tetra {
namespace {

// Every shard of a parameter is exactly its slice of the unsharded tensor,
// whichever dim is split: the layout-independence of initialisation.
TEST(ParameterStoreTest, ShardsDrawTheirSliceOfTheGlobalTensor) {
  const Shape global = {6, 4};
  ParameterStore whole_store(11);
  const Tensor whole = whole_store.Add("w", global, Init::kNormal, 0.02).value;
  for (int dim : {0, 1}) {
    for (int index = 0; index < 2; ++index) {
      ParameterStore store(11);
      const Parameter& p = store.Add("w", global, Init::kNormal, 0.02, {dim, index, 2, 1});
      ASSERT_EQ(p.value.shape(), dim == 0 ? (Shape{3, 4}) : (Shape{6, 2}));
      for (int64_t i = 0; i < p.value.numel(); ++i) {
        const int64_t row = i / p.value.dim(1), col = i % p.value.dim(1);
        const int64_t g = dim == 0 ? (row + 3 * index) * 4 + col : row * 4 + col + 2 * index;
        EXPECT_EQ(p.GlobalIndex(i), g);
        EXPECT_EQ(p.value.f32()[i], whole.f32()[g]) << "dim " << dim << " slice " << index;
      }
    }
  }
}

// A padded dim 0 (a vocabulary padded for GEMM tiles): 5 rows padded to 8
// over 2 slices of 4, or to 16; each slice holds its real rows first, drawn
// as the unpadded tensor's, then padding rows of 0 that map to no global
// element. The second slice of 16 holds padding only.
TEST(ParameterStoreTest, PaddedSlicesHoldRealRowsThenZeros) {
  const Shape global = {5, 3};
  ParameterStore whole_store(11);
  const Tensor whole = whole_store.Add("w", global, Init::kNormal, 0.02).value;
  struct Case {
    int64_t padded;
    int index, count;
    int64_t real_rows;
  };
  for (const Case& c : {Case{8, 0, 2, 4}, Case{8, 1, 2, 1}, Case{8, 0, 1, 5}, Case{16, 1, 2, 0}}) {
    SCOPED_TRACE(::testing::Message()
                 << "padded " << c.padded << " slice " << c.index << " of " << c.count);
    ParameterStore store(11);
    const Parameter& p =
        store.Add("w", global, Init::kNormal, 0.02,
                  {.dim = 0, .index = c.index, .count = c.count, .padded_extent = c.padded});
    ASSERT_EQ(p.value.shape(), (Shape{c.padded / c.count, 3}));
    EXPECT_EQ(p.RealElements(), c.real_rows * 3);
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      const int64_t row = i / 3 + c.index * (c.padded / c.count);
      const int64_t g = row < 5 ? row * 3 + i % 3 : -1;
      EXPECT_EQ(p.GlobalIndex(i), g) << i;
      EXPECT_EQ(p.value.f32()[i], g < 0 ? 0.0f : whole.f32()[g]) << i;
    }
  }
}

// Initialisation is split over threads (it is a minute of Box-Muller draws
// for a 1B model on one core) without changing a bit: element i of a shard
// is the named stream's draw for its global index, whatever the thread count.
TEST(ParameterStoreTest, InitialValuesDoNotDependOnTheThreadCount) {
  const Shape global = {512, 96};  // a shard of 24576 elements: enough to split
  const CounterRng rng(5, StableHash("w"));
  const int threads_before = cpu::CpuThreads();
  for (int threads : {1, 3}) {
    cpu::SetCpuThreads(threads);
    ParameterStore store(5);
    const Parameter& p = store.Add("w", global, Init::kNormal, 0.02, {1, 1, 2, 1});
    int64_t differ = 0;
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      differ += p.value.f32()[i] != static_cast<float>(0.02 * rng.Normal(p.GlobalIndex(i)));
    }
    EXPECT_EQ(differ, 0) << threads << " threads";
  }
  cpu::SetCpuThreads(threads_before);
}

TEST(ParameterStoreTest, PackKeepsValuesAndSharesOneBuffer) {
  ParameterStore store(3);
  Parameter& a = store.Add("a", {5, 3}, Init::kNormal, 1.0);
  Parameter& b = store.Add("b", {7}, Init::kOnes);
  const Tensor a_before = a.value.Clone();
  a.grad.f32()[2] = 4.0f;
  store.Pack();
  EXPECT_EQ(std::memcmp(a.value.raw(), a_before.raw(), a_before.nbytes()), 0);
  EXPECT_EQ(a.grad.f32()[2], 4.0f);
  EXPECT_EQ(b.value.f32()[6], 1.0f);
  EXPECT_EQ(a.flat_offset, 0);
  EXPECT_EQ(b.flat_offset, 16);  // 15 floats rounded up to a 64-byte slot
  EXPECT_EQ(store.flat_values().f32() + b.flat_offset, b.value.f32());
  store.ZeroGrads();
  EXPECT_EQ(a.grad.f32()[2], 0.0f);
}

TEST(ParameterStoreTest, AtFlatOffsetNamesTheParameterOfAFlatElement) {
  ParameterStore store(3);
  store.Add("a", {5, 3}, Init::kOnes);  // slot [0, 15), padded to 16
  store.Add("b", {7}, Init::kOnes);     // slot [16, 23)
  store.Pack();
  EXPECT_EQ(store.AtFlatOffset(0).name, "a");
  EXPECT_EQ(store.AtFlatOffset(14).name, "a");
  EXPECT_EQ(store.AtFlatOffset(16).name, "b");
  EXPECT_EQ(store.AtFlatOffset(22).name, "b");
}

TEST(ParameterStoreTest, AtFlatOffsetSearchesTheExpertBufferApart) {
  ParameterStore store(3);
  store.Add("dense_a", {5}, Init::kOnes);   // dense slot [0, 5)
  store.Add("expert_a", {4}, Init::kOnes);  // expert slot [0, 4)
  store.Add("dense_b", {3}, Init::kOnes);   // dense slot [16, 19)
  store.Add("expert_b", {2}, Init::kOnes);  // expert slot [16, 18)
  store.all()[1].expert = store.all()[3].expert = true;
  store.Pack();
  EXPECT_EQ(store.AtFlatOffset(4).name, "dense_a");
  EXPECT_EQ(store.AtFlatOffset(17).name, "dense_b");
  EXPECT_EQ(store.AtFlatOffset(3, /*expert=*/true).name, "expert_a");
  EXPECT_EQ(store.AtFlatOffset(17, /*expert=*/true).name, "expert_b");
}

TEST(ParameterStoreTest, StackedViewsAdjacentSlotsAsOneTensor) {
  ParameterStore store(3);
  Parameter& gate = store.Add("gate", {3, 16}, Init::kNormal, 1.0);  // 48 floats: no padding
  Parameter& up = store.Add("up", {2, 16}, Init::kNormal, 1.0);
  Parameter& odd = store.Add("odd", {3, 5}, Init::kOnes);  // 15 floats, padded to 16
  Parameter& after_odd = store.Add("after_odd", {1, 5}, Init::kOnes);
  Parameter& wide = store.Add("wide", {1, 32}, Init::kOnes);  // adjacent to after_odd's padded slot
  EXPECT_FALSE(store.Stacked({&gate, &up}).has_value()) << "before Pack()";
  store.Pack();

  const std::optional<StackedParameters> stacked = store.Stacked({&gate, &up});
  ASSERT_TRUE(stacked.has_value());
  EXPECT_EQ(stacked->value.shape(), (Shape{5, 16}));
  EXPECT_EQ(stacked->value.raw(), gate.value.raw());
  EXPECT_EQ(stacked->grad.raw(), gate.grad.raw());
  EXPECT_EQ(stacked->compute.raw(), gate.compute.raw());
  EXPECT_EQ(stacked->value.f32() + 3 * 16, up.value.f32());
  stacked->grad.f32()[3 * 16] = 2.0f;  // up's first element
  EXPECT_EQ(up.grad.f32()[0], 2.0f);

  EXPECT_FALSE(store.Stacked({&odd, &after_odd}).has_value()) << "padding between the slots";
  EXPECT_FALSE(store.Stacked({&up, &gate}).has_value()) << "not in registration order";
  EXPECT_FALSE(store.Stacked({&gate, &odd}).has_value()) << "not adjacent, shapes differ";
  EXPECT_TRUE(store.Stacked({&after_odd}).has_value());
  EXPECT_FALSE(store.Stacked({&after_odd, &wide}).has_value()) << "padding, shapes differ";
}

TEST(ParameterStoreTest, StackedSharesTheBf16ComputeCopies) {
  const ScopedPlacement bf16({DeviceType::kCPU, DType::kBF16});
  ParameterStore store(3);
  Parameter& gate = store.Add("gate", {4, 8}, Init::kNormal, 1.0);
  Parameter& up = store.Add("up", {4, 8}, Init::kNormal, 1.0);
  store.Pack();
  const std::optional<StackedParameters> stacked = store.Stacked({&gate, &up});
  ASSERT_TRUE(stacked.has_value());
  EXPECT_EQ(stacked->compute.dtype(), DType::kBF16);
  EXPECT_EQ(stacked->compute.shape(), (Shape{8, 8}));
  EXPECT_EQ(stacked->compute.raw(), gate.compute.raw());
  EXPECT_EQ(stacked->compute.data<uint16_t>() + 4 * 8, up.compute.data<uint16_t>());
}

}  // namespace
}  // namespace tetra
