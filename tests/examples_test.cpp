// Every example in examples/ runs (so none rots) and does what its comments say: outputs of the
// stated shapes, settings from the right layer, each sparse backend at the density its settings
// give, embeddings and tiling matching the plain runs. Outputs are npy (FORMAT=npy) so the checks
// are exact and the test needs no video decoder.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/file.h"
#include "core/npy.h"
#include "pipeline/model_index.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Example {
  testing::CommandResult result;
  fs::path out;
};

// Runs examples/<name>/run.sh with the test's binary, writing into a fresh folder.
Example run_example(const std::string& name) {
  Example example;
  example.out = testing::scratch_dir("example-" + name);
  const fs::path script = testing::source_dir() / "examples" / name / "run.sh";
  example.result = testing::run_command("MMGEN=" + testing::mmgen_binary().string() + " OUT=" +
                                        example.out.string() + " FORMAT=npy sh " + script.string());
  EXPECT_EQ(example.result.exit_code, 0) << name << "\n" << example.result.err;
  return example;
}

std::string shape_of(const fs::path& npy) {
  return shape_string(read_npy(npy).shape());
}

json settings_of(const fs::path& npy) {
  return read_json_object(npy.string() + ".json");
}

// The "visited N% of key blocks" figure of a run's log.
std::string density(const std::string& log) {
  std::smatch match;
  if (!std::regex_search(log, match, std::regex("self-attention visited ([0-9.]+)% of key blocks")))
    return "";
  return match[1];
}

TEST(Examples, EveryExampleHasATest) {
  // The examples this file checks; a new example must be added here.
  const std::set<std::string> tested = {
      "t2v",       "t2i",   "config-yaml", "config-json", "component-overrides",    "sta",
      "vsa",       "vmoba", "sla",         "prompt-file", "precomputed-embeddings", "inspect",
      "vae-tiling"};
  std::set<std::string> present;
  for (const auto& entry : fs::directory_iterator(testing::source_dir() / "examples"))
    if (fs::exists(entry.path() / "run.sh")) present.insert(entry.path().filename().string());
  EXPECT_EQ(present, tested);
}

TEST(Examples, TextToVideoAndTextToImage) {
  const Example video = run_example("t2v");
  EXPECT_EQ(shape_of(video.out / "t2v.npy"), "[9, 64, 96, 3]");
  EXPECT_EQ(settings_of(video.out / "t2v.npy")["seed"], 42);
  const Example image = run_example("t2i");
  EXPECT_EQ(shape_of(image.out / "t2i.npy"), "[1, 64, 64, 3]");
  EXPECT_EQ(settings_of(image.out / "t2i.npy")["negative_prompt"], "");
}

TEST(Examples, ConfigFilesAndTheCommandLineOverThem) {
  const Example yaml = run_example("config-yaml");
  const fs::path yaml_out = yaml.out / "config_yaml.npy";
  EXPECT_EQ(shape_of(yaml_out), "[5, 64, 96, 3]");
  const json from_yaml = settings_of(yaml_out);
  EXPECT_EQ(from_yaml["seed"], 7);
  EXPECT_EQ(from_yaml["negative_prompt"], "blurry, low quality");
  EXPECT_EQ(from_yaml["prompt"], "a lighthouse at dusk, waves breaking");
  EXPECT_EQ(from_yaml["attention_backends"]["text_encoder"],
            json({{"backend", "torch_native"}, {"source", "component"}}));
  // attention_backend is set in the file, so its source is the config, not the command line.
  EXPECT_EQ(from_yaml["attention_backends"]["transformer"],
            json({{"backend", "fa"}, {"source", "config"}}));

  const Example from_json = run_example("config-json");
  const fs::path json_out = from_json.out / "config_json.npy";
  EXPECT_EQ(shape_of(json_out), "[1, 48, 80, 3]");
  EXPECT_EQ(settings_of(json_out)["seed"], 12);  // the command line's, not the file's 11
  EXPECT_EQ(settings_of(json_out)["prompt"], "a paper boat on a rainy street");
}

TEST(Examples, PerComponentOverrides) {
  const Example example = run_example("component-overrides");
  const json settings = settings_of(example.out / "overrides.npy");
  EXPECT_EQ(settings["attention_backends"]["text_encoder"],
            json({{"backend", "torch_native"}, {"source", "component"}}));
  EXPECT_EQ(settings["attention_backends"]["transformer"],
            json({{"backend", "torch_sdpa"}, {"source", "component"}}));
  EXPECT_EQ(settings["component_paths"]["vae"].get<std::string>().ends_with("wan-tiny/vae"), true);
  const json dry_run = read_json_object(example.out / "overrides_dry_run.json");
  EXPECT_EQ(dry_run["components"]["vae"]["attention_backend"], "torch_sdpa");
  EXPECT_EQ(dry_run["components"]["vae"]["attention_backend_source"], "component");
}

TEST(Examples, EachSparseBackendAtTheDensityOfItsSettings) {
  // STA: a 3x8x8 grid in 1x4x4 tiles is 3x2x2 = 12 tiles; head 0's [3, 1, 1] window visits 3 of
  // them, head 1's [1, 2, 2] 4, so the sparse steps 1-3 visit 7/24 of the blocks and the dense
  // step 0 all: (1 + 3 * 7/24) / 4 = 46.875%.
  const Example sta = run_example("sta");
  EXPECT_EQ(density(sta.result.err), "46.9") << sta.result.err;
  EXPECT_EQ(settings_of(sta.out / "sta.npy")["attention_backends"]["transformer"]["backend"],
            "sliding_tile_attn");
  // VSA: the grid is 1x2x2 = 4 cubes of 4x4x4; sparsity 0.75 keeps ceil(0.25 * 4) = 1 per query
  // cube, at every step.
  const Example vsa = run_example("vsa");
  EXPECT_EQ(density(vsa.result.err), "25.0") << vsa.result.err;
  // SLA: 192 tokens in 3 query blocks of 64 and 6 key blocks of 32; topk 0.25 keeps
  // floor(0.25 * 6) = 1 key block per query block.
  const Example sla = run_example("sla");
  EXPECT_EQ(density(sla.result.err), "16.7") << sla.result.err;
  // V-MoBA selects by score mass, so its density depends on the values; it is sparse.
  const Example vmoba = run_example("vmoba");
  const std::string moba = density(vmoba.result.err);
  ASSERT_FALSE(moba.empty()) << vmoba.result.err;
  EXPECT_GT(std::stod(moba), 0.0);
  EXPECT_LT(std::stod(moba), 100.0);
  for (const auto& [example, name] : std::vector<std::pair<const Example*, std::string>>{
           {&vsa, "vsa"}, {&sla, "sla"}, {&vmoba, "vmoba"}}) {
    EXPECT_EQ(shape_of(example->out / (name + ".npy")), "[9, 128, 128, 3]");
  }
}

TEST(Examples, PromptFileBatch) {
  const Example example = run_example("prompt-file");
  const std::vector<std::string> prompts = {"a red circle on a blue background",
                                            "a yellow triangle on a purple background",
                                            "a white square on a black background"};
  for (size_t i = 0; i < prompts.size(); ++i) {
    const fs::path file = example.out / ("batch_" + std::to_string(i) + ".npy");
    EXPECT_EQ(shape_of(file), "[1, 32, 32, 3]");
    EXPECT_EQ(settings_of(file)["prompt"], prompts[i]);
  }
  EXPECT_FALSE(fs::exists(example.out / "batch_3.npy"));
  EXPECT_NE(example.result.out.find("3 of 3 prompt(s) written"), std::string::npos);
}

TEST(Examples, PrecomputedEmbeddingsGiveThePromptsVideo) {
  const Example example = run_example("precomputed-embeddings");
  const fs::path from_text = example.out / "text.npy";
  const auto text = testing::run_command(
      testing::mmgen_binary().string() + " generate --model-path " +
      (testing::source_dir() / "examples/models/wan-tiny").string() +
      " --prompt 'a red fox running through snow' --negative-prompt 'blurry, low quality'"
      " --height 32 --width 48 --num-frames 5 --num-inference-steps 3 --max-sequence-length 32"
      " --output-format npy --log-level error --output-path " +
      example.out.string() + " --output-file-name text");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(testing::max_abs_diff(read_npy(example.out / "embeds.npy"), read_npy(from_text)), 0.0);
}

TEST(Examples, InspectReportsTheModelAndTheRequestsMemory) {
  const Example example = run_example("inspect");
  EXPECT_NE(example.result.out.find("WanTransformer3DModel"), std::string::npos);
  const json report = read_json_object(example.out / "inspect.json");
  EXPECT_EQ(report["components"].size(), 5u);
  EXPECT_EQ(report["latent_shape"], json({1, 16, 21, 60, 104}));
  EXPECT_GT(report["memory"]["vae_decode_bytes"].get<uint64_t>(),
            report["memory"]["weights_bytes"].get<uint64_t>());
}

TEST(Examples, VaeTilingMatchesTheUntiledDecode) {
  const Example example = run_example("vae-tiling");
  const auto untiled = testing::run_command(
      testing::mmgen_binary().string() + " generate --model-path " +
      (testing::source_dir() / "examples/models/wan-tiny").string() +
      " --prompt 'a field of sunflowers' --height 256 --width 384 --num-frames 5"
      " --num-inference-steps 2 --max-sequence-length 32 --output-format npy --log-level error"
      " --output-path " +
      example.out.string() + " --output-file-name untiled");
  ASSERT_EQ(untiled.exit_code, 0) << untiled.err;
  const Tensor tiled = read_npy(example.out / "tiled.npy");
  EXPECT_EQ(shape_string(tiled.shape()), "[5, 256, 384, 3]");
  EXPECT_LT(testing::max_abs_diff(tiled, read_npy(example.out / "untiled.npy")), 2e-3);
}

}  // namespace
}  // namespace mmgen
