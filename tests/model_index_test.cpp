#include "pipeline/model_index.h"

#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "generate/generate_command.h"
#include "generate/memory_check.h"
#include "pipeline/registry.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

using testing::scratch_dir;

// A copy of the in-repo wan-tiny model's JSON files (weights are not needed to parse).
fs::path copy_wan_tiny_skeleton(const std::string& name) {
  fs::path source = testing::source_dir() / "examples/models/wan-tiny";
  fs::path target = scratch_dir(name);
  for (const auto& entry : fs::recursive_directory_iterator(source)) {
    fs::path relative = fs::relative(entry.path(), source);
    if (entry.is_directory())
      fs::create_directories(target / relative);
    else if (entry.path().extension() == ".json")
      fs::copy_file(entry.path(), target / relative);
  }
  return target;
}

TEST(ModelIndex, InRepoModelsParse) {
  // wan-shapes version 3 was saved by diffusers 0.42.1; wan-tiny by a 0.40 development build.
  for (const auto& [model, version] : {std::pair{"examples/models/wan-tiny", "0.40.0.dev0"},
                                       std::pair{"examples/models/wan-shapes", "0.42.1"}}) {
    ModelIndex index = load_model_index(testing::source_dir() / model);
    EXPECT_EQ(index.class_name, "WanPipeline");
    EXPECT_EQ(index.diffusers_version, version);
    EXPECT_EQ(
        index.component_names(),
        (std::vector<std::string>{"scheduler", "text_encoder", "tokenizer", "transformer", "vae"}));
    EXPECT_EQ(index.absent, (std::vector<std::string>{"transformer_2"}));
    EXPECT_TRUE(index.extras["boundary_ratio"].is_null());
    EXPECT_EQ(index.extras["expand_timesteps"], false);
    EXPECT_EQ(index.component("transformer").class_name, "WanTransformer3DModel");
    EXPECT_EQ(index.component("tokenizer").library, "transformers");
    EXPECT_EQ(index.config("scheduler")["_class_name"], "UniPCMultistepScheduler");
    check_components(find_pipeline(index.class_name, index.root), index);
  }
}

TEST(ModelIndex, SharedFixturesParse) {
  MMGEN_REQUIRE_SHARED();
  ModelIndex wan = load_model_index(testing::shared_dir() / "fixtures/wan-tiny/model");
  EXPECT_EQ(wan.components.size(), 5u);
  EXPECT_EQ(wan.config("transformer")["num_layers"], 2);
  ModelIndex qwen = load_model_index(testing::shared_dir() / "fixtures/qwen3-tiny/model");
  EXPECT_EQ(qwen.class_name, "ZImagePipeline");
  EXPECT_EQ(qwen.component_names(), (std::vector<std::string>{"text_encoder", "tokenizer"}));
  EXPECT_EQ(qwen.config("text_encoder")["num_key_value_heads"], 2);
  ModelIndex shapes = load_model_index(testing::source_dir() / "examples/models/wan-shapes");
  EXPECT_EQ(shapes.class_name, "WanPipeline");
}

TEST(ModelIndex, MissingComponentFolderIsItsOwnError) {
  fs::path model = copy_wan_tiny_skeleton("missing-vae");
  fs::remove_all(model / "vae");
  ModelIndex index = load_model_index(model);
  std::string message = testing::error_message(
      [&] { check_components(find_pipeline(index.class_name, model), index); });
  EXPECT_NE(message.find("component 'vae' (AutoencoderKLWan) is missing"), std::string::npos)
      << message;
  EXPECT_NE(message.find("--vae-path"), std::string::npos) << message;
}

TEST(ModelIndex, MalformedJsonIsItsOwnError) {
  fs::path model = copy_wan_tiny_skeleton("bad-json");
  std::ofstream(model / "model_index.json") << "{\"_class_name\": \"WanPipeline\",";
  std::string message = testing::error_message([&] { load_model_index(model); });
  EXPECT_NE(message.find("model_index.json: malformed JSON"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";

  fs::path model2 = copy_wan_tiny_skeleton("bad-config");
  std::ofstream(model2 / "transformer/config.json") << "[not an object";
  ModelIndex index = load_model_index(model2);
  message = testing::error_message([&] { index.config("transformer"); });
  EXPECT_NE(message.find("transformer/config.json: malformed JSON"), std::string::npos) << message;
}

TEST(ModelIndex, UnknownPipelineClassIsItsOwnError) {
  fs::path model = copy_wan_tiny_skeleton("unknown-class");
  std::ofstream(model / "model_index.json")
      << R"({"_class_name": "MysteryPipeline", "vae": ["diffusers", "X"]})";
  ModelIndex index = load_model_index(model);
  std::string message = testing::error_message([&] { find_pipeline(index.class_name, model); });
  EXPECT_NE(message.find("pipeline class 'MysteryPipeline' is not supported"), std::string::npos)
      << message;
  EXPECT_NE(message.find("WanPipeline"), std::string::npos) << message;
}

TEST(ModelIndex, RejectsComponentNamesThatAreNotFolders) {
  fs::path model = copy_wan_tiny_skeleton("escape");
  std::ofstream(model / "model_index.json")
      << R"({"_class_name": "WanPipeline", "../etc": ["diffusers", "X"]})";
  EXPECT_NE(
      testing::error_message([&] { load_model_index(model); }).find("not a plain folder name"),
      std::string::npos);
}

TEST(ModelIndex, MissingModelIndexAndPathOverrides) {
  fs::path empty = scratch_dir("empty-model");
  EXPECT_NE(
      testing::error_message([&] { load_model_index(empty); }).find("has no model_index.json"),
      std::string::npos);
  EXPECT_NE(
      testing::error_message([&] { load_model_index(empty / "nope"); }).find("does not exist"),
      std::string::npos);

  fs::path model = copy_wan_tiny_skeleton("override");
  fs::path other_vae = scratch_dir("other-vae");
  ModelIndex index = load_model_index(model, {{"vae", other_vae}});
  EXPECT_EQ(index.component("vae").path, other_vae);
  EXPECT_TRUE(index.component("vae").overridden);
  std::string message = testing::error_message([&] {
    load_model_index(model, {{"vea", other_vae}});
  });
  EXPECT_NE(message.find("no component 'vea'"), std::string::npos) << message;
}

// A run's steps in process, as generate takes them (resolve, the dry run's fields, the memory
// check with its search for flags that fit, load, run): each of the four component configs is
// parsed once, however often they are consulted.
TEST(ModelIndex, ARunParsesEachConfigOnce) {
  const cli::ResolvedGenerate resolved = cli::resolve_generate(
      {"--model-path", (testing::source_dir() / "examples/models/wan-tiny").string(), "--prompt",
       "a red fox", "--height", "32", "--width", "48", "--num-frames", "1", "--num-inference-steps",
       "2", "--max-sequence-length", "16"});
  (void)cli::dry_run_json(resolved);
  const ModelInventory inventory = take_inventory(resolved.index);
  // 1 byte free: the check estimates again for every alternative it tries.
  const cli::MemoryCheck memory = cli::check_request_memory(
      *resolved.spec, resolved.request, resolved.index, inventory, AvailableMemory{1, "test"});
  EXPECT_FALSE(memory.fits());
  const PipelineRunner run = resolved.spec->load(resolved.index, resolved.attention);
  EXPECT_EQ(run(resolved.request).shape(), (Shape{1, 32, 48, 3}));
  EXPECT_EQ(resolved.index.config_parses(), 4u);  // scheduler, text_encoder, transformer, vae
}

}  // namespace
}  // namespace mmgen
