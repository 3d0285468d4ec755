#include "pipeline/wan/wan_memory.h"

#include <omp.h>

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "models/dit/wan/wan_transformer.h"
#include "models/dit/wan/wan_transformer_config.h"
#include "models/dit/wan/wan_weights.h"
#include "models/text_encoders/t5_config.h"
#include "models/text_encoders/umt5_encoder.h"
#include "models/vae/wan_vae_config.h"
#include "pipeline/component_weights.h"
#include "pipeline/joint_dit_memory.h"

namespace mmgen {

namespace {

// core/conv_cpu.cpp's kColumnBudget: floats of im2col columns per thread at most.
constexpr uint64_t kColumnBudget = uint64_t(1) << 22;
// Freed buffers below glibc's mmap threshold (which grows up to 32 MiB) stay in the heap and
// fragment it: the tiny model's measured peaks exceeded the buffers counted here by 1.3x to 1.7x,
// varying from run to run with the threads' timing (1.0x with MALLOC_MMAP_THRESHOLD_ fixed).
// With the VAE's last chunk keeping no history, the 256x256x5 decode peaks at 148-153 MiB (161
// before), which 1.5 covers and 1.75 overshot by 1.6x.
// Stage working sets are scaled by this.
constexpr double kWanAllocatorSlack = 1.5;
// wan_block.cpp's kFfnChunkRows: the feed-forward runs over at most this many tokens at once.
constexpr int64_t kFfnChunkRows = 4096;

uint64_t wan_text_encoder_bytes(const Request& request, const ModelIndex& index,
                                const ModelInventory& inventory) {
  if (!index.has("text_encoder")) return 0;
  const auto config = text_encoders::T5Config::from_json(
      index.config("text_encoder"),
      component_config_path(index.component("text_encoder")).string());
  const uint64_t s = uint64_t(request.max_sequence_length);
  const uint64_t inner = uint64_t(config.inner_dim()), model = uint64_t(config.d_model);
  // hidden, normed, residual, output; q, k, v, attention output; the score matrix of one layer;
  // the gated feed-forward's two projections and their product.
  const uint64_t activations = (4 * s * model + 4 * s * inner + uint64_t(config.num_heads) * s * s +
                                3 * s * uint64_t(config.d_ff)) *
                               kFloatBytes;
  // The paged backend keeps every layer's keys and values of the prompt.
  const uint64_t kv = uint64_t(config.num_layers) * 2 * s * inner * kFloatBytes;
  // Two prompts (with guidance) encoded one after the other; their embeddings stay.
  const uint64_t embeddings = 2 * s * model * kFloatBytes;
  return activations + kv + embeddings +
         layer_conversion_bytes(inventory, "text_encoder", config.num_layers);
}

uint64_t transformer_bytes(const Request& request, const ModelIndex& index,
                           const ModelInventory& inventory, const Shape& latent) {
  const auto config = dit::WanTransformerConfig::from_json(
      index.config("transformer"), component_config_path(index.component("transformer")).string());
  const auto [pt, ph, pw] = config.patch_size;
  const uint64_t tokens = uint64_t((latent[2] / pt) * (latent[3] / ph) * (latent[4] / pw));
  const uint64_t dim = uint64_t(config.inner_dim());
  const uint64_t text = uint64_t(request.max_sequence_length);
  // Per block: the residual stream, its normed copy, q, k, v, the attention output and its
  // projection; the cross-attention's keys and values over the text; the feed-forward chunk's
  // hidden layer and output; RoPE's cos/sin pair tables.
  const uint64_t block = 7 * tokens * dim + 2 * text * dim +
                         uint64_t(std::min<int64_t>(int64_t(tokens), kFfnChunkRows)) *
                             (uint64_t(config.ffn_dim) + dim) +
                         2 * tokens * uint64_t(config.attention_head_dim);
  // Attention kernels: per thread a query block's scores over all keys (128 x tokens).
  const uint64_t attention = uint64_t(omp_get_max_threads()) * 128 * (tokens + text);
  // Latents, noise prediction(s), guidance result, the scheduler's previous outputs and sample.
  uint64_t latent_elements = 1;
  for (int64_t size : latent) latent_elements *= uint64_t(size);
  const uint64_t state = 8 * latent_elements;
  return (block + attention + state) * kFloatBytes +
         layer_conversion_bytes(inventory, "transformer", config.num_layers);
}

}  // namespace

uint64_t wan_vae_working_set(const nlohmann::json& config_json, int64_t height, int64_t width,
                             int64_t latent_frames) {
  const auto config = vae::WanVaeConfig::from_json(config_json);
  const std::vector<int64_t>& mult = config.dim_mult;
  const uint64_t base = uint64_t(config.decoder_dim());
  std::vector<uint64_t> dims = {base * uint64_t(mult.back())};
  for (auto m = mult.rbegin(); m != mult.rend(); ++m) dims.push_back(base * uint64_t(*m));
  const std::vector<bool> temporal = config.temporal_upsample();
  const int64_t blocks = int64_t(mult.size());
  const int64_t factor = config.spatial_factor();
  // The latent region, rounded up.
  const uint64_t h0 = uint64_t((height + factor - 1) / factor),
                 w0 = uint64_t((width + factor - 1) / factor);

  // Causal convolutions keep their last two input frames (one after the first latent frame) for
  // the whole decode; the first latent frame's convolutions skip the zero taps of causal padding.
  const uint64_t kept = latent_frames > 1 ? 2 : 1, taps = latent_frames > 1 ? 3 : 1;
  uint64_t history = kept * uint64_t(config.z_dim) * h0 * w0;  // conv_in
  history += 2 * 2 * kept * dims[0] * h0 * w0;                 // two mid resnets, two convs each
  uint64_t peak = 0;
  uint64_t frames = 1, scale = 1;
  for (int64_t i = 0; i < blocks; ++i) {
    const uint64_t in_dim = i > 0 ? dims[size_t(i)] / 2 : dims[size_t(i)];
    const uint64_t out_dim = dims[size_t(i) + 1];
    const uint64_t plane = h0 * w0 * scale * scale;
    for (int64_t j = 0; j <= config.num_res_blocks; ++j)
      history += kept * ((j == 0 ? in_dim : out_dim) + out_dim) * plane;
    // A residual block holds its input, the shortcut, the normed copy and the convolution's
    // output, plus the convolution's im2col columns.
    // The largest 3x3x3 convolution's im2col: each thread fills bands of at most
    // core/conv_cpu.cpp's column budget (4M floats), never more than the whole frame's columns.
    const uint64_t columns =
        std::min<uint64_t>(taps * 9 * std::max(in_dim, out_dim) * plane,
                           uint64_t(std::max(1, omp_get_max_threads())) * kColumnBudget);
    peak = std::max(peak, frames * plane * (in_dim + 3 * out_dim) + columns);
    if (i + 1 < blocks) {
      // The first latent frame stays one frame ("Rep"); later ones double in time here.
      const bool doubles = temporal[size_t(i)] && latent_frames > 1;
      if (doubles) history += kept * out_dim * plane;  // time_conv
      const uint64_t next_frames = doubles ? frames * 2 : frames;
      // The upsampler's input, time_conv's doubled output, the upsampled output.
      peak = std::max(peak, frames * plane * out_dim * (doubles ? 3 : 1) +
                                next_frames * plane * 4 * (out_dim / 2));
      frames = next_frames;
      scale *= 2;
    }
  }
  history += kept * dims.back() * h0 * w0 * scale * scale;  // conv_out
  // The last chunk keeps nothing (models/vae: StreamState::last_chunk), and one latent frame is
  // the last chunk.
  if (latent_frames == 1) history = 0;
  // The mid block's attention: q, k, v over the latent plane and each thread's score rows.
  const uint64_t attention =
      3 * dims[0] * h0 * w0 + uint64_t(omp_get_max_threads()) * 128 * h0 * w0;
  return (history + std::max(peak, attention)) * kFloatBytes;
}

MemoryEstimate estimate_wan_memory(const Request& request, const ModelIndex& index,
                                   const ModelInventory& inventory) {
  MemoryEstimate estimate;
  estimate.weights = component_tensor_bytes(inventory, "text_encoder") +
                     component_tensor_bytes(inventory, "transformer") +
                     component_tensor_bytes(inventory, "vae");
  const ComponentInventory* tokenizer = inventory.find("tokenizer");
  estimate.overhead =
      kRuntimeBytes + (tokenizer ? tokenizer->on_disk_bytes * kTokenizerExpansion : 0);

  const nlohmann::json& vae_json = index.config("vae");
  const auto vae_config = vae::WanVaeConfig::from_json(vae_json);
  const int64_t spatial = vae_config.scale_factor_spatial;
  const Shape latent = {1, vae_config.z_dim,
                        (request.num_frames - 1) / vae_config.scale_factor_temporal + 1,
                        request.height / spatial, request.width / spatial};
  estimate.text_encoding = wan_text_encoder_bytes(request, index, inventory);
  estimate.denoising = transformer_bytes(request, index, inventory, latent);

  const uint64_t frames = uint64_t(vae_config.output_frames(latent[2]));
  const uint64_t video = frames * uint64_t(vae_config.out_channels) * uint64_t(request.height) *
                         uint64_t(request.width) * kFloatBytes;
  if (request.vae_tiling) {
    // A tile's core plus the halo on both sides (models/vae/tiled_decode.h), inside the frame.
    const int64_t region = request.vae_tile_size + 2 * vae_config.tail_radius() * spatial;
    const int64_t tile_h = std::min(request.height, region);
    const int64_t tile_w = std::min(request.width, region);
    // The heads of every latent frame are kept at latent resolution (the decoder's widest
    // channel count).
    const uint64_t heads = uint64_t(latent[2] * latent[3] * latent[4]) *
                           uint64_t(vae_config.decoder_dim() * vae_config.dim_mult.back()) *
                           kFloatBytes;
    // The weight plane of the blend.
    const uint64_t weights = uint64_t(request.height * request.width) * kFloatBytes;
    estimate.decoding = wan_vae_working_set(vae_json, tile_h, tile_w, latent[2]) + heads + weights;
  } else {
    estimate.decoding = wan_vae_working_set(vae_json, request.height, request.width, latent[2]);
  }
  // The decoded video; after the decode it becomes frames (two copies while it is permuted) and
  // 8-bit pixels for the writer, hence at least twice the video while the decoder has finished.
  estimate.output = video;
  if (request.device == "cuda") {
    // The text encoder, the transformer and the VAE decoder run on the GPU: the host holds the
    // mapped weights, the latents and the video coming back (GPU memory is not estimated yet).
    uint64_t latent_elements = 1;
    for (int64_t size : latent) latent_elements *= uint64_t(size);
    estimate.text_encoding = 0;
    estimate.denoising = 2 * latent_elements * kFloatBytes;
    estimate.decoding = 0;
  }
  estimate.decoding = std::max(estimate.decoding, video + video / 4);
  for (uint64_t* stage : {&estimate.text_encoding, &estimate.denoising, &estimate.decoding})
    *stage = uint64_t(double(*stage) * kWanAllocatorSlack);
  return estimate;
}

GpuWeights estimate_wan_gpu_weights(const Request& request, const ModelIndex& index,
                                    const ModelInventory& inventory) {
  GpuWeights weights;
  const bool guided = request.guidance_scale > 1.0;
  const bool encodes = !request.prompt_embeds || (guided && !request.negative_prompt_embeds);
  if (encodes && index.has("text_encoder"))
    weights.text_encoder =
        text_encoders::UMT5Encoder::gpu_weight_bytes(text_encoders::T5Config::from_json(
            index.config("text_encoder"),
            component_config_path(index.component("text_encoder")).string()));
  const dit::WanTransformerConfig transformer = dit::WanTransformerConfig::from_json(
      index.config("transformer"), component_config_path(index.component("transformer")).string());
  // The stored types matter where a GGUF file's matrices stay blocks on the GPU; the headers
  // say so without reading the weights.
  // (A folder whose weights cannot be opened is planned from the config; loading it reports why.)
  std::optional<WeightStore> stored;
  try {
    stored = dit::with_diffusers_names(component_weight_store(index.component("transformer")));
  } catch (const Error&) {
  }
  const WeightStore* types = stored ? &*stored : nullptr;
  weights.transformer =
      dit::WanTransformer::gpu_weight_bytes(transformer, request.gpu_fp8_products, false, types);
  weights.transformer_streamed =
      dit::WanTransformer::gpu_weight_bytes(transformer, request.gpu_fp8_products, true, types);
  if (const ComponentInventory* vae = inventory.find("vae"))
    weights.vae = uint64_t(vae->parameters) * kFloatBytes;
  return weights;
}

}  // namespace mmgen
