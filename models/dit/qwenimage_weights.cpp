#include "models/dit/qwenimage_weights.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::dit {
namespace {

void expect(const WeightStore& store, const std::string& name, const Shape& shape) {
  check(store.has(name),
        "transformer weights in {}: tensor '{}' is missing; the checkpoint does not match its "
        "config.json (or is not a Qwen-Image transformer)",
        store.origin().string(), name);
  const TensorInfo& info = store.info(name);
  check(dtype_is_floating(info.dtype) && info.dtype != DType::F64,
        "transformer weights in {}: tensor '{}' is {}, expected f32, bf16, f16 or f8_e4m3",
        store.origin().string(), name, dtype_name(info.dtype));
  check(info.shape == shape,
        "transformer weights in {}: tensor '{}' has shape {}, config.json implies {}",
        store.origin().string(), name, shape_string(info.shape), shape_string(shape));
}

void expect_linear(const WeightStore& store, const std::string& name, int64_t out, int64_t in) {
  expect(store, name + ".weight", {out, in});
  expect(store, name + ".bias", {out});
}

Tensor f32(const WeightStore& store, const std::string& name) {
  return ops::weight_to_f32(store.get(name));
}

FluxLinear linear(const WeightStore& store, const std::string& name) {
  return {store.get(name + ".weight").contiguous(), f32(store, name + ".bias")};
}

// An adaLN product whose chunks `scales` (of `chunks`, each [dim]) are scales: 1 is added to
// their bias so the product gives 1 + scale.
FluxLinear adaln_linear(const WeightStore& store, const std::string& name, int64_t chunks,
                        std::initializer_list<int64_t> scales) {
  FluxLinear m = linear(store, name);
  m.bias = m.bias.clone();  // never the mapped file's bytes
  const int64_t dim = m.bias.numel() / chunks;
  float* bias = m.bias.data<float>();
  for (int64_t chunk : scales)
    for (int64_t i = 0; i < dim; ++i) bias[chunk * dim + i] += 1.0f;
  return m;
}

size_t bytes_of(const Tensor& t) {
  return t.defined() ? t.nbytes() : 0;
}

std::string block_prefix(int64_t layer) {
  return "transformer_blocks." + std::to_string(layer) + ".";
}

}  // namespace

void check_qwenimage_weights(const WeightStore& store, const QwenImageConfig& config) {
  const int64_t dim = config.dim(), head = config.attention_head_dim, mlp = config.mlp_dim();
  expect_linear(store, "img_in", dim, config.in_channels);
  expect(store, "txt_norm.weight", {config.joint_attention_dim});
  expect_linear(store, "txt_in", dim, config.joint_attention_dim);
  expect_linear(store, "time_text_embed.timestep_embedder.linear_1", dim, 256);
  expect_linear(store, "time_text_embed.timestep_embedder.linear_2", dim, dim);
  expect_linear(store, "norm_out.linear", 2 * dim, dim);
  expect_linear(store, "proj_out", config.out_values(), dim);
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const std::string p = block_prefix(layer);
    expect_linear(store, p + "img_mod.1", 6 * dim, dim);
    expect_linear(store, p + "txt_mod.1", 6 * dim, dim);
    for (const char* name : {"to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj",
                             "add_v_proj", "to_add_out"})
      expect_linear(store, p + "attn." + name, dim, dim);
    for (const char* name : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"})
      expect(store, p + "attn." + name + ".weight", {head});
    for (const char* ff : {"img_mlp", "txt_mlp"}) {
      expect_linear(store, p + ff + ".net.0.proj", mlp, dim);
      expect_linear(store, p + ff + ".net.2", dim, mlp);
    }
  }
}

QwenImageBlockWeights QwenImageBlockWeights::load(const WeightStore& store, int64_t layer) {
  const std::string p = block_prefix(layer), a = p + "attn.";
  QwenImageBlockWeights w;
  // _modulate's chunks: shift, scale, gate for norm1, then for norm2.
  w.image_modulation = adaln_linear(store, p + "img_mod.1", 6, {1, 4});
  w.text_modulation = adaln_linear(store, p + "txt_mod.1", 6, {1, 4});
  w.to_q = linear(store, a + "to_q");
  w.to_k = linear(store, a + "to_k");
  w.to_v = linear(store, a + "to_v");
  w.to_out = linear(store, a + "to_out.0");
  w.add_q = linear(store, a + "add_q_proj");
  w.add_k = linear(store, a + "add_k_proj");
  w.add_v = linear(store, a + "add_v_proj");
  w.add_out = linear(store, a + "to_add_out");
  w.norm_q = f32(store, a + "norm_q.weight");
  w.norm_k = f32(store, a + "norm_k.weight");
  w.norm_added_q = f32(store, a + "norm_added_q.weight");
  w.norm_added_k = f32(store, a + "norm_added_k.weight");
  w.image_mlp_in = linear(store, p + "img_mlp.net.0.proj");
  w.image_mlp_out = linear(store, p + "img_mlp.net.2");
  w.text_mlp_in = linear(store, p + "txt_mlp.net.0.proj");
  w.text_mlp_out = linear(store, p + "txt_mlp.net.2");
  return w;
}

QwenImageBlockWeights QwenImageBlockWeights::placed(Device device, DType compute) const {
  QwenImageBlockWeights p;
  for (auto [from, to] : {std::pair{&image_modulation, &p.image_modulation},
                          {&text_modulation, &p.text_modulation},
                          {&to_q, &p.to_q},
                          {&to_k, &p.to_k},
                          {&to_v, &p.to_v},
                          {&to_out, &p.to_out},
                          {&add_q, &p.add_q},
                          {&add_k, &p.add_k},
                          {&add_v, &p.add_v},
                          {&add_out, &p.add_out},
                          {&image_mlp_in, &p.image_mlp_in},
                          {&image_mlp_out, &p.image_mlp_out},
                          {&text_mlp_in, &p.text_mlp_in},
                          {&text_mlp_out, &p.text_mlp_out}})
    *to = from->placed(device, compute);
  p.norm_q = norm_q.to(device);
  p.norm_k = norm_k.to(device);
  p.norm_added_q = norm_added_q.to(device);
  p.norm_added_k = norm_added_k.to(device);
  return p;
}

size_t QwenImageBlockWeights::bytes() const {
  size_t total =
      bytes_of(norm_q) + bytes_of(norm_k) + bytes_of(norm_added_q) + bytes_of(norm_added_k);
  for (const FluxLinear* l :
       {&image_modulation, &text_modulation, &to_q, &to_k, &to_v, &to_out, &add_q, &add_k, &add_v,
        &add_out, &image_mlp_in, &image_mlp_out, &text_mlp_in, &text_mlp_out})
    total += l->bytes();
  return total;
}

QwenImageOuterWeights QwenImageOuterWeights::load(const WeightStore& store) {
  const std::string e = "time_text_embed.timestep_embedder.";
  QwenImageOuterWeights w;
  w.image_in = linear(store, "img_in");
  w.text_in = linear(store, "txt_in");
  w.text_norm = f32(store, "txt_norm.weight");
  w.time_1 = linear(store, e + "linear_1");
  w.time_2 = linear(store, e + "linear_2");
  w.norm_out = adaln_linear(store, "norm_out.linear", 2, {0});  // scale first, then shift
  w.proj_out = linear(store, "proj_out");
  return w;
}

QwenImageOuterWeights QwenImageOuterWeights::placed(Device device, DType compute) const {
  QwenImageOuterWeights p;
  for (auto [from, to] : {std::pair{&image_in, &p.image_in},
                          {&text_in, &p.text_in},
                          {&time_1, &p.time_1},
                          {&time_2, &p.time_2},
                          {&norm_out, &p.norm_out},
                          {&proj_out, &p.proj_out}})
    *to = from->placed(device, compute);
  p.text_norm = text_norm.to(device);
  return p;
}

size_t QwenImageOuterWeights::bytes() const {
  size_t total = bytes_of(text_norm);
  for (const FluxLinear* l : {&image_in, &text_in, &time_1, &time_2, &norm_out, &proj_out})
    total += l->bytes();
  return total;
}

}  // namespace mmgen::dit
