// model_index.json and the component configs: the same bytes go through the model index loader
// and, read as a component's config.json / scheduler_config.json, through every config parser the
// pipelines use, with the sizes derived from a config before any weight is read (what `inspect`
// and the memory check compute). Each parser is tried on its own: one rejecting the file must not
// hide a bug in the next.
#include "fuzz/fuzz_support.h"
#include "models/dit/wan/wan_transformer_config.h"
#include "models/text_encoders/qwen3_config.h"
#include "models/text_encoders/t5_config.h"
#include "models/vae/wan_vae_config.h"
#include "pipeline/model_index.h"
#include "pipeline/registry.h"
#include "pipeline/schedulers/scheduler.h"
#include "pipeline/wan/wan_memory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const auto path = fuzz::write_scratch("model_index.json", data, size);
  fuzz::expect_only_errors([&] {
    ModelIndex index = load_model_index(path.parent_path());
    for (const auto& name : index.component_names()) (void)index.component(name);
    (void)find_pipeline(index.class_name, index.root);
  });

  nlohmann::json config;
  fuzz::expect_only_errors([&] { config = read_json_object(path); });
  if (!config.is_object()) return 0;
  fuzz::expect_only_errors([&] {
    const auto c = dit::WanTransformerConfig::from_json(config);
    (void)c.inner_dim();
    (void)c.patch_volume();
  });
  fuzz::expect_only_errors([&] {
    const auto c = text_encoders::T5Config::from_json(config);
    (void)c.inner_dim();
  });
  fuzz::expect_only_errors([&] {
    const auto c = text_encoders::Qwen3Config::from_json(config);
    (void)c.q_width();
    (void)c.kv_width();
  });
  fuzz::expect_only_errors([&] {
    const auto c = vae::WanVaeConfig::from_json(config);
    (void)c.tail_radius();
    (void)c.output_frames(3);
    (void)wan_vae_working_set(config, 64, 96, 3);
  });
  fuzz::expect_only_errors([&] {
    auto scheduler = schedulers::make_scheduler(config);
    schedulers::ScheduleOptions options;
    if (scheduler->uses_dynamic_shifting()) options.mu = 0.5;
    scheduler->set_timesteps(4, options);
  });
  return 0;
}
