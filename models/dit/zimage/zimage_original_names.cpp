#include "models/dit/zimage/zimage_original_names.h"

#include <map>
#include <string>
#include <utility>

#include "core/error.h"

namespace mmgen::dit {
namespace {

// Diffusers keeps one embedder and one final layer per (patch, frame patch) size; the original
// release has the one for 2x2 patches of single frames.
const std::pair<const char*, const char*> kPrefixes[] = {
    {"x_embedder.", "all_x_embedder.2-1."},
    {"final_layer.", "all_final_layer.2-1."},
};
// Inside a block (layers.N, noise_refiner.N, context_refiner.N).
const std::pair<const char*, const char*> kInBlock[] = {
    {"attention.out.", "attention.to_out.0."},
    {"attention.q_norm.", "attention.norm_q."},
    {"attention.k_norm.", "attention.norm_k."},
};

std::string diffusers_name(const std::string& name) {
  for (const auto& [from, to] : kPrefixes)
    if (name.starts_with(from)) return to + name.substr(std::string(from).size());
  for (const char* block : {"layers.", "noise_refiner.", "context_refiner."}) {
    if (!name.starts_with(block)) continue;
    const size_t dot = name.find('.', std::string(block).size());
    if (dot == std::string::npos) return name;
    const std::string head = name.substr(0, dot + 1), rest = name.substr(dot + 1);
    for (const auto& [from, to] : kInBlock)
      if (rest.starts_with(from)) return head + to + rest.substr(std::string(from).size());
  }
  return name;
}

}  // namespace

WeightStore zimage_from_original_names(const WeightStore& original) {
  const WeightStore store = original.renamed(diffusers_name);
  std::map<std::string, WeightStore::RowPieces> pieces;
  const std::string fused = ".attention.qkv.weight";
  for (const std::string& name : store.names()) {
    if (!name.ends_with(fused)) continue;
    const std::string prefix = name.substr(0, name.size() - fused.size()) + ".attention.to_";
    const int64_t third = store.info(name).shape.at(0) / 3;
    int64_t at = 0;
    for (const char* part : {"q", "k", "v"}) {
      pieces[prefix + part + ".weight"] = {name, {{at, third}}};
      at += third;
    }
  }
  // (The original's norm_final.weight, which the forward never reads, stays as it is, unread;
  // diffusers drops it.)
  return store.with_row_pieces(pieces);
}

std::vector<lora::LoraTarget> zimage_lora_targets(const std::string& original, int64_t dim) {
  std::string name = diffusers_name(original + ".");
  name.pop_back();
  const std::string fused = ".attention.qkv";
  if (name.ends_with(fused)) {
    const std::string prefix = name.substr(0, name.size() - fused.size()) + ".attention.to_";
    return {
        {prefix + "q", {{0, dim}}}, {prefix + "k", {{dim, dim}}}, {prefix + "v", {{2 * dim, dim}}}};
  }
  if (name == original) return {};
  return {{name, {}}};
}

const std::vector<KeyLayout>& zimage_transformer_layouts() {
  static const std::vector<KeyLayout> layouts = {
      {"diffusers", "all_x_embedder.2-1.weight", {}, {}},
      {"original Z-Image", "x_embedder.weight", zimage_from_original_names, {}},
  };
  return layouts;
}

}  // namespace mmgen::dit
