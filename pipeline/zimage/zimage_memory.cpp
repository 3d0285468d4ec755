#include "pipeline/zimage/zimage_memory.h"

#include <omp.h>

#include <algorithm>

#include "models/dit/zimage/zimage_config.h"
#include "models/text_encoders/qwen3_config.h"
#include "models/vae/autoencoder_kl_config.h"
#include "pipeline/autoencoder_kl_memory.h"
#include "pipeline/joint_dit_memory.h"
#include "pipeline/prompt_encoding.h"

namespace mmgen {

namespace {

// The allocator's fragmentation slack, as pipeline/wan/wan_memory.cpp measures it (the runtime and
// tokenizer figures are memory_estimate.h's).
constexpr double kZImageAllocatorSlack = 1.75;
// ZImageTransformer pads each item's image and caption tokens to multiples of this.
constexpr int64_t kSequenceMultiple = 32;

uint64_t round_up(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Prompt and negative prompt, each at most max_sequence_length tokens, packed into one forward of
// the first L − 1 layers.
uint64_t zimage_text_encoder_bytes(const Request& request, const ModelIndex& index,
                                   const ModelInventory& inventory) {
  const auto config = text_encoders::Qwen3Config::from_json(
      index.config("text_encoder"),
      component_config_path(index.component("text_encoder")).string());
  const uint64_t s = uint64_t(request.max_sequence_length);
  const uint64_t prompts = request.guidance_scale > 0 ? 2 : 1;
  const uint64_t t = prompts * s;
  const uint64_t hidden = uint64_t(config.hidden_size);
  const uint64_t layers = uint64_t(std::max<int64_t>(config.num_hidden_layers - 1, 1));
  // The KV pool, allocated whole: keys and values of every encoder layer, plus the cached
  // hidden_states[-2] row of each token.
  const uint64_t pool = uint64_t(kQwen3MinPoolTokensPerLength) * s *
                        (layers * 2 * uint64_t(config.kv_width()) + hidden);
  // hidden, residual, normed; q, k, v, attention output; the gated MLP's two projections and
  // their product; one sequence's score matrix per head.
  const uint64_t activations =
      3 * t * hidden + t * (2 * uint64_t(config.q_width()) + 2 * uint64_t(config.kv_width())) +
      3 * t * uint64_t(config.intermediate_size) + uint64_t(config.num_attention_heads) * s * s;
  const uint64_t embeddings = t * hidden;
  return (pool + activations + embeddings) * kFloatBytes +
         layer_conversion_bytes(inventory, "text_encoder", config.num_hidden_layers);
}

// Up to two items (prompt and negative prompt) of image tokens plus caption tokens each.
uint64_t transformer_bytes(const Request& request, const ModelIndex& index,
                           const ModelInventory& inventory, int64_t latent_h, int64_t latent_w) {
  const auto config = dit::ZImageConfig::from_json(
      index.config("transformer"), component_config_path(index.component("transformer")).string());
  const uint64_t image = round_up(
      uint64_t((latent_h / config.patch_size) * (latent_w / config.patch_size)), kSequenceMultiple);
  const uint64_t caption = round_up(uint64_t(request.max_sequence_length), kSequenceMultiple);
  const uint64_t items = request.guidance_scale > 0 ? 2 : 1;
  const uint64_t tokens = items * (image + caption);
  const uint64_t dim = uint64_t(config.dim);
  // Per block: the residual stream, its normed copy, q, k, v, the attention output and its
  // projection, the modulated copies; the feed-forward's two projections and their product;
  // RoPE's cos/sin tables.
  const uint64_t block = 8 * tokens * dim + 3 * tokens * uint64_t(config.ffn_dim()) +
                         2 * tokens * uint64_t(config.head_dim());
  // Attention kernels: per thread a query block's scores over one item's keys.
  const uint64_t attention = uint64_t(omp_get_max_threads()) * 128 * (image + caption);
  // Latents, the predictions, the guided and negated copies, the scheduler's output.
  const uint64_t latent = uint64_t(config.in_channels * latent_h * latent_w);
  const uint64_t state = 8 * latent;
  return (block + attention + state) * kFloatBytes +
         layer_conversion_bytes(inventory, "transformer", config.n_layers);
}

}  // namespace

MemoryEstimate estimate_zimage_memory(const Request& request, const ModelIndex& index,
                                      const ModelInventory& inventory) {
  MemoryEstimate estimate;
  estimate.weights = component_tensor_bytes(inventory, "text_encoder") +
                     component_tensor_bytes(inventory, "transformer") +
                     component_tensor_bytes(inventory, "vae");
  const ComponentInventory* tokenizer = inventory.find("tokenizer");
  estimate.overhead =
      kRuntimeBytes + (tokenizer ? tokenizer->on_disk_bytes * kTokenizerExpansion : 0);
  const auto vae_config = vae::AutoencoderKLConfig::from_json(
      index.config("vae"), component_config_path(index.component("vae")).string());
  const int64_t factor = vae_config.spatial_factor();
  estimate.text_encoding = zimage_text_encoder_bytes(request, index, inventory);
  estimate.denoising =
      transformer_bytes(request, index, inventory, request.height / factor, request.width / factor);
  estimate.output = autoencoder_kl_image_bytes(request, vae_config);
  estimate.decoding = autoencoder_kl_decode_bytes(request, vae_config);
  const uint64_t image = estimate.output;
  if (request.device == "cuda") {
    // The encoder, the transformer and the VAE run on the GPU: the host holds the mapped weights,
    // the latents and the image coming back (GPU memory is not estimated yet).
    const uint64_t latents = uint64_t(request.height / factor) * uint64_t(request.width / factor) *
                             uint64_t(vae_config.latent_channels) * kFloatBytes;
    estimate.text_encoding = 0;
    estimate.denoising = 4 * latents;
    estimate.decoding = image + image / 4;
  }
  for (uint64_t* stage : {&estimate.text_encoding, &estimate.denoising, &estimate.decoding})
    *stage = uint64_t(double(*stage) * kZImageAllocatorSlack);
  return estimate;
}

}  // namespace mmgen
