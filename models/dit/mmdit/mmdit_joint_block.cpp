#include "models/dit/mmdit/mmdit_joint_block.h"

#include <utility>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::dit {

MMDiTJointBlockWeights MMDiTJointBlockWeights::load(const WeightStore& store,
                                                    const std::string& prefix,
                                                    const MMDiTJointBlockNames& names) {
  const std::string& p = prefix;
  const std::string a = p + "attn.";
  MMDiTJointBlockWeights w;
  w.names = names;
  w.image_modulation = mmdit_adaln_linear(store, p + names.image_modulation, 6, {1, 4});
  w.text_modulation = mmdit_adaln_linear(store, p + names.text_modulation, 6, {1, 4});
  w.to_q = mmdit_linear(store, a + "to_q");
  w.to_k = mmdit_linear(store, a + "to_k");
  w.to_v = mmdit_linear(store, a + "to_v");
  w.to_out = mmdit_linear(store, a + "to_out.0");
  w.add_q = mmdit_linear(store, a + "add_q_proj");
  w.add_k = mmdit_linear(store, a + "add_k_proj");
  w.add_v = mmdit_linear(store, a + "add_v_proj");
  w.add_out = mmdit_linear(store, a + "to_add_out");
  w.norm_q = mmdit_f32(store, a + "norm_q.weight");
  w.norm_k = mmdit_f32(store, a + "norm_k.weight");
  w.norm_added_q = mmdit_f32(store, a + "norm_added_q.weight");
  w.norm_added_k = mmdit_f32(store, a + "norm_added_k.weight");
  w.image_mlp_in = mmdit_linear(store, p + names.image_mlp + ".net.0.proj");
  w.image_mlp_out = mmdit_linear(store, p + names.image_mlp + ".net.2");
  w.text_mlp_in = mmdit_linear(store, p + names.text_mlp + ".net.0.proj");
  w.text_mlp_out = mmdit_linear(store, p + names.text_mlp + ".net.2");
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
    visit({name, *norm, models::Role::Float32});
  image_mlp_in.parameters(nested(visit, names.image_mlp + ".net.0.proj."));
  image_mlp_out.parameters(nested(visit, names.image_mlp + ".net.2."));
  text_mlp_in.parameters(nested(visit, names.text_mlp + ".net.0.proj."));
  text_mlp_out.parameters(nested(visit, names.text_mlp + ".net.2."));
}

void check_mmdit_joint_block(const MMDiTWeightCheck& expect, const std::string& prefix,
                             const MMDiTJointBlockNames& names, int64_t dim, int64_t head_dim,
                             int64_t mlp_dim) {
  expect.linear(prefix + names.image_modulation, 6 * dim, dim);
  expect.linear(prefix + names.text_modulation, 6 * dim, dim);
  for (const char* name :
       {"to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"})
    expect.linear(prefix + "attn." + name, dim, dim);
  for (const char* name : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"})
    expect.tensor(prefix + "attn." + name + ".weight", {head_dim});
  for (const std::string& mlp : {names.image_mlp, names.text_mlp}) {
    expect.linear(prefix + mlp + ".net.0.proj", mlp_dim, dim);
    expect.linear(prefix + mlp + ".net.2", dim, mlp_dim);
  }
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
