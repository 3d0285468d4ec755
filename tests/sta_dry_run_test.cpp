// The real `mmgen generate --dry-run` on the wan-tiny example with Sliding Tile Attention for the
// transformer and a component override for the text encoder (the attention-backend issue's
// fixture): every component's backend and where it came from, the fallbacks of the dense layers,
// and the parsed --attention-backend-config, in its three SPEC forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::run_command;

std::string wan_tiny() {
  return (testing::source_dir() / "examples/models/wan-tiny").string();
}

// wan-tiny: 2 transformer layers of 2 heads. A run has 50 steps (configs/wan.yaml) and STA's
// first skip_time_steps (default 15) are dense, so STA_inference needs a window for every
// "step_layer_head" with step 15..49: all [1, 1, 1] (each query tile sees its neighbours).
fs::path write_mask(const fs::path& dir, int first_step, int last_step) {
  json mask = json::object();
  for (int t = first_step; t <= last_step; ++t)
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h)
        mask[std::to_string(t) + "_" + std::to_string(l) + "_" + std::to_string(h)] = {1, 1, 1};
  const fs::path path = dir / "wan-tiny-sta-mask.json";
  std::ofstream(path) << mask.dump();
  return path;
}

testing::CommandResult dry_run(const std::string& config_spec) {
  return run_command(testing::mmgen_binary().string() + " generate --dry-run --model-path " +
                     wan_tiny() +
                     " --prompt x --attention-backend sliding_tile_attn "
                     "--component-attention-backends text_encoder=torch_native "
                     "--attention-backend-config '" +
                     config_spec + "'");
}

// The attention fields of one component in the dry-run JSON.
json attention_fields(const json& out, const char* component) {
  json fields = json::object();
  for (const char* key :
       {"attention_backend", "attention_backend_source", "attention_backend_fallback",
        "attention_backend_requested", "attention_layers"})
    fields[key] = out["components"][component][key];
  return fields;
}

TEST(StaDryRun, EachComponentsBackendSourceAndTheParsedConfig) {
  const fs::path mask = write_mask(testing::scratch_dir("sta-dry-run"), 15, 49);
  const auto result = dry_run("mask_strategy_file_path=" + mask.string());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json out = json::parse(result.out);

  EXPECT_EQ(out["request"]["num_inference_steps"], 50);
  EXPECT_EQ(out["attention_backend_config"], json({{"mask_strategy_file_path", mask.string()},
                                                   {"sta_mode", "STA_inference"},
                                                   {"skip_time_steps", 15},
                                                   {"window_size", {3, 3, 3}},
                                                   {"mask_search_threshold", 0.05},
                                                   {"tile_size", {6, 8, 8}}}));
  // The transformer runs STA from the command line; its cross-attention is dense and uses fa.
  EXPECT_EQ(attention_fields(out, "transformer"), json::parse(R"({
      "attention_backend": "sliding_tile_attn",
      "attention_backend_source": "cli",
      "attention_backend_fallback": null,
      "attention_backend_requested": "sliding_tile_attn",
      "attention_layers": {
        "self_attention": {"backend": "sliding_tile_attn", "fallback": null},
        "cross_attention": {"backend": "fa", "fallback":
          "sliding_tile_attn is sparse and cross-attention is dense, so fa is used"}}})"));
  // The text encoder's override wins over the command-line backend.
  EXPECT_EQ(attention_fields(out, "text_encoder"), json::parse(R"({
      "attention_backend": "torch_native",
      "attention_backend_source": "component",
      "attention_backend_fallback": null,
      "attention_backend_requested": "torch_native",
      "attention_layers": {"attention": {"backend": "torch_native", "fallback": null}}})"));
  // The VAE takes the command-line choice, and being dense uses fa instead, saying why.
  EXPECT_EQ(attention_fields(out, "vae"), json::parse(R"({
      "attention_backend": "fa",
      "attention_backend_source": "cli",
      "attention_backend_fallback":
        "sliding_tile_attn is sparse and vae's attention is dense, so fa is used",
      "attention_backend_requested": "sliding_tile_attn",
      "attention_layers": {"attention": {"backend": "fa", "fallback":
        "sliding_tile_attn is sparse and vae's attention is dense, so fa is used"}}})"));
  for (const char* none : {"tokenizer", "scheduler"}) {
    const json fields = attention_fields(out, none);
    for (const auto& [key, value] : fields.items())
      EXPECT_TRUE(value.is_null()) << none << "." << key;
  }
}

TEST(StaDryRun, TheThreeSpecFormsGiveTheSameConfig) {
  const fs::path dir = testing::scratch_dir("sta-dry-run-forms");
  const fs::path mask = write_mask(dir, 15, 49);
  const json expected = {{"mask_strategy_file_path", mask.string()},
                         {"sta_mode", "STA_inference"},
                         {"skip_time_steps", 20},
                         {"window_size", {3, 3, 3}},
                         {"mask_search_threshold", 0.05},
                         {"tile_size", {6, 8, 8}}};
  const fs::path file = dir / "sta.json";
  std::ofstream(file) << json({{"mask_strategy_file_path", mask.string()},
                               {"STA_mode", "STA_inference"},  // SGLang's spelling
                               {"skip_time_steps", 20}})
                             .dump();
  for (const std::string& spec :
       {"mask_strategy_file_path=" + mask.string() + ",skip_time_steps=20",
        json({{"mask_strategy_file_path", mask.string()}, {"skip_time_steps", 20}}).dump(),
        file.string()}) {
    const auto result = dry_run(spec);
    ASSERT_EQ(result.exit_code, 0) << spec << ": " << result.err;
    EXPECT_EQ(json::parse(result.out)["attention_backend_config"], expected) << spec;
  }
}

TEST(StaDryRun, AMaskThatMissesAStepIsAnErrorBeforeTheRun) {
  // Windows for steps 15..48 only: step 49 has none, which --dry-run reports already.
  const fs::path mask = write_mask(testing::scratch_dir("sta-dry-run-short"), 15, 48);
  const auto result = dry_run("mask_strategy_file_path=" + mask.string());
  EXPECT_NE(result.exit_code, 0);
  EXPECT_TRUE(result.out.empty()) << result.out;
  EXPECT_NE(result.err.find("no window for \"49_0_0\""), std::string::npos) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
}

}  // namespace
}  // namespace mmgen
