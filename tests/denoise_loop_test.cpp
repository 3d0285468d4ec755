// The one denoise loop (pipeline/denoise_loop.h): it steps the scheduler in order from its first
// step, hands the prediction the current latents and the step's timestep, keeps each step's
// latents when asked, calls the after-step hook once per step, and stops at a step boundary.
#include "pipeline/denoise_loop.h"

#include <gtest/gtest.h>

#include <csignal>
#include <vector>

#include "core/interrupt.h"
#include "pipeline/schedulers/scheduler.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

std::unique_ptr<schedulers::Scheduler> euler(int steps) {
  auto scheduler = schedulers::make_scheduler(
      {{"_class_name", "FlowMatchEulerDiscreteScheduler"}, {"shift", 1.0}});
  scheduler->set_timesteps(steps);
  return scheduler;
}

TEST(DenoiseLoop, StepsTheSchedulerWithEachPredictionInOrder) {
  auto scheduler = euler(4);
  // The same steps by hand: a prediction of 1 everywhere, sample = step(1, i, sample).
  auto reference = euler(4);
  Tensor expected = Tensor::zeros({1, 2, 3});
  std::vector<Tensor> by_hand;
  for (int i = 0; i < 4; ++i) {
    expected = reference->step(Tensor::full({1, 2, 3}, 1.0f), i, expected);
    by_hand.push_back(expected);
  }
  std::vector<int> seen;
  std::vector<float> timesteps;
  std::vector<Tensor> kept, hooked;
  const Tensor result = run_denoise_loop(
      *scheduler, Tensor::zeros({1, 2, 3}),
      [&](const DenoiseStep& step, const Tensor& sample) {
        seen.push_back(step.index);
        timesteps.push_back(step.timestep);
        EXPECT_EQ(step.steps, 4);
        EXPECT_EQ(testing::max_abs_diff(sample, seen.size() == 1 ? Tensor::zeros({1, 2, 3})
                                                                 : by_hand[seen.size() - 2]),
                  0.0);
        return Tensor::full(sample.shape(), 1.0f);
      },
      {.latents_after_step = &kept, .after_step = [&](const DenoiseStep&, const Tensor& latents) {
         hooked.push_back(latents);
       }});
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(timesteps,
            std::vector<float>(scheduler->timesteps().begin(), scheduler->timesteps().end()));
  ASSERT_EQ(kept.size(), 4u);
  ASSERT_EQ(hooked.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(testing::max_abs_diff(kept[i], by_hand[i]), 0.0) << i;
    EXPECT_EQ(testing::max_abs_diff(hooked[i], by_hand[i]), 0.0) << i;
  }
  EXPECT_EQ(testing::max_abs_diff(result, by_hand.back()), 0.0);
}

TEST(DenoiseLoop, AFirstStepSkipsTheStepsBeforeItAndAStepOutsideIsRefused) {
  auto scheduler = euler(5);
  std::vector<int> seen;
  run_denoise_loop(*scheduler, Tensor::zeros({1, 2}),
                   [&](const DenoiseStep& step, const Tensor& sample) {
                     seen.push_back(step.index);
                     return Tensor::zeros(sample.shape());
                   },
                   {.first_step = 3});
  EXPECT_EQ(seen, (std::vector<int>{3, 4}));
  auto again = euler(5);
  const auto zero = [](const DenoiseStep&, const Tensor& sample) {
    return Tensor::zeros(sample.shape());
  };
  EXPECT_NE(testing::error_message([&] {
              run_denoise_loop(*again, Tensor::zeros({1, 2}), zero, {.first_step = 5});
            }).find("outside the schedule of 5 steps"),
            std::string::npos);
}

TEST(DenoiseLoop, AStopIsTakenAtTheNextStepBoundary) {
  auto scheduler = euler(3);
  install_stop_handlers();
  int calls = 0;
  bool interrupted = false;
  try {
    run_denoise_loop(*scheduler, Tensor::zeros({1, 2}),
                     [&](const DenoiseStep&, const Tensor& sample) {
                       if (++calls == 2) std::raise(SIGINT);  // during step 1
                       return Tensor::zeros(sample.shape());
                     });
  } catch (const Interrupted& stop) {
    interrupted = true;
    EXPECT_EQ(stop.where, "before denoise step 3 of 3");
  }
  reset_stop_request();
  EXPECT_TRUE(interrupted);
  EXPECT_EQ(calls, 2);  // step 1 finished, step 2 never started
}

}  // namespace
}  // namespace mmgen
