// The component-class table and the checks model_index.json gets from it: each component's class
// must be one mmgen loads for the pipeline, refused in one line otherwise, before any weights are
// read. tests/model_index_driven_test.cpp holds the same seen from the executable.
#include "pipeline/component_classes.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "pipeline/model_index.h"
#include "pipeline/registry.h"
#include "pipeline/schedulers/scheduler.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

using json = nlohmann::json;

fs::path wan_tiny() {
  return testing::source_dir() / "examples/models/wan-tiny";
}

std::string check_message(const fs::path& model) {
  const ModelIndex index = load_model_index(model);
  return testing::error_message(
      [&] { check_components(find_pipeline(index.class_name, model), index); });
}

TEST(ComponentClasses, EveryPipelineSlotNamesKnownClassesOfItsKind) {
  for (const PipelineSpec& spec : pipeline_registry()) {
    EXPECT_FALSE(spec.components.empty()) << spec.class_name;
    for (const ComponentSlot& slot : spec.components) {
      EXPECT_FALSE(slot.classes.empty()) << spec.class_name << " " << slot.name;
      for (const std::string& name : slot.classes) {
        const ComponentClass* known = find_component_class(name);
        ASSERT_NE(known, nullptr) << spec.class_name << " " << slot.name << ": " << name;
        EXPECT_EQ(known->kind, slot.kind) << name;
      }
    }
  }
  // Class names are unique, so a name says its kind.
  std::set<std::string> names;
  for (const ComponentClass& entry : component_classes())
    EXPECT_TRUE(names.insert(entry.name).second) << entry.name;
}

TEST(ComponentClasses, SchedulersAreWhatTheFactoryBuilds) {
  EXPECT_EQ(component_class_names(ComponentKind::Scheduler),
            schedulers::supported_scheduler_classes());
  const json config = read_json_object(wan_tiny() / "scheduler/scheduler_config.json");
  for (const std::string& name : component_class_names(ComponentKind::Scheduler))
    EXPECT_EQ(schedulers::make_scheduler(name, config)->class_name(), name);
  EXPECT_EQ(testing::error_message([&] { schedulers::make_scheduler("DDIMScheduler", config); }),
            "scheduler class 'DDIMScheduler' is not supported (supported schedulers: "
            "FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler); use a model whose "
            "model_index.json names one of them");
}

TEST(ComponentClasses, TheInRepoModelsPass) {
  for (const char* model : {"examples/models/wan-tiny", "examples/models/wan-shapes"})
    EXPECT_EQ(check_message(testing::source_dir() / model), "") << model;
}

// Each component of WanPipeline given a class mmgen does not load there: one line naming the
// classes it does load.
TEST(ComponentClasses, AnUnsupportedClassIsRefusedInOneLine) {
  struct Case {
    std::string component, library, class_name, supported;
  };
  const std::vector<Case> cases = {
      {"scheduler", "diffusers", "DDIMScheduler",
       "supported schedulers: FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler"},
      {"text_encoder", "transformers", "Qwen3ForCausalLM",
       "supported text encoders: UMT5EncoderModel"},
      {"tokenizer", "transformers", "CLIPTokenizer",
       "supported tokenizers: T5Tokenizer, T5TokenizerFast"},
      {"transformer", "diffusers", "FluxTransformer2DModel",
       "supported transformers: WanTransformer3DModel"},
      {"vae", "diffusers", "AutoencoderKL", "supported VAEs: AutoencoderKLWan"},
  };
  const fs::path model = testing::scratch_dir("component-classes-skeleton") / "model";
  fs::copy(wan_tiny(), model, fs::copy_options::recursive);
  const json original = read_json_object(model / "model_index.json");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.component);
    testing::write_json_file(model / "model_index.json", original);
    testing::set_component_class(model, c.component, c.library, c.class_name);
    EXPECT_EQ(check_message(model), (model / "model_index.json").string() + ": " + c.component +
                                        " class '" + c.class_name +
                                        "' is not supported by WanPipeline (" + c.supported + ")");
  }
}

// Wan2.2 A14B's second transformer: running without it would not be the saved model.
TEST(ComponentClasses, AComponentThePipelineDoesNotLoadIsRefused) {
  const fs::path model = testing::copy_of_wan_tiny("component-classes-transformer-2");
  fs::copy(model / "transformer", model / "transformer_2", fs::copy_options::recursive);
  testing::set_component_class(model, "transformer_2", "diffusers", "WanTransformer3DModel");
  EXPECT_EQ(check_message(model),
            (model / "model_index.json").string() +
                ": component 'transformer_2' (WanTransformer3DModel) is not supported by "
                "WanPipeline yet (it loads only: text_encoder, tokenizer, transformer, vae, "
                "scheduler)");
}

// The zimage-tiny fixture as transformers 5 saved it (its tokenizer a TokenizersBackend) loads as
// ZImagePipeline; a pipeline class mmgen has not is refused naming the ones it has.
TEST(ComponentClasses, ZImageIsAPipelineAndUnknownOnesAreRefused) {
  MMGEN_REQUIRE_SHARED();
  const fs::path model = testing::shared_dir() / "fixtures/zimage-tiny/model";
  const ModelIndex index = load_model_index(model);
  const PipelineSpec& spec = find_pipeline(index.class_name, model);
  EXPECT_EQ(spec.class_name, "ZImagePipeline");
  EXPECT_EQ(testing::error_message([&] { check_components(spec, index); }), "");
  EXPECT_EQ(testing::error_message([&] { find_pipeline("StableDiffusionPipeline", model); }),
            model.string() +
                ": pipeline class 'StableDiffusionPipeline' is not supported by this mmgen "
                "(supported: WanPipeline, ZImagePipeline, FluxPipeline, QwenImagePipeline)");
}

}  // namespace
}  // namespace mmgen
