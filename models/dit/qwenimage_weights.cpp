#include "models/dit/qwenimage_weights.h"

#include <string>
#include <utility>

#include "models/dit/mmdit_layers.h"

namespace mmgen::dit {
namespace {

const MMDiTJointBlockNames kBlockNames{"img_mod.1", "txt_mod.1", "img_mlp", "txt_mlp"};

std::string qwenimage_block_prefix(int64_t layer) {
  return "transformer_blocks." + std::to_string(layer) + ".";
}

}  // namespace

void check_qwenimage_weights(const WeightStore& store, const QwenImageConfig& config) {
  const MMDiTWeightCheck expect{store, "Qwen-Image"};
  const int64_t dim = config.dim(), head = config.attention_head_dim, mlp = config.mlp_dim();
  expect.linear("img_in", dim, config.in_channels);
  expect.tensor("txt_norm.weight", {config.joint_attention_dim});
  expect.linear("txt_in", dim, config.joint_attention_dim);
  expect.linear("time_text_embed.timestep_embedder.linear_1", dim, 256);
  expect.linear("time_text_embed.timestep_embedder.linear_2", dim, dim);
  expect.linear("norm_out.linear", 2 * dim, dim);
  expect.linear("proj_out", config.out_values(), dim);
  for (int64_t layer = 0; layer < config.num_layers; ++layer)
    check_mmdit_joint_block(expect, qwenimage_block_prefix(layer), kBlockNames, dim, head, mlp);
}

QwenImageBlockWeights load_qwenimage_block(const WeightStore& store, int64_t layer) {
  // _modulate's chunks: shift, scale, gate for norm1, then for norm2.
  return MMDiTJointBlockWeights::load(store, qwenimage_block_prefix(layer), kBlockNames);
}

QwenImageOuterWeights QwenImageOuterWeights::load(const WeightStore& store) {
  const std::string e = "time_text_embed.timestep_embedder.";
  QwenImageOuterWeights w;
  w.image_in = mmdit_linear(store, "img_in");
  w.text_in = mmdit_linear(store, "txt_in");
  w.text_norm = mmdit_f32(store, "txt_norm.weight");
  w.time_1 = mmdit_linear(store, e + "linear_1");
  w.time_2 = mmdit_linear(store, e + "linear_2");
  w.norm_out = mmdit_adaln_linear(store, "norm_out.linear", 2, {0});  // scale first, then shift
  w.proj_out = mmdit_linear(store, "proj_out");
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
  size_t total = mmdit_bytes(text_norm);
  for (const FluxLinear* l : {&image_in, &text_in, &time_1, &time_2, &norm_out, &proj_out})
    total += l->bytes();
  return total;
}

}  // namespace mmgen::dit
