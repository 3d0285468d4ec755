#include "models/dit/wan_transformer.h"

#include <utility>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "models/dit/wan_block.h"
#include "models/dit/wan_kernels.h"
#include "models/dit/wan_patchify.h"
#include "models/dit/wan_weights.h"

namespace mmgen::dit {
namespace {

// The condition embedder's outputs for one timestep (shared by the batch) and the text.
struct Conditioning {
  TimeConditioning time;
  Tensor text;  // [B, L, D]
};

Conditioning embed_conditions(const WeightStore& store, const WanTransformerConfig& config,
                              float timestep, const Tensor& text_embeds) {
  Conditioning result;
  result.time = time_conditioning(TimeEmbedderWeights::load(store), config, timestep);
  Tensor text = ops::linear(text_embeds,
                            load_weight(store, "condition_embedder.text_embedder.linear_1.weight"),
                            load_weight(store, "condition_embedder.text_embedder.linear_1.bias"));
  ops::gelu_tanh_(text);
  result.text =
      ops::linear(text, load_weight(store, "condition_embedder.text_embedder.linear_2.weight"),
                  load_weight(store, "condition_embedder.text_embedder.linear_2.bias"));
  return result;
}

void check_top_level_weights(const WeightStore& store, const WanTransformerConfig& config) {
  const int64_t dim = config.inner_dim();
  const auto [pt, ph, pw] = config.patch_size;
  expect_weight(store, "patch_embedding.weight", {dim, config.in_channels, pt, ph, pw});
  expect_weight(store, "patch_embedding.bias", {dim});
  const std::string time = "condition_embedder.time_embedder.";
  expect_weight(store, time + "linear_1.weight", {dim, config.freq_dim});
  expect_weight(store, time + "linear_1.bias", {dim});
  expect_weight(store, time + "linear_2.weight", {dim, dim});
  expect_weight(store, time + "linear_2.bias", {dim});
  expect_weight(store, "condition_embedder.time_proj.weight", {6 * dim, dim});
  expect_weight(store, "condition_embedder.time_proj.bias", {6 * dim});
  const std::string text = "condition_embedder.text_embedder.";
  expect_weight(store, text + "linear_1.weight", {dim, config.text_dim});
  expect_weight(store, text + "linear_1.bias", {dim});
  expect_weight(store, text + "linear_2.weight", {dim, dim});
  expect_weight(store, text + "linear_2.bias", {dim});
  expect_weight(store, "proj_out.weight", {config.out_channels * config.patch_volume(), dim});
  expect_weight(store, "proj_out.bias", {config.out_channels * config.patch_volume()});
  expect_weight(store, "scale_shift_table", {1, 2, dim});
}

WanTransformerConfig validated(WanTransformerConfig config) {
  config.validate("transformer config");
  return config;
}

}  // namespace

TimeEmbedderWeights TimeEmbedderWeights::load(const WeightStore& store) {
  const std::string time = "condition_embedder.time_embedder.";
  TimeEmbedderWeights w;
  w.linear_1_weight = load_weight(store, time + "linear_1.weight");
  w.linear_1_bias = load_weight(store, time + "linear_1.bias");
  w.linear_2_weight = load_weight(store, time + "linear_2.weight");
  w.linear_2_bias = load_weight(store, time + "linear_2.bias");
  w.proj_weight = load_weight(store, "condition_embedder.time_proj.weight");
  w.proj_bias = load_weight(store, "condition_embedder.time_proj.bias");
  return w;
}

TimeConditioning time_conditioning(const TimeEmbedderWeights& w, const WanTransformerConfig& config,
                                   float timestep) {
  const int64_t dim = config.inner_dim();
  TimeConditioning result;
  const std::vector<float> sinusoid = timestep_sinusoid(timestep, config.freq_dim);
  Tensor t = Tensor::from_vector({1, config.freq_dim}, sinusoid);
  t = ops::linear(t, w.linear_1_weight, w.linear_1_bias);
  ops::silu_(t);
  Tensor temb = ops::linear(t, w.linear_2_weight, w.linear_2_bias);
  result.temb.assign(temb.data<float>(), temb.data<float>() + dim);
  Tensor activated = temb.clone();
  ops::silu_(activated);
  Tensor proj = ops::linear(activated, w.proj_weight, w.proj_bias);
  result.timestep_proj.assign(proj.data<float>(), proj.data<float>() + 6 * dim);
  return result;
}

WanTransformer::WanTransformer(WanTransformerConfig config, WeightStore weights)
    : config_(validated(std::move(config))),
      weights_(std::move(weights)),
      rope_(config_.attention_head_dim, config_.rope_max_seq_len) {
  check_top_level_weights(weights_, config_);
  for (int64_t layer = 0; layer < config_.num_layers; ++layer)
    check_block_weights(weights_, layer, config_);
}

WanTransformer WanTransformer::load(const fs::path& folder) {
  check(fs::is_directory(folder), "transformer folder {} does not exist", folder.string());
  WanTransformerConfig config = WanTransformerConfig::from_file(folder / "config.json");
  return WanTransformer(std::move(config), WeightStore::open_folder(folder));
}

Tensor WanTransformer::forward(const Tensor& latents, float timestep, const Tensor& text_embeds,
                               const WanStep& step, WanAttention* attention) const {
  const auto [pt, ph, pw] = config_.patch_size;
  check(latents.dim() == 5 && latents.size(1) == config_.in_channels,
        "transformer: latents must be [batch, {}, frames, height, width], got {}",
        config_.in_channels, shape_string(latents.shape()));
  check(latents.size(2) % pt == 0 && latents.size(3) % ph == 0 && latents.size(4) % pw == 0,
        "transformer: latent size {}x{}x{} is not divisible by the patch size {}x{}x{}",
        latents.size(2), latents.size(3), latents.size(4), pt, ph, pw);
  check(latents.numel() > 0, "transformer: empty latents {}", shape_string(latents.shape()));
  const int64_t batch = latents.size(0);
  check(text_embeds.dim() == 3 && text_embeds.size(0) == batch &&
            text_embeds.size(2) == config_.text_dim && text_embeds.size(1) > 0,
        "transformer: text embeddings must be [{}, tokens, {}], got {}", batch, config_.text_dim,
        shape_string(text_embeds.shape()));
  const PatchGrid grid{latents.size(2) / pt, latents.size(3) / ph, latents.size(4) / pw};
  check(grid.t <= config_.rope_max_seq_len && grid.h <= config_.rope_max_seq_len &&
            grid.w <= config_.rope_max_seq_len,
        "transformer: latent grid {}x{}x{} exceeds rope_max_seq_len {}; use a smaller size", grid.t,
        grid.h, grid.w, config_.rope_max_seq_len);
  const int64_t dim = config_.inner_dim();

  const Conditioning conditions =
      embed_conditions(weights_, config_, timestep, text_embeds.to(DType::F32).contiguous());

  // Patch embedding: a Conv3d with kernel = stride = patch is a linear layer over the patches.
  Tensor x = ops::linear(patchify(latents, config_.patch_size, grid),
                         load_weight(weights_, "patch_embedding.weight").view({dim, -1}),
                         load_weight(weights_, "patch_embedding.bias"));

  WanAttentionCall call;
  call.grid_t = grid.t;
  call.grid_h = grid.h;
  call.grid_w = grid.w;
  call.text_len = text_embeds.size(1);
  call.num_layers = config_.num_layers;
  call.timestep = timestep;
  call.step = step;
  call.attention = attention;
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    call.layer = layer;
    const WanBlockWeights block = WanBlockWeights::load(weights_, layer, config_);
    run_wan_block(x, conditions.text, conditions.time.timestep_proj.data(), block, config_, rope_,
                  call);
  }

  // Output head: (shift, scale) = scale_shift_table + temb, in this order.
  Tensor table = load_weight(weights_, "scale_shift_table");
  std::vector<float> shift(static_cast<size_t>(dim)), scale_plus_one(static_cast<size_t>(dim));
  for (int64_t i = 0; i < dim; ++i) {
    shift[size_t(i)] = table.data<float>()[i] + conditions.time.temb[size_t(i)];
    scale_plus_one[size_t(i)] =
        1.0f + (table.data<float>()[dim + i] + conditions.time.temb[size_t(i)]);
  }
  modulated_layer_norm(x.data<float>(), x.data<float>(), batch * grid.tokens(), dim, shift.data(),
                       scale_plus_one.data(), config_.eps);
  Tensor out = ops::linear(x, load_weight(weights_, "proj_out.weight"),
                           load_weight(weights_, "proj_out.bias"));
  return unpatchify(out, config_.patch_size, grid, config_.out_channels);
}

}  // namespace mmgen::dit
