#include "pipeline/attention_layers.h"

#include <spdlog/spdlog.h>

#include <memory>

#include "attention/backend_config.h"
#include "attention/layer_backend.h"

namespace mmgen {

namespace {

// The backend the plan chose for a kind of layer of the component.
std::string planned_backend_for(const attention::ComponentChoice& choice,
                                attention::LayerKind kind) {
  for (const auto& layer : choice.layers)
    if (layer.kind == kind) return layer.backend;
  for (const auto& layer : choice.layers)
    if (layer.kind == attention::LayerKind::SelfAttention) return layer.backend;
  return choice.primary().backend;
}

// Extra weights of block `layer`: every checkpoint tensor under `prefix` + layer + "." whose name
// holds one of the fragments at a module boundary (blocks.3.to_gate_compress.weight,
// blocks.3.attn1.proj_l.weight), keyed by the fragment and what follows it, float32.
attention::LayerWeights layer_weights(const WeightStore& store,
                                      const std::vector<std::string>& names,
                                      const std::vector<std::string>& fragments,
                                      const std::string& block_prefix, int64_t layer) {
  attention::LayerWeights weights;
  const std::string prefix = block_prefix + std::to_string(layer) + ".";
  for (const auto& name : names) {
    if (name.rfind(prefix, 0) != 0) continue;
    for (const auto& fragment : fragments) {
      const size_t at = name.find(fragment, prefix.size());
      if (at == std::string::npos || (at != prefix.size() && name[at - 1] != '.')) continue;
      weights[name.substr(at)] = store.get_f32(name);
    }
  }
  return weights;
}

}  // namespace

nlohmann::json backend_config(const AttentionPlan& plan, const std::string& backend) {
  auto it = plan.backend_configs.find(backend);
  if (it != plan.backend_configs.end()) return it->second;
  return attention::validate_backend_config(nlohmann::json::object(), backend);
}

attention::Layers build_attention_layers(const AttentionPlan& plan, const std::string& component,
                                         const std::vector<attention::StackTraits>& stacks,
                                         const WeightStore& weights, Device device) {
  attention::Layers layers;
  const attention::ComponentChoice* choice = planned_component(plan, component);
  if (!choice) return layers;
  for (const attention::StackTraits& stack : stacks) {
    const std::string backend = planned_backend_for(*choice, stack.kind);
    const nlohmann::json config = backend_config(plan, backend);
    const std::vector<std::string> fragments = stack.block_prefix.empty()
                                                   ? std::vector<std::string>()
                                                   : attention::extra_weight_fragments(backend);
    const std::vector<std::string> names =
        fragments.empty() ? std::vector<std::string>() : weights.names();
    // The GPU's backend serves every layer of the stack; each CPU layer gets its own.
    std::shared_ptr<attention::AttentionBackend> shared;
    if (device != Device::CPU)
      shared = attention::make_layer_backend(backend, config, plan.resources, stack, device);
    std::vector<attention::Layer> built;
    int64_t with_weights = 0;
    for (int64_t i = 0; i < stack.layers; ++i) {
      attention::LayerWeights extra =
          layer_weights(weights, names, fragments, stack.block_prefix, i);
      with_weights += !extra.empty();
      if (device != Device::CPU)
        for (auto& [key, tensor] : extra)
          tensor = attention::extra_weight_in_compute_dtype(backend, key)
                       ? tensor.to(DType::BF16).to(device)
                       : tensor.to(device);
      built.emplace_back(
          shared ? shared
                 : attention::make_layer_backend(backend, config, plan.resources, stack, device),
          std::move(extra));
    }
    if (!fragments.empty())
      spdlog::info("attention: {} found its extra weights ({}*) in {} of {} {} {} layers", backend,
                   fragments.front(), with_weights, stack.layers, component, stack.name);
    layers.set_stack(stack.name, std::move(built));
  }
  return layers;
}

attention::Layer dense_component_layer(const AttentionPlan& plan, const std::string& component) {
  const attention::ComponentChoice* choice = planned_component(plan, component);
  if (!choice) return attention::Layer();
  // Default settings: make_layer_backend's CPU factory validates them (fills the defaults in).
  return attention::Layer(
      attention::make_layer_backend(choice->primary().backend, nlohmann::json::object(), {},
                                    {.name = component, .layers = 1}, Device::CPU));
}

}  // namespace mmgen
