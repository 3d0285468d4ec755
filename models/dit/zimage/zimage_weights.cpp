#include "models/dit/zimage/zimage_weights.h"

#include <tuple>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::dit {
namespace {

// diffusers keys the patch embedder and the final layer by "{patch}-{f_patch}".
std::string patch_key_of(const ZImageConfig& config) {
  return std::to_string(config.patch_size) + "-" + std::to_string(config.f_patch_size);
}

// The stacks of blocks in the checkpoint's order: name, count, whether modulated.
std::vector<std::tuple<const char*, int64_t, bool>> zimage_stacks(const ZImageConfig& config) {
  return {{"noise_refiner", config.n_refiner_layers, true},
          {"context_refiner", config.n_refiner_layers, false},
          {"layers", config.n_layers, true}};
}

}  // namespace

std::string zimage_block_prefix(std::string_view stack, int64_t layer) {
  return std::string(stack) + "." + std::to_string(layer) + ".";
}

ZImageBlockWeights ZImageBlockWeights::shaped(const ZImageConfig& config, bool modulated) {
  ZImageBlockWeights w;
  w.dim = config.dim;
  w.ffn_dim = config.ffn_dim();
  w.head_dim = config.head_dim();
  w.adaln_dim = config.adaln_dim();
  w.modulated = modulated;
  return w;
}

ZImageBlockWeights ZImageBlockWeights::load(const WeightStore& store, const std::string& prefix,
                                            const ZImageConfig& config, bool modulated) {
  return models::loaded(shaped(config, modulated), store, prefix);
}

ZImageBlockWeights ZImageBlockWeights::load_modulation(const WeightStore& store,
                                                       const std::string& prefix,
                                                       const ZImageConfig& config, bool modulated) {
  ZImageBlockWeights w = shaped(config, modulated);
  const auto read = [](std::string_view name) {
    return name == "attention_norm1.weight" || name == "ffn_norm1.weight" ||
           name.rfind("adaLN_modulation.", 0) == 0;
  };
  models::load_parameters(
      [&](const models::ParameterVisitor& visit) {
        w.parameters([&](const models::Parameter& p) {
          if (read(p.name)) visit(p);
        });
      },
      store, prefix, models::Values::Float32);
  return w;
}

void ZImageBlockWeights::parameters(const models::ParameterVisitor& visit) {
  using models::Role;
  constexpr int kQkv = 1, kGateUp = 2;  // the groups placed in one allocation each
  const Shape square = {dim, dim}, up = {ffn_dim, dim}, down = {dim, ffn_dim};
  visit({"attention.to_q.weight", to_q, Role::Product, square, kQkv});
  visit({"attention.to_k.weight", to_k, Role::Product, square, kQkv});
  visit({"attention.to_v.weight", to_v, Role::Product, square, kQkv});
  visit({"attention.to_out.0.weight", to_out, Role::Product, square});
  visit({"attention.norm_q.weight", norm_q, Role::Float32, {head_dim}});
  visit({"attention.norm_k.weight", norm_k, Role::Float32, {head_dim}});
  visit({"feed_forward.w1.weight", w1, Role::Product, up, kGateUp});
  visit({"feed_forward.w2.weight", w2, Role::Product, down});
  visit({"feed_forward.w3.weight", w3, Role::Product, up, kGateUp});
  // A modulated block folds each item's (1 + scale) into its pre-norms on the host (on the GPU
  // from ZImageStackedModulation's copy); an unmodulated block's are placed once with it.
  const Role pre_norm = modulated ? Role::Host : Role::Float32;
  visit({"attention_norm1.weight", attention_norm1, pre_norm, {dim}});
  visit({"attention_norm2.weight", attention_norm2, Role::Float32, {dim}});
  visit({"ffn_norm1.weight", ffn_norm1, pre_norm, {dim}});
  visit({"ffn_norm2.weight", ffn_norm2, Role::Float32, {dim}});
  if (modulated) {
    visit({"adaLN_modulation.0.weight", modulation_weight, Role::Table, {4 * dim, adaln_dim}});
    visit({"adaLN_modulation.0.bias", modulation_bias, Role::Host, {4 * dim}});
  }
}

ZImageStackedModulation stack_modulations(const std::vector<const ZImageBlockWeights*>& blocks,
                                          Device device, DType compute) {
  check(!blocks.empty(), "Z-Image modulation: nothing to stack");
  const int64_t rows = blocks.front()->modulation_weight.size(0);
  const int64_t width = blocks.front()->modulation_weight.size(1);
  Tensor weight = Tensor::empty({int64_t(blocks.size()) * rows, width}, compute);
  Tensor bias = Tensor::empty({int64_t(blocks.size()) * rows});
  Tensor norms = Tensor::empty({int64_t(blocks.size()), 2, rows / 4});
  for (size_t j = 0; j < blocks.size(); ++j) {
    const ZImageBlockWeights& w = *blocks[j];
    check(w.modulation_weight.defined() && w.modulation_weight.size(0) == rows &&
              w.modulation_weight.size(1) == width,
          "Z-Image modulation: block {} of the stack has no [{}, {}] adaLN product", j, rows,
          width);
    const int64_t at = int64_t(j) * rows;
    weight.slice(0, at, at + rows).copy_from(w.modulation_weight.to(compute));
    bias.slice(0, at, at + rows).copy_from(w.modulation_bias.to(DType::F32));
    norms.select(0, int64_t(j)).select(0, 0).copy_from(w.attention_norm1);
    norms.select(0, int64_t(j)).select(0, 1).copy_from(w.ffn_norm1);
  }
  return {weight.to(device), bias.to(device), norms.to(device)};
}

ZImageOuterWeights ZImageOuterWeights::shaped(const ZImageConfig& config) {
  ZImageOuterWeights w;
  w.dim = config.dim;
  w.adaln_dim = config.adaln_dim();
  w.patch_values = config.patch_values();
  w.cap_feat_dim = config.cap_feat_dim;
  w.patch_key = patch_key_of(config);
  return w;
}

ZImageOuterWeights ZImageOuterWeights::load(const WeightStore& store, const ZImageConfig& config) {
  ZImageOuterWeights w = models::loaded(shaped(config), store);
  w.x_pad_token = w.x_pad_token.view({config.dim});
  w.cap_pad_token = w.cap_pad_token.view({config.dim});
  return w;
}

void check_zimage_checkpoint(const WeightStore& store, const ZImageConfig& config) {
  models::expect_checkpoint(ZImageOuterWeights::shaped(config), store, "", kZImageCheckpoint);
  for (const auto& [stack, count, modulated] : zimage_stacks(config))
    for (int64_t layer = 0; layer < count; ++layer)
      models::expect_checkpoint(ZImageBlockWeights::shaped(config, modulated), store,
                                zimage_block_prefix(stack, layer), kZImageCheckpoint);
}

void list_zimage_parameters(const WeightStore& store, const ZImageConfig& config,
                            const models::ParameterVisitor& visit) {
  for (const auto& [stack, count, modulated] : zimage_stacks(config))
    for (int64_t layer = 0; layer < count; ++layer) {
      const std::string prefix = zimage_block_prefix(stack, layer);
      ZImageBlockWeights::load(store, prefix, config, modulated)
          .parameters(models::nested(visit, prefix));
    }
  ZImageOuterWeights::load(store, config).parameters(visit);
}

void ZImageOuterWeights::parameters(const models::ParameterVisitor& visit) {
  using models::Role;
  const std::string embedder = "all_x_embedder." + patch_key + ".";
  const std::string final_layer = "all_final_layer." + patch_key + ".";
  visit({embedder + "weight", x_embed_weight, Role::Product, {dim, patch_values}});
  // The embedding starts the float32 residual stream.
  visit({embedder + "bias", x_embed_bias, Role::Float32, {dim}});
  visit({"cap_embedder.0.weight", cap_norm, Role::Float32, {cap_feat_dim}});
  visit({"cap_embedder.1.weight", cap_embed_weight, Role::Product, {dim, cap_feat_dim}});
  visit({"cap_embedder.1.bias", cap_embed_bias, Role::Float32, {dim}});
  visit({final_layer + "linear.weight", final_weight, Role::Product, {patch_values, dim}});
  visit({final_layer + "linear.bias", final_bias, Role::Float32, {patch_values}});
  visit(
      {final_layer + "adaLN_modulation.1.weight", final_mod_weight, Role::Host, {dim, adaln_dim}});
  visit({final_layer + "adaLN_modulation.1.bias", final_mod_bias, Role::Host, {dim}});
  // diffusers' TimestepEmbedder: 256 sinusoid channels, a fixed hidden width of 1024.
  visit({"t_embedder.mlp.0.weight", t_1_weight, Role::Host, {1024, 256}});
  visit({"t_embedder.mlp.0.bias", t_1_bias, Role::Host, {1024}});
  visit({"t_embedder.mlp.2.weight", t_2_weight, Role::Host, {adaln_dim, 1024}});
  visit({"t_embedder.mlp.2.bias", t_2_bias, Role::Host, {adaln_dim}});
  // [1, dim] in the checkpoint; load() views them as [dim].
  visit({"x_pad_token", x_pad_token, Role::Host, {1, dim}});
  visit({"cap_pad_token", cap_pad_token, Role::Host, {1, dim}});
}

}  // namespace mmgen::dit
