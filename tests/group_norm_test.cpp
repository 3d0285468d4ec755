// ops::group_norm (core/group_norm.cpp): a hand-computed case, the fused SiLU, a multi-threaded
// size against a plain double-precision reference, and its refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/ops.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

// x [1, 4, 2] in two groups of two channels: group 0 holds 1, 2, 3, 4 (mean 2.5, variance 1.25),
// group 1 holds −1, 1, 5, 7 (mean 3, variance 10).
Tensor small_input() {
  return Tensor::from_vector({1, 4, 2}, std::vector<float>{1, 2, 3, 4, -1, 1, 5, 7});
}

TEST(GroupNorm, NormalisesEachGroupOverItsChannelsAndPositions) {
  const Tensor y = ops::group_norm(small_input(), 2, 0.0f);
  // (x − 2.5) / √1.25 and (x − 3) / √10
  const std::vector<float> expected = {-1.34164079f, -0.447213595f, 0.447213595f, 1.34164079f,
                                       -1.26491106f, -0.632455532f, 0.632455532f, 1.26491106f};
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(y.data<float>()[i], expected[i], 1e-6f) << i;
}

TEST(GroupNorm, AppliesThePerChannelAffineAndEps) {
  const Tensor weight = Tensor::from_vector({4}, std::vector<float>{2, 1, 1, 0.5f});
  const Tensor bias = Tensor::from_vector({4}, std::vector<float>{0, 1, 0, -1});
  const Tensor y = ops::group_norm(small_input(), 2, 0.0f, weight, bias);
  const std::vector<float> expected = {-2.68328157f, -0.894427191f, 1.44721360f,   2.34164079f,
                                       -1.26491106f, -0.632455532f, -0.683772234f, -0.367544468f};
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(y.data<float>()[i], expected[i], 1e-6f) << i;

  // eps joins the variance: group 0 with eps 0.75 is (x − 2.5) / √2.
  const Tensor with_eps = ops::group_norm(small_input(), 2, 0.75f);
  EXPECT_NEAR(with_eps.data<float>()[0], -1.06066017f, 1e-6f);
  EXPECT_NEAR(with_eps.data<float>()[3], 1.06066017f, 1e-6f);
}

TEST(GroupNorm, FusedSiluIsNormThenSilu) {
  const Tensor y = ops::group_norm(small_input(), 2, 0.0f, Tensor(), Tensor(), /*silu=*/true);
  // silu(−1.34164079) = −1.34164079 / (1 + e^1.34164079), silu(1.26491106) likewise.
  EXPECT_NEAR(y.data<float>()[0], -0.278042121f, 1e-6f);
  EXPECT_NEAR(y.data<float>()[7], 0.986466645f, 1e-6f);
}

// Four groups of eight channels, large enough to run threaded, against double arithmetic.
TEST(GroupNorm, MatchesADoubleReferenceOnAThreadedSize) {
  const int64_t batch = 2, channels = 32, groups = 4, positions = 40 * 24;
  const Tensor x = ops::random_uniform({batch, channels, 40, 24}, DType::F32, Device::CPU, 7, 3.0f);
  const Tensor weight = ops::random_uniform({channels}, DType::F32, Device::CPU, 8, 1.0f);
  const Tensor bias = ops::random_uniform({channels}, DType::F32, Device::CPU, 9, 1.0f);
  const Tensor y = ops::group_norm(x, groups, 1e-6f, weight, bias);
  ASSERT_EQ(y.shape(), x.shape());
  const int64_t per_group = channels / groups, size = per_group * positions;
  double worst = 0;
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t g = 0; g < groups; ++g) {
      const float* in = x.data<float>() + (n * channels + g * per_group) * positions;
      const float* out = y.data<float>() + (n * channels + g * per_group) * positions;
      double mean = 0, variance = 0;
      for (int64_t i = 0; i < size; ++i) mean += in[i];
      mean /= double(size);
      for (int64_t i = 0; i < size; ++i) variance += (in[i] - mean) * (in[i] - mean);
      variance /= double(size);
      for (int64_t i = 0; i < size; ++i) {
        const int64_t c = g * per_group + i / positions;
        const double expected =
            (in[i] - mean) / std::sqrt(variance + 1e-6) * weight.data<float>()[c] +
            bias.data<float>()[c];
        worst = std::max(worst, std::abs(out[i] - expected));
      }
    }
  EXPECT_LT(worst, 2e-6);
}

TEST(GroupNorm, RefusesGroupsThatDoNotDivideTheChannels) {
  EXPECT_NE(testing::error_message([] {
              ops::group_norm(small_input(), 3, 1e-6f);
            }).find("4 channels do not split into 3 groups"),
            std::string::npos);
  EXPECT_NE(testing::error_message([] {
              ops::group_norm(small_input(), 2, 1e-6f, Tensor::full({3}, 1.0f));
            }).find("weight [3] for 4 channels"),
            std::string::npos);
}

}  // namespace
}  // namespace mmgen
