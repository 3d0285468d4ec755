#include "pipeline/component_weights.h"

#include <map>

#include "core/error.h"
#include "models/dit/flux/flux_bfl_names.h"
#include "models/dit/wan/wan_weights.h"
#include "models/dit/zimage/zimage_original_names.h"
#include "models/vae/vae_layouts.h"

namespace mmgen {
namespace {

// The layouts each class's checkpoints come in (the model's own list); a class absent here is
// read in diffusers' (or transformers') names only.
const std::vector<KeyLayout>* layouts_of(const std::string& class_name) {
  static const std::map<std::string, const std::vector<KeyLayout>*> table = {
      {"WanTransformer3DModel", &dit::wan_transformer_layouts()},
      {"FluxTransformer2DModel", &dit::flux_transformer_layouts()},
      {"ZImageTransformer2DModel", &dit::zimage_transformer_layouts()},
      {"AutoencoderKLWan", &vae::wan_vae_layouts()},
      {"AutoencoderKL", &vae::autoencoder_kl_layouts()},
  };
  auto it = table.find(class_name);
  return it == table.end() ? nullptr : it->second;
}

// ComfyUI saves a diffusion model under `model.diffusion_model.`; the model's names start below.
const char* const kWrapperPrefixes[] = {"model.diffusion_model."};

std::string common_wrapper_prefix(const WeightStore& store) {
  const std::vector<std::string> names = store.names();
  if (names.empty()) return {};
  for (const std::string prefix : kWrapperPrefixes) {
    bool all = true;
    for (const auto& name : names) all = all && name.starts_with(prefix);
    if (all) return prefix;
  }
  return {};
}

std::string layout_keys(const std::vector<KeyLayout>& layouts) {
  std::string text;
  for (const KeyLayout& layout : layouts)
    text += (text.empty() ? "" : ", ") + layout.name + " '" + layout.marker + "'";
  return text;
}

}  // namespace

ComponentWeights open_component_weights(const ComponentEntry& entry) {
  const bool file = !entry.weights_file.empty();
  ComponentWeights weights{file ? WeightStore::open_file(entry.weights_file)
                                : WeightStore::open_folder(entry.path)};
  weights.prefix = common_wrapper_prefix(weights.store);
  if (!weights.prefix.empty())
    weights.store = weights.store.renamed(
        [&](const std::string& name) { return name.substr(weights.prefix.size()); });
  if (const std::vector<KeyLayout>* layouts = layouts_of(entry.class_name)) {
    const KeyLayout* found = nullptr;
    for (const KeyLayout& layout : *layouts)
      if (!found && weights.store.has(layout.marker)) found = &layout;
    check(found || !file,
          "--{}-path: {} holds no {} weights in a layout mmgen reads: it lacks the key each "
          "layout has ({}); give the {} checkpoint",
          entry.name, entry.weights_file.string(), entry.class_name, layout_keys(*layouts),
          entry.name);
    check(!found || found->refusal.empty(), "{}: {} is in the {} layout ('{}'); {}",
          file ? "--" + entry.name + "-path" : entry.name,
          (file ? entry.weights_file : entry.path).string(), found ? found->name : "",
          found ? found->marker : "", found ? found->refusal : "");
    if (found) {
      weights.layout = found->name;
      if (found->to_model_names) weights.store = found->to_model_names(weights.store);
    }
  }
  // A stored tensor that several names read from is a fused one, cut by rows.
  std::map<std::string, size_t> readers;
  for (const auto& name : weights.store.names()) ++readers[weights.store.stored_name(name)];
  for (const auto& [stored, count] : readers)
    if (count > 1) {
      ++weights.fused;
      weights.split += count;
    }
  // Examples: two plain renames and the first cut, when there is one.
  bool cut_shown = false;
  for (const auto& name : weights.store.names()) {
    const std::string& stored = weights.store.stored_name(name);
    if (stored == name) continue;
    ++weights.mapped;
    const bool cut = readers[stored] > 1;
    if (cut ? !cut_shown : weights.examples.size() < 2u + size_t(cut_shown)) {
      weights.examples.emplace_back(stored, name);
      cut_shown = cut_shown || cut;
    }
  }
  return weights;
}

WeightStore component_weight_store(const ComponentEntry& entry) {
  return open_component_weights(entry).store;
}

}  // namespace mmgen
