// model_index.json drives loading, seen from what a user runs: the executable refuses a class it
// does not load in one line, the scheduler is the class the index names (not the one its
// scheduler_config.json was saved for), and a run opens each component config once. Only the
// executable and the WanPipeline API are used, so the file builds against older mmgen too.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/json.h"
#include "pipeline/model_index.h"
#include "pipeline/wan/wan_pipeline.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path wan_tiny() {
  return testing::source_dir() / "examples/models/wan-tiny";
}

// The real executable: generate (dry run or not) and inspect refuse the model with that one line,
// exit code 1 and nothing on stdout.
TEST(ModelIndexDriven, TheCommandsRefuseAnUnsupportedSchedulerInOneLine) {
  const fs::path model = testing::copy_of_wan_tiny("index-driven-ddim");
  testing::set_component_class(model, "scheduler", "diffusers", "DDIMScheduler");
  const std::string expected =
      "mmgen: error: " + (model / "model_index.json").string() +
      ": scheduler class 'DDIMScheduler' is not supported by WanPipeline (supported schedulers: "
      "FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler)\n";
  const fs::path out = testing::scratch_dir("index-driven-out");
  const std::string run = testing::mmgen_binary().string() + " ";
  const std::string request = " --model-path " + model.string() +
                              " --height 32 --width 48 --num-frames 1 --num-inference-steps 2";
  for (const std::string& command :
       {run + "generate --prompt x --dry-run" + request,
        run + "generate --prompt x --quiet --output-path " + out.string() + request,
        run + "inspect" + request, run + "inspect --json" + request}) {
    SCOPED_TRACE(command);
    const auto result = testing::run_command(command);
    EXPECT_EQ(result.exit_code, 1);
    EXPECT_EQ(result.err, expected);
    EXPECT_EQ(result.out, "");
  }
  EXPECT_TRUE(fs::is_empty(out));
}

Tensor generate_frames(const fs::path& model) {
  const WanPipeline pipeline(load_model_index(model));
  WanGenerationInput input;
  input.prompt = "a red fox";
  input.height = 32;
  input.width = 48;
  input.num_inference_steps = 3;
  input.guidance_scale = 1;
  input.max_sequence_length = 16;
  input.seed = 7;
  return pipeline.generate(input).frames;
}

// diffusers builds the scheduler model_index.json names, whatever scheduler_config.json was saved
// for; so does mmgen (it used to take the config's `_class_name` and ignore the index).
TEST(ModelIndexDriven, TheSchedulerIsTheClassTheIndexNames) {
  const fs::path unipc = testing::copy_of_wan_tiny("index-driven-unipc");
  const fs::path index_only = testing::copy_of_wan_tiny("index-driven-euler-index");
  testing::set_component_class(index_only, "scheduler", "diffusers",
                               "FlowMatchEulerDiscreteScheduler");
  const fs::path both = testing::copy_of_wan_tiny("index-driven-euler-both");
  testing::set_component_class(both, "scheduler", "diffusers", "FlowMatchEulerDiscreteScheduler");
  json config = read_json_object(both / "scheduler/scheduler_config.json");
  config["_class_name"] = "FlowMatchEulerDiscreteScheduler";
  testing::write_json_file(both / "scheduler/scheduler_config.json", config);

  const Tensor from_unipc = generate_frames(unipc);
  const Tensor from_index = generate_frames(index_only);
  const Tensor from_both = generate_frames(both);
  EXPECT_EQ(testing::max_abs_diff(from_index, from_both), 0.0);
  EXPECT_GT(testing::max_abs_diff(from_index, from_unipc), 1e-4);
}

// The files a generate run opens, traced (strace; skipped where it is missing or not permitted).
TEST(ModelIndexDriven, TheExecutableOpensEachConfigOnce) {
  if (testing::run_command("strace -o /dev/null true").exit_code != 0)
    GTEST_SKIP() << "strace cannot run here";
  const fs::path dir = testing::scratch_dir("index-driven-strace");
  const fs::path trace = dir / "trace.txt";
  // LeakSanitizer cannot run under ptrace, so an ASan build (scripts/sanitize.sh) traces with leak
  // checking off; the other sanitizer settings carry over, and other builds ignore the variable.
  const auto result = testing::run_command(
      "ASAN_OPTIONS=\"${ASAN_OPTIONS:-}:detect_leaks=0\" strace -f -e trace=openat,open -o " +
      trace.string() + " " + testing::mmgen_binary().string() + " generate --model-path " +
      wan_tiny().string() +
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
