// The mmgen executable end to end: exit codes, one-line errors, and the dry-run JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

namespace mmgen {
namespace {

using testing::run_command;

std::string mmgen() {
  return testing::mmgen_binary().string();
}
std::string wan_tiny() {
  return (testing::source_dir() / "examples/models/wan-tiny").string();
}

TEST(Cli, DryRunPrintsTheResolvedRequestAsJson) {
  auto result = run_command(mmgen() + " generate --dry-run --model-path " + wan_tiny() +
                            " --prompt x --num-frames 5 --height 32 --width 48 --seed 42");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["pipeline"], "WanPipeline");
  EXPECT_EQ(out["model_path"], wan_tiny());
  EXPECT_EQ(out["latent_shape"], nlohmann::json({1, 16, 2, 4, 6}));
  EXPECT_EQ(out["request"]["seed"], 42);
  EXPECT_EQ(out["request"]["prompt"], "x");
  EXPECT_EQ(out["request"]["num_inference_steps"], 50);
  EXPECT_EQ(out["request"]["output_format"], "mp4");
  EXPECT_EQ(out["attention_backend_config"],
            nlohmann::json::object());  // fa has no settings
  for (const char* name : {"transformer", "text_encoder", "tokenizer", "vae", "scheduler"}) {
    ASSERT_TRUE(out["components"].contains(name)) << name;
    for (const char* key :
         {"class", "library", "path", "attention_backend", "attention_backend_source"})
      EXPECT_TRUE(out["components"][name].contains(key)) << name << "." << key;
  }
  EXPECT_EQ(out["components"]["vae"]["class"], "AutoencoderKLWan");
  EXPECT_EQ(out["components"]["text_encoder"]["library"], "transformers");
  // This CPU build has the fa kernel, which auto picks for the transformer.
  EXPECT_EQ(out["components"]["transformer"]["attention_backend"], "fa");
  EXPECT_EQ(out["components"]["transformer"]["attention_backend_source"], "auto");
  // Text encoders take the best paged backend this CPU build has.
  EXPECT_EQ(out["components"]["text_encoder"]["attention_backend"], "flashinfer");
  EXPECT_EQ(out["components"]["text_encoder"]["attention_backend_source"], "auto");
  EXPECT_TRUE(out["components"]["tokenizer"]["attention_backend"].is_null());
}

TEST(Cli, BadInputGetsOneLineAndNonZeroExit) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generate --model-path /nonexistent --prompt x", "does not exist"},
      {"generate --model-path " + wan_tiny() + " --prompt x --steps 4", "unknown flag --steps"},
      {"generate --model-path " + wan_tiny() + " --prompt x --height 50", "multiples of 16"},
      {"generate --model-path " + wan_tiny() + " --prompt x --seed -3", "negative"},
      {"frobnicate", "unknown command"},
  };
  for (const auto& [arguments, expected] : cases) {
    auto result = run_command(mmgen() + " " + arguments);
    EXPECT_NE(result.exit_code, 0) << arguments;
    EXPECT_NE(result.err.find(expected), std::string::npos) << arguments << " -> " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1)
        << "one line: " << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
}

TEST(Cli, DryRunShowsEachComponentsBackendAndWhereItCameFrom) {
  auto result = run_command(mmgen() + " generate --dry-run --model-path " + wan_tiny() +
                            " --prompt x --attention-backend torch_sdpa "
                            "--component-attention-backends text_encoder=torch_native");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["components"]["transformer"]["attention_backend"], "torch_sdpa");
  EXPECT_EQ(out["components"]["transformer"]["attention_backend_source"], "cli");
  EXPECT_EQ(out["components"]["text_encoder"]["attention_backend"], "torch_native");
  EXPECT_EQ(out["components"]["text_encoder"]["attention_backend_source"], "component");
  // A DiT backend the text encoder cannot use, named explicitly for it, is an error.
  result = run_command(mmgen() + " generate --dry-run --model-path " + wan_tiny() +
                       " --prompt x --component-attention-backends text_encoder=sliding_tile_attn");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("text_encoder"), std::string::npos) << result.err;
}

TEST(Cli, BackendsListsTheCatalogue) {
  auto result = run_command(mmgen() + " backends --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_FALSE(out.empty());
  result = run_command(mmgen() + " backends");
  EXPECT_NE(result.out.find("sliding_tile_attn"), std::string::npos);
  EXPECT_NE(result.out.find("flashinfer"), std::string::npos);
}

TEST(Cli, HelpListsTheOptions) {
  auto result = run_command(mmgen() + " generate --help");
  EXPECT_EQ(result.exit_code, 0);
  for (const char* flag : {"--model-path", "--attention-backend-config",
                           "--component-attention-backends", "--dry-run"})
    EXPECT_NE(result.out.find(flag), std::string::npos) << flag;
}

}  // namespace
}  // namespace mmgen
