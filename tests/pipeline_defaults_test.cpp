// configs/: per-pipeline sampling defaults chosen by the transformer's size, and flow_shift
// presets that suggest but never replace the model's scheduler_config.json.
#include "generate/pipeline_defaults.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/test_support.h"

namespace mmgen::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json wan_config(int64_t heads, int64_t layers, int64_t ffn) {
  return {{"num_attention_heads", heads},
          {"attention_head_dim", 128},
          {"num_layers", layers},
          {"ffn_dim", ffn}};
}

// Wan2.1-T2V-1.3B and -14B's transformer/config.json dimensions.
const json kWan13B = wan_config(12, 30, 8960);
const json kWan14B = wan_config(40, 40, 13824);

TEST(PipelineDefaults, TransformerSizeFromItsConfig) {
  const int64_t small = wan_transformer_parameters(kWan13B);
  const int64_t large = wan_transformer_parameters(kWan14B);
  EXPECT_GT(small, 1.3e9);
  EXPECT_LT(small, 1.5e9);
  EXPECT_GT(large, 13.5e9);
  EXPECT_LT(large, 14.5e9);
}

TEST(PipelineDefaults, TheVariantFollowsTheTransformerSize) {
  const std::string yaml = embedded_config("wan.yaml");
  const auto small =
      pipeline_defaults_from_yaml(yaml, "wan.yaml", wan_transformer_parameters(kWan13B));
  EXPECT_EQ(small.variant, "Wan2.1-T2V-1.3B");
  EXPECT_EQ(small.layer["height"], 480);
  EXPECT_EQ(small.layer["width"], 832);
  const auto large =
      pipeline_defaults_from_yaml(yaml, "wan.yaml", wan_transformer_parameters(kWan14B));
  EXPECT_EQ(large.variant, "Wan2.1-T2V-14B");
  EXPECT_EQ(large.layer["height"], 720);
  EXPECT_EQ(large.layer["width"], 1280);
  for (const auto* defaults : {&small, &large}) {
    EXPECT_EQ(defaults->layer["num-inference-steps"], 50);
    EXPECT_EQ(defaults->layer["guidance-scale"], 5.0);
    EXPECT_EQ(defaults->layer["num-frames"], 81);
    EXPECT_FALSE(defaults->layer.contains("flow-shift"));
    EXPECT_EQ(defaults->flow_shift_presets.size(), 2u);
  }
}

TEST(PipelineDefaults, ADefaultsFileMayNotSetFlowShift) {
  const std::string top = "height: 480\nflow_shift: 5.0\n";
  EXPECT_NE(testing::error_message([&] {
              pipeline_defaults_from_yaml(top, "x.yaml", 0);
            }).find("x.yaml: a defaults file may not set flow_shift"),
            std::string::npos);
  const std::string variant =
      "variants:\n  - name: big\n    transformer_parameters: [0, null]\n    flow_shift: 5.0\n";
  EXPECT_NE(testing::error_message([&] {
              pipeline_defaults_from_yaml(variant, "x.yaml", 0);
            }).find("variant big: a defaults file may not set flow_shift"),
            std::string::npos);
}

// wan-tiny with its transformer config swapped for the 14B's: enough for a dry run (no weights
// are read), and its scheduler_config.json says flow_shift 3.0.
fs::path fake_14b_model() {
  const fs::path dir = testing::scratch_dir("fake-14b");
  const fs::path tiny = testing::source_dir() / "examples/models/wan-tiny";
  fs::copy(tiny, dir / "model", fs::copy_options::recursive);
  json config = read_json_object(tiny / "transformer/config.json");
  config.update(kWan14B);
  config["text_dim"] = 32;
  std::ofstream(dir / "model/transformer/config.json") << config.dump(2);
  return dir / "model";
}

TEST(PipelineDefaults, A14BModelGets720pAndItsSchedulerFlowShiftStays) {
  const fs::path model = fake_14b_model();
  const auto result =
      testing::run_command(testing::mmgen_binary().string() +
                           " generate --dry-run --prompt x --model-path " + model.string());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json out = json::parse(result.out);
  EXPECT_EQ(out["defaults_variant"], "Wan2.1-T2V-14B");
  EXPECT_EQ(out["request"]["height"], 720);
  EXPECT_EQ(out["request"]["width"], 1280);
  // The 720p preset suggests 5.0; the model's 3.0 runs.
  EXPECT_EQ(out["flow_shift"], json({{"value", 3.0},
                                     {"source", "scheduler_config.json"},
                                     {"preset", "720p"},
                                     {"suggested", 5.0}}));
  EXPECT_FALSE(out["request"].contains("flow_shift"));
  // The command line and a config file still win over the variant.
  const fs::path config = model.parent_path() / "run.yaml";
  std::ofstream(config) << "height: 480\nwidth: 832\nflow_shift: 3.5\n";
  const auto overridden = testing::run_command(
      testing::mmgen_binary().string() + " generate --dry-run --prompt x --model-path " +
      model.string() + " --config " + config.string() + " --width 848");
  ASSERT_EQ(overridden.exit_code, 0) << overridden.err;
  const json over = json::parse(overridden.out);
  EXPECT_EQ(over["request"]["height"], 480);
  EXPECT_EQ(over["request"]["width"], 848);
  EXPECT_EQ(over["flow_shift"], json({{"value", 3.5},
                                      {"source", "--config " + config.string()},
                                      {"preset", "480p"},
                                      {"suggested", 3.0}}));
}

TEST(PipelineDefaults, TheLogSaysWhichFlowShiftRunsAndWhy) {
  const fs::path tiny = testing::source_dir() / "examples/models/wan-tiny";
  const ModelIndex index = load_model_index(tiny);
  const json presets = json::parse(
      R"([{"name": "480p", "max_pixels": 414720, "flow_shift": 3.0},
          {"name": "720p", "max_pixels": null, "flow_shift": 5.0}])");
  Request request;
  request.height = 720;
  request.width = 1280;
  auto choice = flow_shift_choice(request, index, presets, "--flow-shift");
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->explanation,
            "flow_shift 3 from the model's scheduler_config.json, which always wins over "
            "presets; the 720p preset suggests 5 for 1280x720 (pass --flow-shift 5 to use it)");
  request.height = 480;
  request.width = 832;
  choice = flow_shift_choice(request, index, presets, "--flow-shift");
  EXPECT_EQ(choice->explanation,
            "flow_shift 3 from the model's scheduler_config.json (the 480p preset suggests 3 for "
            "832x480)");
  request.flow_shift = 8.0;
  choice = flow_shift_choice(request, index, presets, "--flow-shift");
  EXPECT_EQ(choice->value, 8.0);
  EXPECT_EQ(choice->explanation,
            "flow_shift 8 from --flow-shift (scheduler_config.json has 3; the 480p preset "
            "suggests 3 for 832x480)");
}

// The shift reported is the key of the class that runs (model_index.json's): FlowMatchEuler's
// `shift`, not the `flow_shift` of the UniPC config it was given.
TEST(PipelineDefaults, TheFlowShiftIsTheKeyOfTheSchedulerThatRuns) {
  const fs::path tiny = testing::source_dir() / "examples/models/wan-tiny";
  ModelIndex index = load_model_index(tiny);
  index.components["scheduler"].class_name = "FlowMatchEulerDiscreteScheduler";
  Request request;
  request.height = 480;
  request.width = 832;
  EXPECT_FALSE(flow_shift_choice(request, index, json::array(), "--flow-shift"));
}

}  // namespace
}  // namespace mmgen::cli
