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

constexpr models::CheckpointKind kQwenImageCheckpoint{"transformer", "Qwen-Image"};

QwenImageBlockWeights shaped_block(const QwenImageConfig& config) {
  // _modulate's chunks: shift, scale, gate for norm1, then for norm2.
  return MMDiTJointBlockWeights::shaped(
      kBlockNames, {config.dim(), config.attention_head_dim, config.mlp_dim()});
}

}  // namespace

void check_qwenimage_weights(const WeightStore& store, const QwenImageConfig& config) {
  models::expect_checkpoint(QwenImageOuterWeights::shaped(config), store, "", kQwenImageCheckpoint);
  for (int64_t layer = 0; layer < config.num_layers; ++layer)
    models::expect_checkpoint(shaped_block(config), store, qwenimage_block_prefix(layer),
                              kQwenImageCheckpoint);
}

QwenImageBlockWeights load_qwenimage_block(const WeightStore& store, int64_t layer,
                                           const QwenImageConfig& config) {
  return MMDiTJointBlockWeights::load(store, qwenimage_block_prefix(layer), shaped_block(config));
}

void list_qwenimage_parameters(const WeightStore& store, const QwenImageConfig& config,
                               const models::ParameterVisitor& visit) {
  for (int64_t layer = 0; layer < config.num_layers; ++layer)
    load_qwenimage_block(store, layer, config)
        .parameters(models::nested(visit, qwenimage_block_prefix(layer)));
  QwenImageOuterWeights::load(store, config).parameters(visit);
}

QwenImageOuterWeights QwenImageOuterWeights::shaped(const QwenImageConfig& config) {
  const int64_t dim = config.dim();
  QwenImageOuterWeights w;
  w.image_in = FluxLinear::shaped(dim, config.in_channels);
  w.text_in = FluxLinear::shaped(dim, config.joint_attention_dim);
  w.text_norm_dim = config.joint_attention_dim;
  w.time_1 = FluxLinear::shaped(dim, 256);
  w.time_2 = FluxLinear::shaped(dim, dim);
  w.norm_out = FluxLinear::shaped(2 * dim, dim);
  w.proj_out = FluxLinear::shaped(config.out_values(), dim);
  return w;
}

QwenImageOuterWeights QwenImageOuterWeights::load(const WeightStore& store,
                                                  const QwenImageConfig& config) {
  QwenImageOuterWeights w = models::loaded(shaped(config), store);
  mmdit_add_one_to_scales(w.norm_out, 2, {0});  // scale first, then shift
  return w;
}

void QwenImageOuterWeights::parameters(const models::ParameterVisitor& visit) {
  using models::nested;
  const std::string e = "time_text_embed.timestep_embedder.";
  image_in.parameters(nested(visit, "img_in."));
  text_in.parameters(nested(visit, "txt_in."));
  visit({"txt_norm.weight", text_norm, models::Role::Float32, {text_norm_dim}});
  time_1.parameters(nested(visit, e + "linear_1."));
  time_2.parameters(nested(visit, e + "linear_2."));
  norm_out.parameters(nested(visit, "norm_out.linear."));
  proj_out.parameters(nested(visit, "proj_out."));
}

}  // namespace mmgen::dit
