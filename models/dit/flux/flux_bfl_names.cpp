#include "models/dit/flux/flux_bfl_names.h"

#include <map>
#include <string>
#include <utility>

#include "core/error.h"

namespace mmgen::dit {
namespace {

using Renames = std::vector<std::pair<std::string, std::string>>;

// Whole dotted fragments, BFL's first.
const Renames kOuter = {
    {"time_in.in_layer.", "time_text_embed.timestep_embedder.linear_1."},
    {"time_in.out_layer.", "time_text_embed.timestep_embedder.linear_2."},
    {"guidance_in.in_layer.", "time_text_embed.guidance_embedder.linear_1."},
    {"guidance_in.out_layer.", "time_text_embed.guidance_embedder.linear_2."},
    {"vector_in.in_layer.", "time_text_embed.text_embedder.linear_1."},
    {"vector_in.out_layer.", "time_text_embed.text_embedder.linear_2."},
    {"img_in.", "x_embedder."},
    {"txt_in.", "context_embedder."},
    {"final_layer.linear.", "proj_out."},
};
const Renames kDouble = {
    {"img_mod.lin.", "norm1.linear."},
    {"txt_mod.lin.", "norm1_context.linear."},
    {"img_attn.norm.query_norm.scale", "attn.norm_q.weight"},
    {"img_attn.norm.key_norm.scale", "attn.norm_k.weight"},
    {"txt_attn.norm.query_norm.scale", "attn.norm_added_q.weight"},
    {"txt_attn.norm.key_norm.scale", "attn.norm_added_k.weight"},
    {"img_attn.proj.", "attn.to_out.0."},
    {"txt_attn.proj.", "attn.to_add_out."},
    {"img_mlp.0.", "ff.net.0.proj."},
    {"img_mlp.2.", "ff.net.2."},
    {"txt_mlp.0.", "ff_context.net.0.proj."},
    {"txt_mlp.2.", "ff_context.net.2."},
};
const Renames kSingle = {
    {"modulation.lin.", "norm.linear."},
    {"norm.query_norm.scale", "attn.norm_q.weight"},
    {"norm.key_norm.scale", "attn.norm_k.weight"},
    {"linear2.", "proj_out."},
};

std::string replaced(const std::string& rest, const Renames& renames) {
  for (const auto& [from, to] : renames)
    if (rest.starts_with(from)) return to + rest.substr(from.size());
  return rest;
}

// "double_blocks.3.img_mod.lin.weight" -> {"transformer_blocks.3.", "img_mod.lin.weight"}.
std::pair<std::string, std::string> split_block(const std::string& name, const std::string& kind,
                                                const std::string& to) {
  if (!name.starts_with(kind)) return {};
  const size_t dot = name.find('.', kind.size());
  if (dot == std::string::npos) return {};
  return {to + name.substr(kind.size(), dot + 1 - kind.size()), name.substr(dot + 1)};
}

std::string diffusers_name(const std::string& name) {
  if (auto [block, rest] = split_block(name, "double_blocks.", "transformer_blocks.");
      !block.empty())
    return block + replaced(rest, kDouble);
  if (auto [block, rest] = split_block(name, "single_blocks.", "single_transformer_blocks.");
      !block.empty())
    return block + replaced(rest, kSingle);
  return replaced(name, kOuter);
}

// The row count of `name`'s first dimension.
int64_t rows_of(const WeightStore& store, const std::string& name) {
  const Shape& shape = store.info(name).shape;
  check(!shape.empty(), "{}: {} has no rows", store.origin().string(), name);
  return shape[0];
}

// XLabs' attention processors' LoRAs under BFL's names: "double_blocks.0.processor.qkv_lora1" ->
// "double_blocks.0.img_attn.qkv"; a single block's qkv_lora (q, k and v of linear1, not the MLP's
// input) as "single_blocks.0.qkv" (resolved below); the name itself when it is no processor's.
std::string from_xlabs(const std::string& name) {
  const size_t at = name.find(".processor.");
  if (at == std::string::npos) return name;
  const std::string block = name.substr(0, at + 1), part = name.substr(at + 11);
  static const std::pair<const char*, const char*> kParts[] = {{"qkv_lora1", "img_attn.qkv"},
                                                               {"qkv_lora2", "txt_attn.qkv"},
                                                               {"proj_lora1", "img_attn.proj"},
                                                               {"proj_lora2", "txt_attn.proj"},
                                                               {"qkv_lora", "qkv"},
                                                               {"proj_lora", "linear2"}};
  for (const auto& [from, to] : kParts)
    if (part == from) return block + to;
  return name;
}

}  // namespace

WeightStore flux_from_bfl_names(const WeightStore& bfl) {
  // Renamed first; the fused tensors keep their BFL names (with the block prefix diffusers')
  // until their rows are handed out below.
  const WeightStore store = bfl.renamed(diffusers_name);
  check(store.has("x_embedder.weight"), "{}: a BFL FLUX checkpoint without img_in.weight",
        store.origin().string());
  const int64_t dim = rows_of(store, "x_embedder.weight");
  std::map<std::string, WeightStore::RowPieces> pieces;
  // Equal thirds of `source`'s rows as `targets` (img_attn.qkv -> to_q, to_k, to_v).
  const auto thirds = [&](const std::string& source, const std::string& prefix,
                          const std::vector<std::string>& targets, const std::string& suffix) {
    const int64_t third = rows_of(store, source) / 3;
    for (size_t i = 0; i < targets.size(); ++i)
      pieces[prefix + targets[i] + suffix] = {source, {{int64_t(i) * third, third}}};
  };
  for (const std::string& name : store.names()) {
    const auto dot = name.rfind('.');
    const std::string suffix = name.substr(dot);  // ".weight" or ".bias"
    const std::string stem = name.substr(0, dot);
    if (stem.starts_with("transformer_blocks.") && stem.ends_with(".img_attn.qkv")) {
      const std::string prefix = stem.substr(0, stem.size() - std::string("img_attn.qkv").size());
      thirds(name, prefix, {"attn.to_q", "attn.to_k", "attn.to_v"}, suffix);
    } else if (stem.starts_with("transformer_blocks.") && stem.ends_with(".txt_attn.qkv")) {
      const std::string prefix = stem.substr(0, stem.size() - std::string("txt_attn.qkv").size());
      thirds(name, prefix, {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}, suffix);
    } else if (stem.starts_with("single_transformer_blocks.") && stem.ends_with(".linear1")) {
      // [q, k, v, mlp_in]: three of the width, then the MLP's rows.
      const std::string prefix = stem.substr(0, stem.size() - std::string("linear1").size());
      const int64_t rows = rows_of(store, name);
      check(rows > 3 * dim,
            "{}: {} has {} rows; a FLUX single block's linear1 has 3·{} + the MLP's",
            store.origin().string(), store.stored_name(name), rows, dim);
      pieces[prefix + "attn.to_q" + suffix] = {name, {{0, dim}}};
      pieces[prefix + "attn.to_k" + suffix] = {name, {{dim, dim}}};
      pieces[prefix + "attn.to_v" + suffix] = {name, {{2 * dim, dim}}};
      pieces[prefix + "proj_mlp" + suffix] = {name, {{3 * dim, rows - 3 * dim}}};
    } else if (stem == "final_layer.adaLN_modulation.1") {
      // BFL's [shift, scale]; diffusers' AdaLayerNormContinuous reads [scale, shift].
      const int64_t half = rows_of(store, name) / 2;
      pieces["norm_out.linear" + suffix] = {name, {{half, half}, {0, half}}};
    }
  }
  return store.with_row_pieces(pieces);
}

std::vector<lora::LoraTarget> flux_lora_targets(const std::string& original, int64_t dim) {
  const std::string bfl = from_xlabs(original);
  std::string name = diffusers_name(bfl + ".");
  name.pop_back();
  const auto fused = [&](const std::string& ending, const std::vector<std::string>& parts) {
    if (!name.ends_with(ending)) return std::vector<lora::LoraTarget>{};
    const std::string prefix = name.substr(0, name.size() - ending.size());
    std::vector<lora::LoraTarget> targets;
    for (size_t i = 0; i < parts.size(); ++i)
      targets.push_back({prefix + parts[i], {{int64_t(i) * dim, dim}}});
    return targets;
  };
  if (name.starts_with("transformer_blocks.")) {
    if (auto targets = fused("img_attn.qkv", {"attn.to_q", "attn.to_k", "attn.to_v"});
        !targets.empty())
      return targets;
    if (auto targets =
            fused("txt_attn.qkv", {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"});
        !targets.empty())
      return targets;
  }
  if (name.starts_with("single_transformer_blocks.")) {
    if (auto targets = fused(".qkv", {".attn.to_q", ".attn.to_k", ".attn.to_v"}); !targets.empty())
      return targets;
    // linear1 is [q, k, v, the MLP's input (4·dim)].
    if (auto targets = fused("linear1", {"attn.to_q", "attn.to_k", "attn.to_v"});
        !targets.empty()) {
      targets.push_back({targets.front().module.substr(
                             0, targets.front().module.size() - std::string("attn.to_q").size()) +
                             "proj_mlp",
                         {{3 * dim, 4 * dim}}});
      return targets;
    }
  }
  // BFL's [shift, scale]; diffusers' AdaLayerNormContinuous reads [scale, shift].
  if (name == "final_layer.adaLN_modulation.1")
    return {{"norm_out.linear", {{dim, dim}, {0, dim}}}};
  if (name == original) return {};
  return {{name, {}}};
}

const std::vector<KeyLayout>& flux_transformer_layouts() {
  static const std::vector<KeyLayout> layouts = {
      {"diffusers", "x_embedder.weight", {}, {}},
      {"BFL FLUX", "img_in.weight", flux_from_bfl_names, {}},
  };
  return layouts;
}

}  // namespace mmgen::dit
