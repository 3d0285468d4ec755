#include "models/dit/mmdit/mmdit_joint_block.h"

#include <utility>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::dit {

MMDiTJointBlockWeights MMDiTJointBlockWeights::shaped(const MMDiTJointBlockNames& names,
                                                      MMDiTJointBlockShape shape) {
  const int64_t dim = shape.dim, mlp = shape.mlp_dim;
  MMDiTJointBlockWeights w;
  w.names = names;
  w.head_dim = shape.head_dim;
  w.image_modulation = w.text_modulation = FluxLinear::shaped(6 * dim, dim);
  for (FluxLinear* linear :
       {&w.to_q, &w.to_k, &w.to_v, &w.to_out, &w.add_q, &w.add_k, &w.add_v, &w.add_out})
    *linear = FluxLinear::shaped(dim, dim);
  w.image_mlp_in = w.text_mlp_in = FluxLinear::shaped(mlp, dim);
  w.image_mlp_out = w.text_mlp_out = FluxLinear::shaped(dim, mlp);
  return w;
}

MMDiTJointBlockWeights MMDiTJointBlockWeights::load(const WeightStore& store,
                                                    const std::string& prefix,
                                                    MMDiTJointBlockWeights shaped) {
  MMDiTJointBlockWeights w = models::loaded(std::move(shaped), store, prefix);
  // shift, scale, gate for the attention, then for the MLP.
  mmdit_add_one_to_scales(w.image_modulation, 6, {1, 4});
  mmdit_add_one_to_scales(w.text_modulation, 6, {1, 4});
  return w;
}

void MMDiTJointBlockWeights::parameters(const models::ParameterVisitor& visit) {
  using models::nested;
  image_modulation.parameters(nested(visit, names.image_modulation + "."));
  text_modulation.parameters(nested(visit, names.text_modulation + "."));
  for (auto [name, linear] : {std::pair{"attn.to_q.", &to_q},
                              {"attn.to_k.", &to_k},
                              {"attn.to_v.", &to_v},
                              {"attn.to_out.0.", &to_out},
                              {"attn.add_q_proj.", &add_q},
                              {"attn.add_k_proj.", &add_k},
                              {"attn.add_v_proj.", &add_v},
                              {"attn.to_add_out.", &add_out}})
    linear->parameters(nested(visit, name));
  for (auto [name, norm] : {std::pair{"attn.norm_q.weight", &norm_q},
                            {"attn.norm_k.weight", &norm_k},
                            {"attn.norm_added_q.weight", &norm_added_q},
                            {"attn.norm_added_k.weight", &norm_added_k}})
    visit({name, *norm, models::Role::Float32, {head_dim}});
  image_mlp_in.parameters(nested(visit, names.image_mlp + ".net.0.proj."));
  image_mlp_out.parameters(nested(visit, names.image_mlp + ".net.2."));
  text_mlp_in.parameters(nested(visit, names.text_mlp + ".net.0.proj."));
  text_mlp_out.parameters(nested(visit, names.text_mlp + ".net.2."));
}

void run_mmdit_joint_block(Tensor& text, Tensor& image, const MMDiTJointBlockWeights& w,
                           const Tensor& conditioning, MMDiTHeads heads, const FluxRopeTables& rope,
                           DType compute, const attention::Call& call, const char* block) {
  const int64_t text_tokens = text.size(0), tokens = text_tokens + image.size(0);
  check(rope.cos.size(0) == tokens, "{}: RoPE tables for {} rows, {} tokens", block,
        rope.cos.size(0), tokens);
  // shift, 1 + scale, gate for attention (norm1); then for the MLP (norm2).
  const Tensor image_mod = mmdit_modulation(w.image_modulation, conditioning, 6);
  const Tensor text_mod = mmdit_modulation(w.text_modulation, conditioning, 6);

  Tensor image_normed = ops::modulated_layer_norm(image, image_mod.select(0, 0),
                                                  image_mod.select(0, 1), kMMDiTEps, compute);
  Tensor text_normed = ops::modulated_layer_norm(text, text_mod.select(0, 0), text_mod.select(0, 1),
                                                 kMMDiTEps, compute);
  Tensor attended;
  {
    const FluxRopeTables text_rope = rope.rows(0, text_tokens);
    const FluxRopeTables image_rope = rope.rows(text_tokens, tokens);
    // The joint sequence is [text, image], as diffusers concatenates it.
    const Tensor q = mmdit_stack_rows(
        {mmdit_rotated(text_normed, w.add_q, w.norm_added_q, text_rope, heads, compute),
         mmdit_rotated(image_normed, w.to_q, w.norm_q, image_rope, heads, compute)});
    const Tensor k = mmdit_stack_rows(
        {mmdit_rotated(text_normed, w.add_k, w.norm_added_k, text_rope, heads, compute),
         mmdit_rotated(image_normed, w.to_k, w.norm_k, image_rope, heads, compute)});
    const Tensor v =
        mmdit_stack_rows({ops::linear(text_normed, w.add_v.weight, w.add_v.bias, compute),
                          ops::linear(image_normed, w.to_v.weight, w.to_v.bias, compute)});
    attended = attention::attend(mmdit_as_heads(q, heads), mmdit_as_heads(k, heads),
                                 mmdit_as_heads(v, heads), call)
                   .contiguous()
                   .view({tokens, heads.heads * heads.head_dim});
  }
  const Tensor text_out =
      ops::linear(attended.slice(0, 0, text_tokens), w.add_out.weight, w.add_out.bias, DType::F32);
  const Tensor image_out = ops::linear(attended.slice(0, text_tokens, tokens), w.to_out.weight,
                                       w.to_out.bias, DType::F32);
  attended = Tensor();

  // Residual under the attention gate, then the MLP's modulated norm, in one op.
  image_normed =
      ops::add_gated_layer_norm_(image, image_out, image_mod.select(0, 2), kMMDiTEps,
                                 image_mod.select(0, 4), image_mod.select(0, 3), compute);
  ops::add_gated_(image, mmdit_mlp(image_normed, w.image_mlp_in, w.image_mlp_out, compute),
                  image_mod.select(0, 5));
  text_normed = ops::add_gated_layer_norm_(text, text_out, text_mod.select(0, 2), kMMDiTEps,
                                           text_mod.select(0, 4), text_mod.select(0, 3), compute);
  ops::add_gated_(text, mmdit_mlp(text_normed, w.text_mlp_in, w.text_mlp_out, compute),
                  text_mod.select(0, 5));
}

}  // namespace mmgen::dit
