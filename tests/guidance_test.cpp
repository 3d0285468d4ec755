// The guidance policies (pipeline/guidance.h), written once for every pipeline: each form and
// rescale against values worked by hand, in float32 as diffusers computes them.
#include "pipeline/guidance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/test_support.h"

namespace mmgen {
namespace {

Tensor values(Shape shape, std::vector<float> data) {
  return Tensor::from_vector(std::move(shape), std::move(data));
}

TEST(Guidance, FromUnconditionalIsDiffusersClassifierFreeGuidance) {
  // Wan's CFG and FLUX's true CFG: u + s·(c − u), each operation rounded to float32.
  const Tensor c = values({3}, {1.0f, -2.0f, 0.1f});
  const Tensor u = values({3}, {0.5f, 1.0f, 0.3f});
  const Tensor out = guided_prediction(c, u, {.scale = 5.0});
  for (int i = 0; i < 3; ++i) {
    const float cf = c.data<float>()[i], uf = u.data<float>()[i];
    const float difference = cf - uf;
    const float push = 5.0f * difference;
    EXPECT_EQ(out.data<float>()[i], uf + push) << i;
  }
  // Scale 1 gives the conditional prediction back (to the rounding of u + (c − u)).
  const Tensor same = guided_prediction(c, u, {.scale = 1.0});
  EXPECT_FLOAT_EQ(same.data<float>()[2], 0.1f);
}

TEST(Guidance, FromConditionalPushesAwayFromTheNegative) {
  // Z-Image: c + s·(c − u).
  const Tensor c = values({2}, {1.0f, 2.0f});
  const Tensor u = values({2}, {0.5f, 3.0f});
  const Tensor out =
      guided_prediction(c, u, {.form = GuidancePolicy::Form::FromConditional, .scale = 4.0});
  EXPECT_FLOAT_EQ(out.data<float>()[0], 1.0f + 4.0f * 0.5f);
  EXPECT_FLOAT_EQ(out.data<float>()[1], 2.0f - 4.0f);
}

TEST(Guidance, RowsRescaleToTheConditionalNormEachOnItsOwn) {
  // Qwen-Image's true CFG: row 0 combines to (5, 8) with ‖c‖ 5; row 1 to (0, 3) with ‖c‖ 2.
  const Tensor c = values({2, 2}, {3.0f, 4.0f, 0.0f, 2.0f});
  const Tensor u = values({2, 2}, {1.0f, 0.0f, 0.0f, 1.0f});
  const Tensor out = guided_prediction(
      c, u, {.scale = 2.0, .rescale = GuidancePolicy::Rescale::RowsToConditionalNorm});
  const double norm = std::sqrt(89.0);
  EXPECT_NEAR(out.data<float>()[0], 5.0 * 5.0 / norm, 1e-6);
  EXPECT_NEAR(out.data<float>()[1], 8.0 * 5.0 / norm, 1e-6);
  EXPECT_FLOAT_EQ(out.data<float>()[2], 0.0f);
  EXPECT_FLOAT_EQ(out.data<float>()[3], 2.0f);
}

TEST(Guidance, TheCapScalesOnlyAGuidedNormAboveIt) {
  const Tensor c = values({2}, {1.0f, 2.0f});
  const Tensor u = values({2}, {0.5f, 3.0f});
  GuidancePolicy policy{.form = GuidancePolicy::Form::FromConditional,
                        .scale = 4.0,
                        .rescale = GuidancePolicy::Rescale::CapAtConditionalNorm,
                        .cap = 1.0};
  const Tensor capped = guided_prediction(c, u, policy);
  EXPECT_NEAR(std::hypot(capped.data<float>()[0], capped.data<float>()[1]), std::hypot(1.0, 2.0),
              1e-5);
  // Guided (3, -2) has norm √13 < 2·√5: a cap of 2 leaves it as it is; cap 0 is off.
  policy.cap = 2.0;
  EXPECT_FLOAT_EQ(guided_prediction(c, u, policy).data<float>()[0], 3.0f);
  policy.cap = 0.0;
  EXPECT_FLOAT_EQ(guided_prediction(c, u, policy).data<float>()[1], -2.0f);
}

TEST(Guidance, PredictionsOfTwoShapesAreRefused) {
  const std::string message = testing::error_message([] {
    guided_prediction(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}), {.scale = 2.0});
  });
  EXPECT_NE(message.find("differ in shape"), std::string::npos) << message;
}

}  // namespace
}  // namespace mmgen
