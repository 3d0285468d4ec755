#include "pipeline/flux/flux_memory.h"

#include <algorithm>

#include "models/dit/flux/flux_config.h"
#include "models/text_encoders/clip_config.h"
#include "models/text_encoders/clip_text_model.h"
#include "models/text_encoders/t5_config.h"
#include "models/text_encoders/umt5_encoder.h"
#include "models/vae/autoencoder_kl_config.h"
#include "pipeline/autoencoder_kl_memory.h"
#include "pipeline/joint_dit_memory.h"

namespace mmgen {
namespace {

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

// One prompt at a time through T5 (max_sequence_length tokens) and CLIP (77): the residual, its
// norm, q, k, v, the attention output, the gated MLP's two projections and their product, one
// sequence's scores per head; the larger of the two.
uint64_t flux_text_encoder_bytes(const Request& request, const ModelIndex& index,
                                 const ModelInventory& inventory) {
  const text_encoders::T5Config t5 = t5_config(index);
  const uint64_t s = uint64_t(request.max_sequence_length), d = uint64_t(t5.d_model);
  const uint64_t t5_bytes = (3 * s * d + 4 * s * uint64_t(t5.inner_dim()) +
                             3 * s * uint64_t(t5.d_ff) + uint64_t(t5.num_heads) * s * s) *
                                kFloatBytes +
                            layer_conversion_bytes(inventory, "text_encoder_2", t5.num_layers);
  const text_encoders::ClipTextConfig clip = clip_config(index);
  const uint64_t c = uint64_t(clip.max_position_embeddings), h = uint64_t(clip.hidden_size);
  const uint64_t clip_bytes = (7 * c * h + 2 * c * uint64_t(clip.intermediate_size) +
                               uint64_t(clip.num_attention_heads) * c * c) *
                              kFloatBytes;
  return std::max(t5_bytes, clip_bytes);
}

}  // namespace

MemoryEstimate estimate_flux_memory(const Request& request, const ModelIndex& index,
                                    const ModelInventory& inventory) {
  MemoryEstimate estimate;
  for (const char* name : {"text_encoder", "text_encoder_2", "transformer", "vae"})
    estimate.weights += component_tensor_bytes(inventory, name);
  estimate.overhead = kRuntimeBytes;
  for (const char* name : {"tokenizer", "tokenizer_2"})
    if (const ComponentInventory* tokenizer = inventory.find(name))
      estimate.overhead += tokenizer->on_disk_bytes * kTokenizerExpansion;
  const auto vae_config = vae::AutoencoderKLConfig::from_json(
      index.config("vae"), component_config_path(index.component("vae")).string());
  const int64_t factor = vae_config.spatial_factor();
  const int64_t latent_h = 2 * (request.height / (2 * factor));
  const int64_t latent_w = 2 * (request.width / (2 * factor));
  const auto config = dit::FluxConfig::from_json(
      index.config("transformer"), component_config_path(index.component("transformer")).string());
  estimate.text_encoding = flux_text_encoder_bytes(request, index, inventory);
  estimate.denoising =
      joint_dit_working_bytes({runs_true_cfg(request) ? 2 : 1, (latent_h / 2) * (latent_w / 2),
                               request.max_sequence_length, config.dim(), config.mlp_dim(),
                               config.attention_head_dim, config.in_channels}) +
      layer_conversion_bytes(inventory, "transformer",
                             config.num_layers + config.num_single_layers);
  estimate.output = autoencoder_kl_image_bytes(request, vae_config);
  estimate.decoding = autoencoder_kl_decode_bytes(request, vae_config);
  finish_joint_dit_estimate(estimate, request,
                            uint64_t(latent_h * latent_w * vae_config.latent_channels));
  return estimate;
}

GpuWeights estimate_flux_gpu_weights(const Request&, const ModelIndex& index,
                                     const ModelInventory& inventory) {
  GpuWeights weights;
  weights.text_encoder = text_encoders::ClipTextModel::gpu_weight_bytes(clip_config(index)) +
                         text_encoders::UMT5Encoder::gpu_weight_bytes(t5_config(index));
  // Products in bf16; the biases and norms (under 0.1% of FLUX's parameters) counted alike.
  weights.transformer = component_parameters(inventory, "transformer") * 2;
  weights.vae = component_parameters(inventory, "vae") * kFloatBytes;
  return weights;
}

}  // namespace mmgen
