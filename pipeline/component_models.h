// What every pipeline does with the components model_index.json names, written once: building a
// model from the config the index parsed and the weights its folder or file holds, reading the
// scheduler's class and config, giving the VAE the plan's attention backend, and moving the models
// to the run's device. A pipeline lists its components; these build and move them.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "attention/backend.h"
#include "core/tensor.h"
#include "pipeline/attention_layers.h"
#include "pipeline/attention_plan.h"
#include "pipeline/component_loras.h"
#include "pipeline/component_weights.h"
#include "pipeline/model_index.h"
#include "pipeline/progress.h"
#include "pipeline/registry.h"

namespace mmgen {

// The model of component `name`: Config::from_json on the config the index parsed (errors name its
// file), then Model(config, weights). One parse of each config per run: the dry run, the memory
// estimate and the latent shape read the same one.
template <class Model, class Config>
std::unique_ptr<Model> load_component(const ModelIndex& index, const char* name) {
  const ComponentEntry& entry = index.component(name);
  Config config = Config::from_json(index.config(name), component_config_path(entry).string());
  WeightStore weights = component_weight_store(entry);
  if constexpr (requires(const Model& model, const models::ParameterVisitor& visit) {
                  model.list_parameters(visit);
                }) {
    if (!entry.loras.empty()) {
      // The model as the checkpoint gives it lists its parameters; the LoRAs are checked against
      // that list and merged into the weights it then reads.
      const Model plain(config, weights);
      lora::ModuleNames original_names = [](const std::string&) {
        return std::vector<lora::LoraTarget>{};
      };
      if constexpr (requires(const std::string& module) { plain.lora_targets(module); })
        original_names = [&plain](const std::string& module) { return plain.lora_targets(module); };
      weights = with_loras(
          entry, weights,
          [&](const models::ParameterVisitor& visit) { plain.list_parameters(visit); },
          original_names);
    }
  } else {
    check(entry.loras.empty(), "--lora-path: the {} ({}) takes no LoRA", entry.name,
          entry.class_name);
  }
  return std::make_unique<Model>(std::move(config), std::move(weights));
}

// The scheduler model_index.json names, with its config: settings it does not implement are
// refused here, before any work, and a config saved for another class is logged (diffusers builds
// the class the index names from any scheduler_config.json; only the settings both share carry
// over).
struct SchedulerSpec {
  std::string class_name;
  nlohmann::json config;
  static SchedulerSpec load(const ModelIndex& index);
};

// The paged backend the plan chose for a text encoder component, or "" (the model's own choice).
std::string planned_backend(const AttentionPlan& plan, const std::string& component);

// The VAE's mid-block attention is dense: it runs the backend the plan chose for "vae" (fa or
// torch_sdpa), when the plan has one.
template <class Vae>
void plan_vae_attention(Vae& vae, const AttentionPlan& plan) {
  vae.set_attention(dense_component_layer(plan, "vae"));
}

// One model of a pipeline as place_models moves it: where it is, and how it moves there (a text
// encoder takes its GPU backend along).
struct ModelMove {
  std::function<Device()> device;
  std::function<void(Device)> move;
};
template <class Model>
ModelMove plain_move(Model& model) {
  return {[&model] { return model.device(); }, [&model](Device to) { model.set_device(to); }};
}

// Every model on the run's device (--device cuda needs a CUDA build), under one progress stage
// ("upload" or "place"); nothing happens when all are there already. Whether any moved.
bool place_models(bool cuda, std::initializer_list<ModelMove> models);

// A pipeline of class `Pipeline` built under the "load" progress stage, shared by its runner's
// calls (generate() is const and builds fresh attention state per run, so runs do not affect each
// other).
template <class Pipeline>
std::shared_ptr<const Pipeline> load_pipeline(const ModelIndex& index, const AttentionPlan& plan) {
  Progress load("load", 1);
  auto pipeline = std::make_shared<const Pipeline>(index, plan);
  load.finish();
  return pipeline;
}

// The runner of a pipeline that keeps nothing between requests: each request becomes an input
// (`to_input(request, pipeline)`) and one generate().
template <class Pipeline, class ToInput>
PipelineRunner plain_runner(const ModelIndex& index, const AttentionPlan& plan, ToInput to_input) {
  std::shared_ptr<const Pipeline> pipeline = load_pipeline<Pipeline>(index, plan);
  PipelineRunner runner;
  runner.run = [pipeline, to_input](const Request& request) {
    return pipeline->generate(to_input(request, *pipeline)).frames;
  };
  return runner;
}

}  // namespace mmgen
