#include "models/dit/wan/wan_weights.h"

#include "core/error.h"

namespace mmgen::dit {

std::string wan_diffusers_name(const std::string& name) {
  // Fragment renames, whole dotted parts only, the longer fragments first.
  static const std::pair<const char*, const char*> kRenames[] = {
      {"time_embedding.0.", "condition_embedder.time_embedder.linear_1."},
      {"time_embedding.2.", "condition_embedder.time_embedder.linear_2."},
      {"text_embedding.0.", "condition_embedder.text_embedder.linear_1."},
      {"text_embedding.2.", "condition_embedder.text_embedder.linear_2."},
      {"time_projection.1.", "condition_embedder.time_proj."},
      {"head.modulation", "scale_shift_table"},
      {"head.head.", "proj_out."},
      {"self_attn.q.", "attn1.to_q."},
      {"self_attn.k.", "attn1.to_k."},
      {"self_attn.v.", "attn1.to_v."},
      {"self_attn.o.", "attn1.to_out.0."},
      {"self_attn.norm_q.", "attn1.norm_q."},
      {"self_attn.norm_k.", "attn1.norm_k."},
      {"cross_attn.q.", "attn2.to_q."},
      {"cross_attn.k.", "attn2.to_k."},
      {"cross_attn.v.", "attn2.to_v."},
      {"cross_attn.o.", "attn2.to_out.0."},
      {"cross_attn.norm_q.", "attn2.norm_q."},
      {"cross_attn.norm_k.", "attn2.norm_k."},
      {"ffn.0.", "ffn.net.0.proj."},
      {"ffn.2.", "ffn.net.2."},
      {"norm3.", "norm2."},  // the original's norm3 is the cross-attention norm, diffusers' norm2
      {"norm2.", "norm3."},
      {"modulation", "scale_shift_table"},
  };
  // The block prefix stays; one rename applies to what follows it (or to the whole name).
  size_t start = 0;
  if (name.rfind("blocks.", 0) == 0) start = name.find('.', 7) + 1;
  const std::string head = name.substr(0, start), rest = name.substr(start);
  for (const auto& [from, to] : kRenames)
    if (rest.rfind(from, 0) == 0) return head + to + rest.substr(std::string(from).size());
  return name;
}

WeightStore with_diffusers_names(const WeightStore& store) {
  if (!store.has("head.head.weight") && !store.has("blocks.0.self_attn.q.weight")) return store;
  return store.renamed(wan_diffusers_name);
}

std::string wan_lora_module_name(const std::string& original) {
  // The renames match whole dotted parts: a module's name is matched as its weight's prefix.
  std::string name = wan_diffusers_name(original + ".");
  name.pop_back();
  return name;
}

const std::vector<KeyLayout>& wan_transformer_layouts() {
  static const std::vector<KeyLayout> layouts = {
      {"diffusers", "condition_embedder.time_proj.weight", {}, {}},
      {"original Wan", "head.head.weight", with_diffusers_names, {}},
  };
  return layouts;
}

}  // namespace mmgen::dit
