#include "models/dit/flux/flux_weights.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "models/dit/mmdit/mmdit_layers.h"

namespace mmgen::dit {
namespace {

const MMDiTJointBlockNames kDoubleBlockNames{"norm1.linear", "norm1_context.linear", "ff",
                                             "ff_context"};

std::string double_prefix(int64_t layer) {
  return "transformer_blocks." + std::to_string(layer) + ".";
}
std::string single_prefix(int64_t layer) {
  return "single_transformer_blocks." + std::to_string(layer) + ".";
}

constexpr models::CheckpointKind kFluxCheckpoint{"transformer", "FLUX"};

FluxDoubleBlockWeights shaped_double_block(const FluxConfig& config) {
  return MMDiTJointBlockWeights::shaped(
      kDoubleBlockNames, {config.dim(), config.attention_head_dim, config.mlp_dim()});
}

}  // namespace

void check_flux_weights(const WeightStore& store, const FluxConfig& config) {
  check(config.guidance_embeds || !store.has("time_text_embed.guidance_embedder.linear_1.weight"),
        "transformer weights in {}: the checkpoint has a guidance embedder but config.json says "
        "guidance_embeds false; set it to true (FLUX.1-dev) or use the schnell weights",
        store.origin().string());
  models::expect_checkpoint(FluxOuterWeights::shaped(config), store, "", kFluxCheckpoint);
  for (int64_t layer = 0; layer < config.num_layers; ++layer)
    models::expect_checkpoint(shaped_double_block(config), store, double_prefix(layer),
                              kFluxCheckpoint);
  for (int64_t layer = 0; layer < config.num_single_layers; ++layer)
    models::expect_checkpoint(FluxSingleBlockWeights::shaped(config), store, single_prefix(layer),
                              kFluxCheckpoint);
}

FluxDoubleBlockWeights load_flux_double_block(const WeightStore& store, int64_t layer,
                                              const FluxConfig& config) {
  return MMDiTJointBlockWeights::load(store, double_prefix(layer), shaped_double_block(config));
}

FluxSingleBlockWeights FluxSingleBlockWeights::shaped(const FluxConfig& config) {
  FluxSingleBlockWeights w;
  const int64_t dim = w.dim = config.dim();
  w.head_dim = config.attention_head_dim;
  const int64_t mlp = w.mlp_dim = config.mlp_dim();
  w.modulation = FluxLinear::shaped(3 * dim, dim);
  w.to_q = w.to_k = w.to_v = FluxLinear::shaped(dim, dim);
  w.mlp_in = FluxLinear::shaped(mlp, dim);
  return w;
}

FluxSingleBlockWeights FluxSingleBlockWeights::load(const WeightStore& store, int64_t layer,
                                                    const FluxConfig& config) {
  FluxSingleBlockWeights w = models::loaded(shaped(config), store, single_prefix(layer));
  mmdit_add_one_to_scales(w.modulation, 3, {1});
  // Columns are cut from values: a GGUF file's blocks or FP8 rows (whose scales follow the rows)
  // are read as get() gives them.
  if (!dtype_is_floating(w.out.dtype()))
    w.out = store.get(single_prefix(layer) + "proj_out.weight");
  w.out_attention = w.out.slice(1, 0, w.dim).contiguous();
  w.out_mlp = w.out.slice(1, w.dim, w.dim + w.mlp_dim).contiguous();
  w.out = Tensor();
  return w;
}

void list_flux_parameters(const WeightStore& store, const FluxConfig& config,
                          const models::ParameterVisitor& visit) {
  for (int64_t layer = 0; layer < config.num_layers; ++layer)
    load_flux_double_block(store, layer, config)
        .parameters(models::nested(visit, double_prefix(layer)));
  for (int64_t layer = 0; layer < config.num_single_layers; ++layer)
    FluxSingleBlockWeights::load(store, layer, config)
        .parameters(models::nested(visit, single_prefix(layer)));
  FluxOuterWeights::load(store, config).parameters(visit);
}

void FluxSingleBlockWeights::parameters(const models::ParameterVisitor& visit) {
  using models::nested;
  using models::Role;
  modulation.parameters(nested(visit, "norm.linear."));
  to_q.parameters(nested(visit, "attn.to_q."));
  to_k.parameters(nested(visit, "attn.to_k."));
  to_v.parameters(nested(visit, "attn.to_v."));
  mlp_in.parameters(nested(visit, "proj_mlp."));
  visit({"attn.norm_q.weight", norm_q, Role::Float32, {head_dim}});
  visit({"attn.norm_k.weight", norm_k, Role::Float32, {head_dim}});
  if (out_attention.defined()) {
    visit({"proj_out.weight[attention]", out_attention, Role::Product, {dim, dim}});
    visit({"proj_out.weight[mlp]", out_mlp, Role::Product, {dim, mlp_dim}});
  } else {
    visit({"proj_out.weight", out, Role::Product, {dim, dim + mlp_dim}});
  }
  visit({"proj_out.bias", out_bias, Role::Float32, {dim}});
}

FluxOuterWeights FluxOuterWeights::shaped(const FluxConfig& config) {
  const int64_t dim = config.dim();
  FluxOuterWeights w;
  w.guidance = config.guidance_embeds;
  w.x_embedder = FluxLinear::shaped(dim, config.in_channels);
  w.context_embedder = FluxLinear::shaped(dim, config.joint_attention_dim);
  w.time_1 = w.guidance_1 = FluxLinear::shaped(dim, 256);
  w.time_2 = w.guidance_2 = FluxLinear::shaped(dim, dim);
  w.text_1 = FluxLinear::shaped(dim, config.pooled_projection_dim);
  w.text_2 = FluxLinear::shaped(dim, dim);
  w.norm_out = FluxLinear::shaped(2 * dim, dim);
  w.proj_out = FluxLinear::shaped(config.out_values(), dim);
  return w;
}

FluxOuterWeights FluxOuterWeights::load(const WeightStore& store, const FluxConfig& config) {
  FluxOuterWeights w = models::loaded(shaped(config), store);
  mmdit_add_one_to_scales(w.norm_out, 2, {0});
  return w;
}

void FluxOuterWeights::parameters(const models::ParameterVisitor& visit) {
  using models::nested;
  const std::string e = "time_text_embed.";
  x_embedder.parameters(nested(visit, "x_embedder."));
  context_embedder.parameters(nested(visit, "context_embedder."));
  time_1.parameters(nested(visit, e + "timestep_embedder.linear_1."));
  time_2.parameters(nested(visit, e + "timestep_embedder.linear_2."));
  if (guidance) {
    guidance_1.parameters(nested(visit, e + "guidance_embedder.linear_1."));
    guidance_2.parameters(nested(visit, e + "guidance_embedder.linear_2."));
  }
  text_1.parameters(nested(visit, e + "text_embedder.linear_1."));
  text_2.parameters(nested(visit, e + "text_embedder.linear_2."));
  norm_out.parameters(nested(visit, "norm_out.linear."));
  proj_out.parameters(nested(visit, "proj_out."));
}

}  // namespace mmgen::dit
