// A weight that carries a low-rank update (core/low_rank.h, a LoRA in the runtime mode): every
// product that reads it gives the product with the merged weight W + up · down, through what
// placement does to a weight (conversions, a slice of its rows or columns, stacked copies), and
// ops that would lose the update refuse the weight instead.
#include "core/error.h"
#include "core/low_rank.h"

#include <gtest/gtest.h>

#include "core/ops.h"
#include "core/safetensors.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

struct Case {
  Tensor weight, merged;  // W with its update; W + up · down
  std::shared_ptr<const LowRankUpdate> update;
};

Case make_case(int64_t out, int64_t in, int64_t rank, uint64_t seed) {
  Case c;
  const Tensor w = dit::random_tensor({out, in}, 0.0f, 0.5f, seed, DType::F32);
  const Tensor down = dit::random_tensor({rank, in}, 0.0f, 0.5f, seed + 1, DType::F32);
  const Tensor up = dit::random_tensor({out, rank}, 0.0f, 0.5f, seed + 2, DType::F32);
  c.update = std::make_shared<const LowRankUpdate>(LowRankUpdate{down, up});
  c.weight = w.with_low_rank(c.update);
  c.merged = w.clone();
  const Tensor delta = ops::linear(up, down.permute({1, 0}).contiguous());
  ops::add_(c.merged, delta);
  return c;
}

TEST(LowRank, AProductAddsItsWeightsUpdate) {
  const Case c = make_case(24, 40, 3, 7);
  const Tensor x = dit::random_tensor({5, 40}, 0.0f, 1.0f, 11, DType::F32);
  const Tensor bias = dit::random_tensor({24}, 0.0f, 1.0f, 12, DType::F32);
  const Tensor expected = ops::linear(x, c.merged, bias);
  EXPECT_LT(testing::max_abs_diff(ops::linear(x, c.weight, bias), expected), 1e-5);
  EXPECT_LT(testing::max_abs_diff(ops::linear(x, c.weight, bias, DType::F32), expected), 1e-5);
  // The activation applies to the sum (act(x·Wᵀ + b + update)), not before the update.
  const Tensor activated = ops::linear(x, c.weight, bias, DType::F32, Activation::GeluTanh);
  EXPECT_LT(testing::max_abs_diff(activated,
                                  ops::linear(x, c.merged, bias, DType::F32, Activation::GeluTanh)),
            1e-5);
  // Without its update the product is the plain weight's, far from the merged one.
  EXPECT_GT(testing::max_abs_diff(ops::linear(x, c.weight.without_low_rank(), bias), expected),
            1e-1);
}

TEST(LowRank, PlacementCarriesTheUpdate) {
  const Case c = make_case(16, 32, 2, 21);
  const Tensor x = dit::random_tensor({3, 32}, 0.0f, 1.0f, 22, DType::F32);
  const Tensor expected = ops::linear(x, c.merged);
  // A bf16 copy (the update stays float32 on the host): the bf16 weight's own rounding only.
  const Tensor bf16 = c.weight.to(DType::BF16);
  ASSERT_TRUE(bf16.low_rank());
  EXPECT_LT(testing::max_abs_diff(ops::linear(x, bf16), expected), 5e-2);
  EXPECT_TRUE(c.weight.clone().low_rank());
  EXPECT_TRUE(c.weight.contiguous().low_rank());
  // Column slices (FLUX's single-block output projection, cut in two) and row slices.
  const Tensor left = c.weight.slice(1, 0, 12).contiguous(), right = c.weight.slice(1, 12, 32);
  Tensor split = ops::linear(x.slice(1, 0, 12).contiguous(), left);
  ops::add_(split, ops::linear(x.slice(1, 12, 32).contiguous(), right.contiguous()));
  EXPECT_LT(testing::max_abs_diff(split, expected), 1e-5);
  const Tensor rows = ops::linear(x, c.weight.slice(0, 4, 10));
  EXPECT_LT(testing::max_abs_diff(rows, expected.slice(1, 4, 10).contiguous()), 1e-5);
  // Stacked for linear_each, each keeps its own update.
  const Case other = make_case(16, 32, 3, 31);
  const std::vector<Tensor> stacked =
      ops::stack_weights({c.weight, other.weight}, DType::F32, Device::CPU);
  const std::vector<Tensor> each = ops::linear_each(x, stacked, DType::F32);
  EXPECT_LT(testing::max_abs_diff(each[0], expected), 1e-5);
  EXPECT_LT(testing::max_abs_diff(each[1], ops::linear(x, other.merged)), 1e-5);
  // What would lose the update refuses the weight.
  EXPECT_THROW(c.weight.permute({1, 0}), Error);
  EXPECT_THROW(c.weight.view({32, 16}), Error);
  EXPECT_THROW(c.weight.select(0, 1), Error);
}

// A store's matrix with an update is read with it (get and get_for_product), the stored values as
// they are; an update that does not fit the matrix is refused.
TEST(LowRank, AStoreGivesTheUpdateWithItsMatrix) {
  const Case c = make_case(8, 16, 2, 41);
  const fs::path path = testing::scratch_dir("low_rank_store") / "w.safetensors";
  write_safetensors(path, {{"w", c.weight.without_low_rank()}});
  const WeightStore store = WeightStore::open_file(path).with_low_rank({{"w", c.update}});
  EXPECT_EQ(store.get("w").low_rank(), c.update);
  EXPECT_EQ(store.get_for_product("w").low_rank(), c.update);
  EXPECT_EQ(WeightStore::open_file(path).get("w").low_rank(), nullptr);
  const Case misfit = make_case(8, 12, 2, 51);
  EXPECT_THROW(WeightStore::open_file(path).with_low_rank({{"w", misfit.update}}), Error);
  EXPECT_THROW(WeightStore::open_file(path).with_low_rank({{"v", c.update}}), Error);
}

}  // namespace
}  // namespace mmgen
