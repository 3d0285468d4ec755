// The one attention builder: a transformer's attention::Layers for a run, from the attention plan
// and the model's traits (the stacks of layers its attention_stacks() names). Every pipeline calls
// it once per run; the model then runs each layer through attention::attend.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention/layer.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "pipeline/attention_plan.h"

namespace mmgen {

// The validated settings the plan holds for `backend` (its defaults when the plan has none).
nlohmann::json backend_config(const AttentionPlan& plan, const std::string& backend);

// Each stack's layers take the plan's backend for their kind of layer (the self-attention's for a
// kind the plan does not list, else the component's primary one), built for `device`
// (attention/layer_backend.h), with the extra checkpoint weights its descriptor reads from
// `weights` (float32 on the CPU; on the GPU as the backend's GPU half reads them). No plan for
// `component`: empty Layers (the dense reference everywhere).
attention::Layers build_attention_layers(const AttentionPlan& plan, const std::string& component,
                                         const std::vector<attention::StackTraits>& stacks,
                                         const WeightStore& weights, Device device);

// A run's attention for a pipeline's "transformer" component on `device`: the builder over the
// model's own stacks and weights.
template <class Transformer>
attention::Layers transformer_layers(const AttentionPlan& plan, const Transformer& model,
                                     Device device) {
  return build_attention_layers(plan, "transformer", model.attention_stacks(), model.weights(),
                                device);
}

// The layer of a component whose attention is dense and runs on the host (the VAE's mid-block
// attention; its GPU path is the VAE's own kernel): the plan's backend for it with its default
// settings, or the dense reference when the plan has none.
attention::Layer dense_component_layer(const AttentionPlan& plan, const std::string& component);

}  // namespace mmgen
