#include "pipeline/qwenimage/qwenimage_memory.h"

#include "models/dit/qwenimage/qwenimage_config.h"
#include "models/text_encoders/qwen3_config.h"
#include "models/text_encoders/qwenimage_prompt_embedding.h"
#include "pipeline/joint_dit_memory.h"
#include "pipeline/prompt_encoding.h"
#include "pipeline/wan/wan_memory.h"

namespace mmgen {
namespace {

// The prompt (and the negative one), each the template plus up to max_sequence_length tokens, in
// one packed forward: every layer's KV pool, allocated whole, and one layer's activations.
uint64_t qwenimage_text_encoder_bytes(const Request& request, const ModelIndex& index,
                                      const ModelInventory& inventory) {
  const auto config = text_encoders::Qwen3Config::from_json(
      index.config("text_encoder"),
      component_config_path(index.component("text_encoder")).string());
  const uint64_t s =
      uint64_t(request.max_sequence_length + text_encoders::kQwenImageDropTokens + 8);
  const uint64_t t = (runs_true_cfg(request) ? 2 : 1) * s;
  const uint64_t hidden = uint64_t(config.hidden_size);
  const uint64_t pool =
      uint64_t(kQwen3MinPoolTokensPerLength) * s *
      (uint64_t(config.num_hidden_layers) * 2 * uint64_t(config.kv_width()) + hidden);
  const uint64_t activations =
      3 * t * hidden + t * (2 * uint64_t(config.q_width()) + 2 * uint64_t(config.kv_width())) +
      3 * t * uint64_t(config.intermediate_size) + uint64_t(config.num_attention_heads) * s * s;
  return (pool + activations) * kFloatBytes +
         layer_conversion_bytes(inventory, "text_encoder", config.num_hidden_layers);
}

}  // namespace

MemoryEstimate estimate_qwen_image_memory(const Request& request, const ModelIndex& index,
                                          const ModelInventory& inventory) {
  MemoryEstimate estimate;
  for (const char* name : {"text_encoder", "transformer", "vae"})
    estimate.weights += component_tensor_bytes(inventory, name);
  estimate.overhead = kRuntimeBytes;
  if (const ComponentInventory* tokenizer = inventory.find("tokenizer"))
    estimate.overhead += tokenizer->on_disk_bytes * kTokenizerExpansion;
  const nlohmann::json& vae = index.config("vae");
  const int64_t levels =
      vae.contains("temperal_downsample") && vae["temperal_downsample"].is_array()
          ? int64_t(vae["temperal_downsample"].size())
          : 3;
  const int64_t factor = int64_t(1) << levels;  // diffusers' vae_scale_factor
  const int64_t latent_h = 2 * (request.height / (2 * factor));
  const int64_t latent_w = 2 * (request.width / (2 * factor));
  const auto config = dit::QwenImageConfig::from_json(
      index.config("transformer"), component_config_path(index.component("transformer")).string());
  estimate.text_encoding = qwenimage_text_encoder_bytes(request, index, inventory);
  estimate.denoising =
      joint_dit_working_bytes({runs_true_cfg(request) ? 2 : 1, (latent_h / 2) * (latent_w / 2),
                               request.max_sequence_length, config.dim(), config.mlp_dim(),
                               config.attention_head_dim, config.in_channels}) +
      layer_conversion_bytes(inventory, "transformer", config.num_layers);
  estimate.output = 3 * uint64_t(request.height * request.width) * kFloatBytes;
  estimate.decoding = wan_vae_working_set(vae, request.height, request.width, 1);
  finish_joint_dit_estimate(estimate, request, uint64_t(latent_h * latent_w) * 16);
  return estimate;
}

GpuWeights estimate_qwen_image_gpu_weights(const Request&, const ModelIndex&,
                                           const ModelInventory& inventory) {
  GpuWeights weights;
  // bf16 products (the vision tower stays on the host: text prompts never run it; counted here
  // as an upper bound).
  weights.text_encoder = component_parameters(inventory, "text_encoder") * 2;
  weights.transformer = component_parameters(inventory, "transformer") * 2;
  weights.vae = component_parameters(inventory, "vae") * kFloatBytes;
  return weights;
}

}  // namespace mmgen
