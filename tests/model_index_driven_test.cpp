// model_index.json drives loading, seen from what a user runs: a run opens each component config
// once. Only the executable is used, so the file builds against older mmgen too.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
fs::path wan_tiny() {
  return testing::source_dir() / "examples/models/wan-tiny";
}

// The files a generate run opens, traced (strace; skipped where it is missing or not permitted).
TEST(ModelIndexDriven, TheExecutableOpensEachConfigOnce) {
  if (testing::run_command("strace -o /dev/null true").exit_code != 0)
    GTEST_SKIP() << "strace cannot run here";
  const fs::path dir = testing::scratch_dir("index-driven-strace");
  const fs::path trace = dir / "trace.txt";
  const auto result = testing::run_command(
      "strace -f -e trace=openat,open -o " + trace.string() + " " +
      testing::mmgen_binary().string() + " generate --model-path " + wan_tiny().string() +
      " --prompt 'a red fox' --height 32 --width 48 --num-frames 1 --num-inference-steps 2 "
      "--max-sequence-length 16 --quiet --output-format npy --output-path " +
      (dir / "out").string());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::map<std::string, int> opens;
  std::ifstream in(trace);
  for (std::string line; std::getline(in, line);)
    for (const char* file : {"scheduler/scheduler_config.json", "text_encoder/config.json",
                             "transformer/config.json", "vae/config.json"})
      if (line.find(file) != std::string::npos) ++opens[file];
  EXPECT_EQ(opens, (std::map<std::string, int>{{"scheduler/scheduler_config.json", 1},
                                               {"text_encoder/config.json", 1},
                                               {"transformer/config.json", 1},
                                               {"vae/config.json", 1}}));
}

}  // namespace
}  // namespace mmgen
