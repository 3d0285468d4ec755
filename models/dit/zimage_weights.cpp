#include "models/dit/zimage_weights.h"

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::dit {
namespace {

// diffusers keys the patch embedder and the final layer by "{patch}-{f_patch}".
std::string patch_key(const ZImageConfig& config) {
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

size_t bytes_of(std::initializer_list<const Tensor*> tensors) {
  size_t total = 0;
  for (const Tensor* t : tensors) total += t->defined() ? t->nbytes() : 0;
  return total;
}

}  // namespace

void expect_zimage_weight(const WeightStore& store, const std::string& name, const Shape& shape) {
  check(store.has(name),
        "transformer weights in {}: tensor '{}' is missing; the checkpoint does not match its "
        "config.json (or is not a Z-Image transformer)",
        store.origin().string(), name);
  const TensorInfo& info = store.info(name);
  check(dtype_is_floating(info.dtype) && info.dtype != DType::F64,
        "transformer weights in {}: tensor '{}' is {}, expected f32, bf16, f16 or f8_e4m3",
        store.origin().string(), name, dtype_name(info.dtype));
  check(info.shape == shape,
        "transformer weights in {}: tensor '{}' has shape {}, config.json implies {}",
        store.origin().string(), name, shape_string(info.shape), shape_string(shape));
}

std::string zimage_block_prefix(const char* stack, int64_t layer) {
  return std::string(stack) + "." + std::to_string(layer) + ".";
}

void check_zimage_block(const WeightStore& store, const std::string& prefix,
                        const ZImageConfig& config, bool modulated) {
  const int64_t dim = config.dim, ffn = config.ffn_dim(), head = config.head_dim();
  for (const char* name : {"to_q", "to_k", "to_v", "to_out.0"})
    expect_zimage_weight(store, prefix + "attention." + name + ".weight", {dim, dim});
  expect_zimage_weight(store, prefix + "attention.norm_q.weight", {head});
  expect_zimage_weight(store, prefix + "attention.norm_k.weight", {head});
  for (const char* name : {"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"})
    expect_zimage_weight(store, prefix + name + ".weight", {dim});
  expect_zimage_weight(store, prefix + "feed_forward.w1.weight", {ffn, dim});
  expect_zimage_weight(store, prefix + "feed_forward.w2.weight", {dim, ffn});
  expect_zimage_weight(store, prefix + "feed_forward.w3.weight", {ffn, dim});
  if (modulated) {
    expect_zimage_weight(store, prefix + "adaLN_modulation.0.weight",
                         {4 * dim, config.adaln_dim()});
    expect_zimage_weight(store, prefix + "adaLN_modulation.0.bias", {4 * dim});
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

ZImageBlockWeights ZImageBlockWeights::placed(Device device, DType compute) const {
  const auto product = [&](const Tensor& t) { return t.to(compute).to(device); };
  ZImageBlockWeights p = *this;
  // q/k/v and w1/w3 each in one allocation: ops::linear_each runs each set as one product.
  const std::vector<Tensor> qkv = ops::stack_weights({to_q, to_k, to_v}, compute, device);
  p.to_q = qkv[0], p.to_k = qkv[1], p.to_v = qkv[2];
  const std::vector<Tensor> gate_up = ops::stack_weights({w1, w3}, compute, device);
  p.w1 = gate_up[0], p.w3 = gate_up[1];
  p.to_out = product(to_out);
  p.w2 = product(w2);
  p.norm_q = norm_q.to(device), p.norm_k = norm_k.to(device);
  p.attention_norm2 = attention_norm2.to(device), p.ffn_norm2 = ffn_norm2.to(device);
  // An unmodulated block's pre-norms are used as they are: placed once, not uploaded per forward.
  if (!modulation_weight.defined())
    p.attention_norm1 = attention_norm1.to(device), p.ffn_norm1 = ffn_norm1.to(device);
  return p;
}

size_t ZImageBlockWeights::device_bytes() const {
  const size_t pre_norms =
      modulation_weight.defined() ? 0 : bytes_of({&attention_norm1, &ffn_norm1});
  return pre_norms + bytes_of({&to_q, &to_k, &to_v, &to_out, &w1, &w2, &w3, &norm_q, &norm_k,
                               &attention_norm2, &ffn_norm2});
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
  const std::string key = patch_key(config);
  expect_zimage_weight(store, "all_x_embedder." + key + ".weight", {dim, values});
  expect_zimage_weight(store, "all_x_embedder." + key + ".bias", {dim});
  const std::string final_layer = "all_final_layer." + key + ".";
  expect_zimage_weight(store, final_layer + "linear.weight", {values, dim});
  expect_zimage_weight(store, final_layer + "linear.bias", {values});
  expect_zimage_weight(store, final_layer + "adaLN_modulation.1.weight", {dim, adaln});
  expect_zimage_weight(store, final_layer + "adaLN_modulation.1.bias", {dim});
  // diffusers' TimestepEmbedder: 256 sinusoid channels, a fixed hidden width of 1024.
  expect_zimage_weight(store, "t_embedder.mlp.0.weight", {1024, 256});
  expect_zimage_weight(store, "t_embedder.mlp.0.bias", {1024});
  expect_zimage_weight(store, "t_embedder.mlp.2.weight", {adaln, 1024});
  expect_zimage_weight(store, "t_embedder.mlp.2.bias", {adaln});
  expect_zimage_weight(store, "cap_embedder.0.weight", {config.cap_feat_dim});
  expect_zimage_weight(store, "cap_embedder.1.weight", {dim, config.cap_feat_dim});
  expect_zimage_weight(store, "cap_embedder.1.bias", {dim});
  expect_zimage_weight(store, "x_pad_token", {1, dim});
  expect_zimage_weight(store, "cap_pad_token", {1, dim});
}

ZImageOuterWeights ZImageOuterWeights::load(const WeightStore& store, const ZImageConfig& config) {
  const std::string key = patch_key(config);
  const std::string final_layer = "all_final_layer." + key + ".";
  ZImageOuterWeights w;
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

ZImageOuterWeights ZImageOuterWeights::placed(Device device, DType compute) const {
  const auto product = [&](const Tensor& t) { return t.to(compute).to(device); };
  ZImageOuterWeights p = *this;
  p.x_embed_weight = product(x_embed_weight);
  p.x_embed_bias = x_embed_bias.to(device);  // the embedding starts the float32 residual stream
  p.cap_embed_weight = product(cap_embed_weight);
  p.cap_embed_bias = cap_embed_bias.to(device);
  p.cap_norm = cap_norm.to(device);
  p.final_weight = product(final_weight);
  p.final_bias = final_bias.to(device);
  return p;
}

size_t ZImageOuterWeights::device_bytes() const {
  return bytes_of({&x_embed_weight, &x_embed_bias, &cap_embed_weight, &cap_embed_bias,
                   &final_weight, &final_bias, &cap_norm});
}

}  // namespace mmgen::dit
