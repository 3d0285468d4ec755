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

Tensor f32(const WeightStore& store, const std::string& name) {
  return ops::weight_to_f32(store.get(name));
}

// A product's weight as stored (float32, bfloat16 or float16): the CPU product converts it as it
// packs it, and placed() converts it once for the GPU, so a bf16 block is never widened whole.
Tensor stored(const WeightStore& store, const std::string& name) {
  return store.get(name).contiguous();
}

// A tensor the config implies (models::expect_parameter), for a Z-Image transformer.
void expect(const WeightStore& store, const std::string& name, const Shape& shape) {
  models::expect_parameter(store, name, shape, "Z-Image");
}

}  // namespace

std::string zimage_block_prefix(std::string_view stack, int64_t layer) {
  return std::string(stack) + "." + std::to_string(layer) + ".";
}

void check_zimage_block(const WeightStore& store, const std::string& prefix,
                        const ZImageConfig& config, bool modulated) {
  const int64_t dim = config.dim, ffn = config.ffn_dim(), head = config.head_dim();
  for (const char* name : {"to_q", "to_k", "to_v", "to_out.0"})
    expect(store, prefix + "attention." + name + ".weight", {dim, dim});
  expect(store, prefix + "attention.norm_q.weight", {head});
  expect(store, prefix + "attention.norm_k.weight", {head});
  for (const char* name : {"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"})
    expect(store, prefix + name + ".weight", {dim});
  expect(store, prefix + "feed_forward.w1.weight", {ffn, dim});
  expect(store, prefix + "feed_forward.w2.weight", {dim, ffn});
  expect(store, prefix + "feed_forward.w3.weight", {ffn, dim});
  if (modulated) {
    expect(store, prefix + "adaLN_modulation.0.weight", {4 * dim, config.adaln_dim()});
    expect(store, prefix + "adaLN_modulation.0.bias", {4 * dim});
  }
}

ZImageBlockWeights ZImageBlockWeights::load(const WeightStore& store, const std::string& prefix,
                                            bool modulated) {
  ZImageBlockWeights w;
  const std::string attention = prefix + "attention.";
  w.to_q = stored(store, attention + "to_q.weight");
  w.to_k = stored(store, attention + "to_k.weight");
  w.to_v = stored(store, attention + "to_v.weight");
  w.to_out = stored(store, attention + "to_out.0.weight");
  w.norm_q = f32(store, attention + "norm_q.weight");
  w.norm_k = f32(store, attention + "norm_k.weight");
  w.w1 = stored(store, prefix + "feed_forward.w1.weight");
  w.w2 = stored(store, prefix + "feed_forward.w2.weight");
  w.w3 = stored(store, prefix + "feed_forward.w3.weight");
  w.attention_norm1 = f32(store, prefix + "attention_norm1.weight");
  w.attention_norm2 = f32(store, prefix + "attention_norm2.weight");
  w.ffn_norm1 = f32(store, prefix + "ffn_norm1.weight");
  w.ffn_norm2 = f32(store, prefix + "ffn_norm2.weight");
  if (modulated) {
    w.modulation_weight = store.get(prefix + "adaLN_modulation.0.weight");
    w.modulation_bias = f32(store, prefix + "adaLN_modulation.0.bias");
  }
  return w;
}

ZImageBlockWeights ZImageBlockWeights::load_modulation(const WeightStore& store,
                                                       const std::string& prefix, bool modulated) {
  ZImageBlockWeights w;
  w.attention_norm1 = f32(store, prefix + "attention_norm1.weight");
  w.ffn_norm1 = f32(store, prefix + "ffn_norm1.weight");
  if (modulated) {
    w.modulation_weight = store.get(prefix + "adaLN_modulation.0.weight");
    w.modulation_bias = f32(store, prefix + "adaLN_modulation.0.bias");
  }
  return w;
}

void ZImageBlockWeights::parameters(const models::ParameterVisitor& visit) {
  using models::Role;
  constexpr int kQkv = 1, kGateUp = 2;  // the groups placed in one allocation each
  visit({"attention.to_q.weight", to_q, Role::Product, kQkv});
  visit({"attention.to_k.weight", to_k, Role::Product, kQkv});
  visit({"attention.to_v.weight", to_v, Role::Product, kQkv});
  visit({"attention.to_out.0.weight", to_out, Role::Product});
  visit({"attention.norm_q.weight", norm_q, Role::Float32});
  visit({"attention.norm_k.weight", norm_k, Role::Float32});
  visit({"feed_forward.w1.weight", w1, Role::Product, kGateUp});
  visit({"feed_forward.w2.weight", w2, Role::Product});
  visit({"feed_forward.w3.weight", w3, Role::Product, kGateUp});
  // A modulated block folds each item's (1 + scale) into its pre-norms on the host (on the GPU
  // from ZImageStackedModulation's copy); an unmodulated block's are placed once with it.
  const Role pre_norm = modulation_weight.defined() ? Role::Host : Role::Float32;
  visit({"attention_norm1.weight", attention_norm1, pre_norm});
  visit({"attention_norm2.weight", attention_norm2, Role::Float32});
  visit({"ffn_norm1.weight", ffn_norm1, pre_norm});
  visit({"ffn_norm2.weight", ffn_norm2, Role::Float32});
  visit({"adaLN_modulation.0.weight", modulation_weight, Role::Host});
  visit({"adaLN_modulation.0.bias", modulation_bias, Role::Host});
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

void check_zimage_outer(const WeightStore& store, const ZImageConfig& config) {
  const int64_t dim = config.dim, adaln = config.adaln_dim(), values = config.patch_values();
  const std::string key = patch_key_of(config);
  expect(store, "all_x_embedder." + key + ".weight", {dim, values});
  expect(store, "all_x_embedder." + key + ".bias", {dim});
  const std::string final_layer = "all_final_layer." + key + ".";
  expect(store, final_layer + "linear.weight", {values, dim});
  expect(store, final_layer + "linear.bias", {values});
  expect(store, final_layer + "adaLN_modulation.1.weight", {dim, adaln});
  expect(store, final_layer + "adaLN_modulation.1.bias", {dim});
  // diffusers' TimestepEmbedder: 256 sinusoid channels, a fixed hidden width of 1024.
  expect(store, "t_embedder.mlp.0.weight", {1024, 256});
  expect(store, "t_embedder.mlp.0.bias", {1024});
  expect(store, "t_embedder.mlp.2.weight", {adaln, 1024});
  expect(store, "t_embedder.mlp.2.bias", {adaln});
  expect(store, "cap_embedder.0.weight", {config.cap_feat_dim});
  expect(store, "cap_embedder.1.weight", {dim, config.cap_feat_dim});
  expect(store, "cap_embedder.1.bias", {dim});
  expect(store, "x_pad_token", {1, dim});
  expect(store, "cap_pad_token", {1, dim});
}

ZImageOuterWeights ZImageOuterWeights::load(const WeightStore& store, const ZImageConfig& config) {
  const std::string key = patch_key_of(config);
  const std::string final_layer = "all_final_layer." + key + ".";
  ZImageOuterWeights w;
  w.patch_key = key;
  w.x_embed_weight = f32(store, "all_x_embedder." + key + ".weight");
  w.x_embed_bias = f32(store, "all_x_embedder." + key + ".bias");
  w.cap_norm = f32(store, "cap_embedder.0.weight");
  w.cap_embed_weight = f32(store, "cap_embedder.1.weight");
  w.cap_embed_bias = f32(store, "cap_embedder.1.bias");
  w.final_weight = f32(store, final_layer + "linear.weight");
  w.final_bias = f32(store, final_layer + "linear.bias");
  w.final_mod_weight = f32(store, final_layer + "adaLN_modulation.1.weight");
  w.final_mod_bias = f32(store, final_layer + "adaLN_modulation.1.bias");
  w.t_1_weight = f32(store, "t_embedder.mlp.0.weight");
  w.t_1_bias = f32(store, "t_embedder.mlp.0.bias");
  w.t_2_weight = f32(store, "t_embedder.mlp.2.weight");
  w.t_2_bias = f32(store, "t_embedder.mlp.2.bias");
  w.x_pad_token = f32(store, "x_pad_token").view({config.dim});
  w.cap_pad_token = f32(store, "cap_pad_token").view({config.dim});
  return w;
}

void list_zimage_parameters(const WeightStore& store, const ZImageConfig& config,
                            const models::ParameterVisitor& visit) {
  for (const auto& [stack, count, modulated] :
       {std::tuple{"noise_refiner", config.n_refiner_layers, true},
        {"context_refiner", config.n_refiner_layers, false},
        {"layers", config.n_layers, true}})
    for (int64_t layer = 0; layer < count; ++layer) {
      const std::string prefix = zimage_block_prefix(stack, layer);
      ZImageBlockWeights::load(store, prefix, modulated).parameters(models::nested(visit, prefix));
    }
  ZImageOuterWeights::load(store, config).parameters(visit);
}

void ZImageOuterWeights::parameters(const models::ParameterVisitor& visit) {
  using models::Role;
  const std::string embedder = "all_x_embedder." + patch_key + ".";
  const std::string final_layer = "all_final_layer." + patch_key + ".";
  visit({embedder + "weight", x_embed_weight, Role::Product});
  // The embedding starts the float32 residual stream.
  visit({embedder + "bias", x_embed_bias, Role::Float32});
  visit({"cap_embedder.0.weight", cap_norm, Role::Float32});
  visit({"cap_embedder.1.weight", cap_embed_weight, Role::Product});
  visit({"cap_embedder.1.bias", cap_embed_bias, Role::Float32});
  visit({final_layer + "linear.weight", final_weight, Role::Product});
  visit({final_layer + "linear.bias", final_bias, Role::Float32});
  visit({final_layer + "adaLN_modulation.1.weight", final_mod_weight, Role::Host});
  visit({final_layer + "adaLN_modulation.1.bias", final_mod_bias, Role::Host});
  visit({"t_embedder.mlp.0.weight", t_1_weight, Role::Host});
  visit({"t_embedder.mlp.0.bias", t_1_bias, Role::Host});
  visit({"t_embedder.mlp.2.weight", t_2_weight, Role::Host});
  visit({"t_embedder.mlp.2.bias", t_2_bias, Role::Host});
  visit({"x_pad_token", x_pad_token, Role::Host});
  visit({"cap_pad_token", cap_pad_token, Role::Host});
}

}  // namespace mmgen::dit
