// The op profile (MMGEN_OP_PROFILE): scopes count their own time, not their children's; hand-timed
// parts come out of the enclosing scope; parallel regions are not timed; the executable prints a
// table whose counts follow the model.
#include "core/op_profile.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

#include "tests/test_support.h"

namespace mmgen {
namespace {

using namespace std::chrono_literals;

// Each test runs in its own process (gtest_discover_tests), so switching the profile on here,
// before anything asks, holds for the whole test.
void profile_on() {
  setenv("MMGEN_OP_PROFILE", "1", 1);
  ASSERT_TRUE(profile::enabled());
}

// The (calls, milliseconds) of `name` in the report, or (-1, -1) without that row.
std::pair<int64_t, double> row_of(const std::string& report, const std::string& name) {
  std::istringstream lines(report);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + " ", 0) != 0) continue;
    std::istringstream fields(line.substr(name.size()));
    int64_t calls = 0;
    double ms = 0;
    fields >> calls >> ms;
    return {calls, ms};
  }
  return {-1, -1.0};
}

TEST(OpProfile, ScopesCountTheirOwnTimeAndHandTimedPartsComeOutOfTheirs) {
  profile_on();
  {
    MMGEN_PROFILE("test: outer");
    std::this_thread::sleep_for(30ms);
    for (int i = 0; i < 2; ++i) {
      MMGEN_PROFILE("test: inner");
      std::this_thread::sleep_for(20ms);
    }
    profile::add("test: by hand", 10'000'000);  // 10 ms of the outer's own time, timed by hand
  }
  const std::string report = profile::report();
  const auto [outer_calls, outer_ms] = row_of(report, "test: outer");
  const auto [inner_calls, inner_ms] = row_of(report, "test: inner");
  const auto [hand_calls, hand_ms] = row_of(report, "test: by hand");
  EXPECT_EQ(outer_calls, 1) << report;
  EXPECT_EQ(inner_calls, 2) << report;
  EXPECT_EQ(hand_calls, 1) << report;
  EXPECT_NEAR(hand_ms, 10.0, 0.05);
  EXPECT_GE(inner_ms, 40.0);
  // The outer slept 30 ms itself, 10 of which were handed to "test: by hand"; the inner 40 ms are
  // not its own. (Sleeps overrun, so the bound above is loose; without the subtraction it would be
  // 70 ms or more.)
  EXPECT_GE(outer_ms, 20.0 - 0.5) << report;
  EXPECT_LT(outer_ms, 45.0) << report;
}

TEST(OpProfile, ScopesInsideParallelRegionsAreNotTimed) {
  profile_on();
#pragma omp parallel num_threads(2)
  { MMGEN_PROFILE("test: in a parallel region"); }
  { MMGEN_PROFILE("test: outside"); }
  const std::string report = profile::report();
  EXPECT_EQ(row_of(report, "test: in a parallel region").first, -1) << report;
  EXPECT_EQ(row_of(report, "test: outside").first, 1) << report;
}

// wan-tiny (2 layers), 3 steps with guidance as one batch of two: the transformer's attention
// layers run 2 x 3 times each, and the table comes out on stderr after the run.
std::string generate_command(const std::string& environment) {
  return environment + " " + testing::mmgen_binary().string() + " generate --model-path " +
         (testing::source_dir() / "examples/models/wan-tiny").string() +
         " --prompt 'a fox' --negative-prompt '' --height 32 --width 32 --num-frames 1"
         " --num-inference-steps 3 --guidance-scale 4 --seed 1 --output-format npy --output-path " +
         testing::scratch_dir("op_profile").string() + " --overwrite";
}

TEST(OpProfile, TheExecutablePrintsCountsThatFollowTheModel) {
  const auto result = testing::run_command(generate_command("MMGEN_OP_PROFILE=1"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(row_of(result.err, "attention: self").first, 6) << result.err;
  EXPECT_EQ(row_of(result.err, "attention: cross").first, 6) << result.err;
  EXPECT_EQ(row_of(result.err, "wan transformer (outside ops)").first, 3) << result.err;
  EXPECT_GT(row_of(result.err, "linear").first, 0) << result.err;
  EXPECT_NE(result.err.find("op profile ("), std::string::npos);
}

TEST(OpProfile, OffUnlessAsked) {
  for (const char* environment : {"env -u MMGEN_OP_PROFILE", "MMGEN_OP_PROFILE=0"}) {
    const auto result = testing::run_command(generate_command(environment));
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(result.err.find("op profile"), std::string::npos) << environment;
  }
}

}  // namespace
}  // namespace mmgen
