#include "models/dit/qwenimage/qwenimage_weights.h"

#include <string>
#include <utility>

#include "models/dit/mmdit/mmdit_layers.h"

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

void list_qwenimage_parameters(const WeightStore& store, const QwenImageConfig& config,
                               const models::ParameterVisitor& visit) {
  for (int64_t layer = 0; layer < config.num_layers; ++layer)
    load_qwenimage_block(store, layer)
        .parameters(models::nested(visit, qwenimage_block_prefix(layer)));
  QwenImageOuterWeights::load(store).parameters(visit);
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

void QwenImageOuterWeights::parameters(const models::ParameterVisitor& visit) {
  using models::nested;
  const std::string e = "time_text_embed.timestep_embedder.";
  image_in.parameters(nested(visit, "img_in."));
  text_in.parameters(nested(visit, "txt_in."));
  visit({"txt_norm.weight", text_norm, models::Role::Float32});
  time_1.parameters(nested(visit, e + "linear_1."));
  time_2.parameters(nested(visit, e + "linear_2."));
  norm_out.parameters(nested(visit, "norm_out.linear."));
  proj_out.parameters(nested(visit, "proj_out."));
}

}  // namespace mmgen::dit
