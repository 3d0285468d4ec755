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

}  // namespace

void check_flux_weights(const WeightStore& store, const FluxConfig& config) {
  const MMDiTWeightCheck expect{store, "FLUX"};
  const int64_t dim = config.dim(), head = config.attention_head_dim, mlp = config.mlp_dim();
  expect.linear("x_embedder", dim, config.in_channels);
  expect.linear("context_embedder", dim, config.joint_attention_dim);
  expect.linear("time_text_embed.timestep_embedder.linear_1", dim, 256);
  expect.linear("time_text_embed.timestep_embedder.linear_2", dim, dim);
  if (config.guidance_embeds) {
    expect.linear("time_text_embed.guidance_embedder.linear_1", dim, 256);
    expect.linear("time_text_embed.guidance_embedder.linear_2", dim, dim);
  } else {
    check(!store.has("time_text_embed.guidance_embedder.linear_1.weight"),
          "transformer weights in {}: the checkpoint has a guidance embedder but config.json says "
          "guidance_embeds false; set it to true (FLUX.1-dev) or use the schnell weights",
          store.origin().string());
  }
  expect.linear("time_text_embed.text_embedder.linear_1", dim, config.pooled_projection_dim);
  expect.linear("time_text_embed.text_embedder.linear_2", dim, dim);
  expect.linear("norm_out.linear", 2 * dim, dim);
  expect.linear("proj_out", config.out_values(), dim);
  for (int64_t layer = 0; layer < config.num_layers; ++layer)
    check_mmdit_joint_block(expect, double_prefix(layer), kDoubleBlockNames, dim, head, mlp);
  for (int64_t layer = 0; layer < config.num_single_layers; ++layer) {
    const std::string p = single_prefix(layer);
    expect.linear(p + "norm.linear", 3 * dim, dim);
    for (const char* name : {"to_q", "to_k", "to_v"}) expect.linear(p + "attn." + name, dim, dim);
    expect.tensor(p + "attn.norm_q.weight", {head});
    expect.tensor(p + "attn.norm_k.weight", {head});
    expect.linear(p + "proj_mlp", mlp, dim);
    expect.linear(p + "proj_out", dim, dim + mlp);
  }
}

FluxDoubleBlockWeights load_flux_double_block(const WeightStore& store, int64_t layer) {
  return MMDiTJointBlockWeights::load(store, double_prefix(layer), kDoubleBlockNames);
}

FluxSingleBlockWeights FluxSingleBlockWeights::load(const WeightStore& store, int64_t layer) {
  const std::string p = single_prefix(layer), a = p + "attn.";
  FluxSingleBlockWeights w;
  w.modulation = mmdit_adaln_linear(store, p + "norm.linear", 3, {1});
  w.to_q = mmdit_linear(store, a + "to_q");
  w.to_k = mmdit_linear(store, a + "to_k");
  w.to_v = mmdit_linear(store, a + "to_v");
  w.norm_q = mmdit_f32(store, a + "norm_q.weight");
  w.norm_k = mmdit_f32(store, a + "norm_k.weight");
  w.mlp_in = mmdit_linear(store, p + "proj_mlp");
  const Tensor out = store.get(p + "proj_out.weight");
  const int64_t dim = out.size(0);
  w.out_attention = out.slice(1, 0, dim).contiguous();
  w.out_mlp = out.slice(1, dim, out.size(1)).contiguous();
  w.out_bias = mmdit_f32(store, p + "proj_out.bias");
  return w;
}

void list_flux_parameters(const WeightStore& store, const FluxConfig& config,
                          const models::ParameterVisitor& visit) {
  for (int64_t layer = 0; layer < config.num_layers; ++layer)
    load_flux_double_block(store, layer).parameters(models::nested(visit, double_prefix(layer)));
  for (int64_t layer = 0; layer < config.num_single_layers; ++layer)
    FluxSingleBlockWeights::load(store, layer)
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
  visit({"attn.norm_q.weight", norm_q, Role::Float32});
  visit({"attn.norm_k.weight", norm_k, Role::Float32});
  visit({"proj_out.weight[attention]", out_attention, Role::Product});
  visit({"proj_out.weight[mlp]", out_mlp, Role::Product});
  visit({"proj_out.bias", out_bias, Role::Float32});
}

FluxOuterWeights FluxOuterWeights::load(const WeightStore& store, const FluxConfig& config) {
  const std::string e = "time_text_embed.";
  FluxOuterWeights w;
  w.x_embedder = mmdit_linear(store, "x_embedder");
  w.context_embedder = mmdit_linear(store, "context_embedder");
  w.time_1 = mmdit_linear(store, e + "timestep_embedder.linear_1");
  w.time_2 = mmdit_linear(store, e + "timestep_embedder.linear_2");
  if (config.guidance_embeds) {
    w.guidance_1 = mmdit_linear(store, e + "guidance_embedder.linear_1");
    w.guidance_2 = mmdit_linear(store, e + "guidance_embedder.linear_2");
  }
  w.text_1 = mmdit_linear(store, e + "text_embedder.linear_1");
  w.text_2 = mmdit_linear(store, e + "text_embedder.linear_2");
  w.norm_out = mmdit_adaln_linear(store, "norm_out.linear", 2, {0});
  w.proj_out = mmdit_linear(store, "proj_out");
  return w;
}

void FluxOuterWeights::parameters(const models::ParameterVisitor& visit) {
  using models::nested;
  const std::string e = "time_text_embed.";
  x_embedder.parameters(nested(visit, "x_embedder."));
  context_embedder.parameters(nested(visit, "context_embedder."));
  time_1.parameters(nested(visit, e + "timestep_embedder.linear_1."));
  time_2.parameters(nested(visit, e + "timestep_embedder.linear_2."));
  guidance_1.parameters(nested(visit, e + "guidance_embedder.linear_1."));
  guidance_2.parameters(nested(visit, e + "guidance_embedder.linear_2."));
  text_1.parameters(nested(visit, e + "text_embedder.linear_1."));
  text_2.parameters(nested(visit, e + "text_embedder.linear_2."));
  norm_out.parameters(nested(visit, "norm_out.linear."));
  proj_out.parameters(nested(visit, "proj_out."));
}

}  // namespace mmgen::dit
