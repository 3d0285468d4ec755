#include "pipeline/qwenimage_memory.h"

#include <omp.h>

#include <algorithm>

#include "models/dit/qwenimage_config.h"
#include "models/text_encoders/qwen3_config.h"
#include "models/text_encoders/qwenimage_prompt_embedding.h"
#include "pipeline/prompt_encoding.h"
#include "pipeline/wan_memory.h"

namespace mmgen {
namespace {

constexpr uint64_t kFloat = 4;
// As pipeline/zimage_memory.cpp: the process before any model, a parsed tokenizer against its
// files, and the allocator's fragmentation slack.
constexpr uint64_t kRuntimeBytes = 64ull << 20;
constexpr uint64_t kTokenizerExpansion = 6;
constexpr double kAllocatorSlack = 1.75;

uint64_t tensor_bytes(const ModelInventory& inventory, const char* name) {
  const ComponentInventory* component = inventory.find(name);
  return component ? component->tensor_bytes : 0;
}

uint64_t parameters(const ModelInventory& inventory, const char* name) {
  const ComponentInventory* component = inventory.find(name);
  return component ? uint64_t(component->parameters) : 0;
}

uint64_t conversion_bytes(const ModelInventory& inventory, const char* name, int64_t layers) {
  const ComponentInventory* component = inventory.find(name);
  if (!component || layers <= 0) return 0;
  const int64_t stored_f32 =
      component->dtype_parameters.count("f32") ? component->dtype_parameters.at("f32") : 0;
  const int64_t converted = component->parameters - stored_f32;
  return converted > 0 ? uint64_t(converted / layers) * kFloat : 0;
}

bool true_cfg(const Request& request) {
  return request.true_cfg_scale > 1.0 && !request.negative_prompt.empty();
}

// The prompts (and the negative one), each up to the template plus max_sequence_length tokens, in
// one packed forward: the KV pool of every layer, allocated whole, and one layer's activations.
uint64_t text_encoder_bytes(const Request& request, const ModelIndex& index,
                            const ModelInventory& inventory) {
  const auto config = text_encoders::Qwen3Config::from_json(
      index.config("text_encoder"),
      component_config_path(index.component("text_encoder")).string());
  const uint64_t s =
      uint64_t(request.max_sequence_length + text_encoders::kQwenImageDropTokens + 8);
  const uint64_t t = (true_cfg(request) ? 2 : 1) * s;
  const uint64_t hidden = uint64_t(config.hidden_size);
  const uint64_t pool =
      uint64_t(kQwen3MinPoolTokensPerLength) * s *
      (uint64_t(config.num_hidden_layers) * 2 * uint64_t(config.kv_width()) + hidden);
  const uint64_t activations =
      3 * t * hidden + t * (2 * uint64_t(config.q_width()) + 2 * uint64_t(config.kv_width())) +
      3 * t * uint64_t(config.intermediate_size) + uint64_t(config.num_attention_heads) * s * s;
  return (pool + activations) * kFloat +
         conversion_bytes(inventory, "text_encoder", config.num_hidden_layers);
}

uint64_t transformer_bytes(const Request& request, const ModelIndex& index,
                           const ModelInventory& inventory, int64_t latent_h, int64_t latent_w) {
  const auto config = dit::QwenImageConfig::from_json(
      index.config("transformer"), component_config_path(index.component("transformer")).string());
  const uint64_t image = uint64_t((latent_h / 2) * (latent_w / 2));
  const uint64_t sequence = image + uint64_t(request.max_sequence_length);
  const uint64_t items = true_cfg(request) ? 2 : 1;
  const uint64_t dim = uint64_t(config.dim());
  const uint64_t block = items * sequence * (12 * dim + 2 * uint64_t(config.mlp_dim())) +
                         items * sequence * uint64_t(config.attention_head_dim);
  const uint64_t attention = uint64_t(std::max(1, omp_get_max_threads())) * 128 * sequence;
  const uint64_t state = 8 * image * uint64_t(config.in_channels);
  return (block + attention + state) * kFloat +
         conversion_bytes(inventory, "transformer", config.num_layers);
}

}  // namespace

MemoryEstimate estimate_qwen_image_memory(const Request& request, const ModelIndex& index,
                                          const ModelInventory& inventory) {
  MemoryEstimate estimate;
  for (const char* name : {"text_encoder", "transformer", "vae"})
    estimate.weights += tensor_bytes(inventory, name);
  estimate.overhead = kRuntimeBytes;
  if (const ComponentInventory* tokenizer = inventory.find("tokenizer"))
    estimate.overhead += tokenizer->on_disk_bytes * kTokenizerExpansion;
  const nlohmann::json& vae = index.config("vae");
  const int64_t temporal =
      vae.contains("temperal_downsample") && vae["temperal_downsample"].is_array()
          ? int64_t(vae["temperal_downsample"].size())
          : 3;
  const int64_t factor = int64_t(1) << temporal;  // diffusers' vae_scale_factor
  const int64_t latent_h = 2 * (request.height / (2 * factor));
  const int64_t latent_w = 2 * (request.width / (2 * factor));
  estimate.text_encoding = text_encoder_bytes(request, index, inventory);
  estimate.denoising = transformer_bytes(request, index, inventory, latent_h, latent_w);
  estimate.output = 3 * uint64_t(request.height * request.width) * kFloat;
  estimate.decoding = wan_vae_working_set(vae, request.height, request.width, 1);
  if (request.device == "cuda") {
    const uint64_t latents = uint64_t(latent_h * latent_w) * 16 * kFloat;
    estimate.text_encoding = 0;
    estimate.denoising = 6 * latents;
    estimate.decoding = estimate.output + estimate.output / 4;
  }
  for (uint64_t* stage : {&estimate.text_encoding, &estimate.denoising, &estimate.decoding})
    *stage = uint64_t(double(*stage) * kAllocatorSlack);
  return estimate;
}

GpuWeights estimate_qwen_image_gpu_weights(const Request&, const ModelIndex&,
                                           const ModelInventory& inventory) {
  GpuWeights weights;
  // bf16 products (the vision tower's weights stay on the host: text-only prompts never run it;
  // counted here as an upper bound).
  weights.text_encoder = parameters(inventory, "text_encoder") * 2;
  weights.transformer = parameters(inventory, "transformer") * 2;
  weights.vae = parameters(inventory, "vae") * kFloat;
  return weights;
}

}  // namespace mmgen
