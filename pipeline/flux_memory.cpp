#include "pipeline/flux_memory.h"

#include <omp.h>

#include <algorithm>

#include "models/dit/flux_config.h"
#include "models/text_encoders/clip_config.h"
#include "models/text_encoders/clip_text_model.h"
#include "models/text_encoders/t5_config.h"
#include "models/text_encoders/umt5_encoder.h"
#include "models/vae/autoencoder_kl_config.h"
#include "pipeline/autoencoder_kl_memory.h"

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

// One layer's non-float32 weights converted to float32 while it runs.
uint64_t conversion_bytes(const ModelInventory& inventory, const char* name, int64_t layers) {
  const ComponentInventory* component = inventory.find(name);
  if (!component || layers <= 0) return 0;
  const int64_t stored_f32 =
      component->dtype_parameters.count("f32") ? component->dtype_parameters.at("f32") : 0;
  const int64_t converted = component->parameters - stored_f32;
  return converted > 0 ? uint64_t(converted / layers) * kFloat : 0;
}

text_encoders::T5Config t5_config(const ModelIndex& index) {
  return text_encoders::T5Config::from_json(
      index.config("text_encoder_2"),
      component_config_path(index.component("text_encoder_2")).string());
}

text_encoders::ClipTextConfig clip_config(const ModelIndex& index) {
  return text_encoders::ClipTextConfig::from_json(
      index.config("text_encoder"),
      component_config_path(index.component("text_encoder")).string());
}

dit::FluxConfig transformer_config(const ModelIndex& index) {
  return dit::FluxConfig::from_json(index.config("transformer"),
                                    component_config_path(index.component("transformer")).string());
}

bool true_cfg(const Request& request) {
  return request.true_cfg_scale > 1.0 && !request.negative_prompt.empty();
}

// One prompt at a time through T5 (max_sequence_length tokens) and CLIP (77): the residual, its
// norm, q, k, v, the attention output, the gated MLP's two projections and their product, one
// sequence's scores per head.
uint64_t text_encoder_bytes(const Request& request, const ModelIndex& index,
                            const ModelInventory& inventory) {
  const text_encoders::T5Config t5 = t5_config(index);
  const uint64_t s = uint64_t(request.max_sequence_length), d = uint64_t(t5.d_model);
  const uint64_t t5_bytes = (3 * s * d + 4 * s * uint64_t(t5.inner_dim()) +
                             3 * s * uint64_t(t5.d_ff) + uint64_t(t5.num_heads) * s * s) *
                                kFloat +
                            conversion_bytes(inventory, "text_encoder_2", t5.num_layers);
  const text_encoders::ClipTextConfig clip = clip_config(index);
  const uint64_t c = uint64_t(clip.max_position_embeddings), h = uint64_t(clip.hidden_size);
  const uint64_t clip_bytes = (7 * c * h + 2 * c * uint64_t(clip.intermediate_size) +
                               uint64_t(clip.num_attention_heads) * c * c) *
                              kFloat;
  return std::max(t5_bytes, clip_bytes);
}

// One or two items (true CFG) of text + image tokens; per block the streams, their normed copies,
// q, k, v, the attention output and projections, the MLP's hidden rows; RoPE tables per item.
uint64_t transformer_bytes(const Request& request, const ModelIndex& index,
                           const ModelInventory& inventory, int64_t latent_h, int64_t latent_w) {
  const dit::FluxConfig config = transformer_config(index);
  const uint64_t image = uint64_t((latent_h / 2) * (latent_w / 2));
  const uint64_t sequence = image + uint64_t(request.max_sequence_length);
  const uint64_t items = true_cfg(request) ? 2 : 1;
  const uint64_t dim = uint64_t(config.dim());
  const uint64_t block = items * sequence * (12 * dim + 2 * uint64_t(config.mlp_dim())) +
                         items * sequence * uint64_t(config.attention_head_dim);
  const uint64_t attention = uint64_t(std::max(1, omp_get_max_threads())) * 128 * sequence;
  const uint64_t state = 8 * image * uint64_t(config.in_channels);
  return (block + attention + state) * kFloat +
         conversion_bytes(inventory, "transformer", config.num_layers + config.num_single_layers);
}

}  // namespace

MemoryEstimate estimate_flux_memory(const Request& request, const ModelIndex& index,
                                    const ModelInventory& inventory) {
  MemoryEstimate estimate;
  for (const char* name : {"text_encoder", "text_encoder_2", "transformer", "vae"})
    estimate.weights += tensor_bytes(inventory, name);
  estimate.overhead = kRuntimeBytes;
  for (const char* name : {"tokenizer", "tokenizer_2"})
    if (const ComponentInventory* tokenizer = inventory.find(name))
      estimate.overhead += tokenizer->on_disk_bytes * kTokenizerExpansion;
  const auto vae_config = vae::AutoencoderKLConfig::from_json(
      index.config("vae"), component_config_path(index.component("vae")).string());
  const int64_t factor = vae_config.spatial_factor();
  const int64_t latent_h = 2 * (request.height / (2 * factor));
  const int64_t latent_w = 2 * (request.width / (2 * factor));
  estimate.text_encoding = text_encoder_bytes(request, index, inventory);
  estimate.denoising = transformer_bytes(request, index, inventory, latent_h, latent_w);
  estimate.output = autoencoder_kl_image_bytes(request, vae_config);
  estimate.decoding = autoencoder_kl_decode_bytes(request, vae_config);
  if (request.device == "cuda") {
    // Every component runs on the GPU: the host holds the mapped weights, the latents and the
    // image coming back.
    const uint64_t latents =
        uint64_t(latent_h * latent_w) * uint64_t(vae_config.latent_channels) * kFloat;
    estimate.text_encoding = 0;
    estimate.denoising = 6 * latents;
    estimate.decoding = estimate.output + estimate.output / 4;
  }
  for (uint64_t* stage : {&estimate.text_encoding, &estimate.denoising, &estimate.decoding})
    *stage = uint64_t(double(*stage) * kAllocatorSlack);
  return estimate;
}

GpuWeights estimate_flux_gpu_weights(const Request&, const ModelIndex& index,
                                     const ModelInventory& inventory) {
  GpuWeights weights;
  weights.text_encoder = text_encoders::ClipTextModel::gpu_weight_bytes(clip_config(index)) +
                         text_encoders::UMT5Encoder::gpu_weight_bytes(t5_config(index));
  // Products in bf16; the biases and norms (under 0.1% of FLUX's parameters) counted alike.
  weights.transformer = parameters(inventory, "transformer") * 2;
  weights.vae = parameters(inventory, "vae") * kFloat;
  return weights;
}

}  // namespace mmgen
