#include "models/lora/lora_merge.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "core/low_rank.h"
#include "core/ops.h"

namespace mmgen::lora {
namespace {

// The names `tree` lists as products' matrices (Product, and Table: a matrix the host reads as a
// product does, Z-Image's adaLN modulation) and as other tensors (a derived part such as FLUX's
// "proj_out.weight[mlp]" under the stored name it is cut from).
struct ListedNames {
  std::set<std::string> products, tables, others;
};

ListedNames listed_names(const models::ParameterList& tree) {
  ListedNames names;
  tree([&](const models::Parameter& p) {
    std::string name(p.name);
    name = name.substr(0, name.find('['));
    (p.role == models::Role::Product ? names.products
     : p.role == models::Role::Table ? names.tables
                                     : names.others)
        .insert(name);
  });
  return names;
}

// The float32 copy of `name` the merge accumulates into, made on first use.
Tensor& accumulator(std::map<std::string, Tensor>& merged, const WeightStore& base,
                    const std::string& name, const LoraFile& file, const LoraLayer& layer) {
  auto found = merged.find(name);
  if (found != merged.end()) return found->second;
  const DType stored = base.info(name).dtype, product = base.product_dtype(name);
  check(stored == product && stored != DType::F8E4M3,
        "LoRA {}: '{}' changes {}, which is stored as {}; merging into quantized or FP8 weights "
        "is not built yet (use a bf16 or float32 checkpoint of the model)",
        file.path.string(), layer.key, name, base.stored_type(name));
  // A float32 weight is the mapped file's: copied. Any other dtype is converted into a new one.
  const Tensor stored_weight = base.get(name);
  return merged
      .emplace(name, stored == DType::F32 ? stored_weight.clone() : stored_weight.to(DType::F32))
      .first->second;
}

// Every layer checked against the model first: a misfit file changes nothing.
void check_fit(const WeightStore& base, const models::ParameterList& tree,
               const std::vector<ScaledLora>& loras, const std::string& model) {
  const ListedNames names = listed_names(tree);
  for (const ScaledLora& use : loras)
    for (const LoraLayer& layer : use.file->layers) {
      const std::string weight = layer.module + ".weight", bias = layer.module + ".bias";
      if (layer.down.defined()) {
        check((names.products.count(weight) || names.tables.count(weight)) && base.has(weight),
              "LoRA {}: '{}' changes '{}', which this {} does not have as a linear layer; is the "
              "LoRA made for another model?",
              use.file->path.string(), layer.key, layer.module, model);
        const Shape& shape = base.info(weight).shape;
        const Shape product = {layer.up.size(0), layer.down.size(1)};
        check(shape == product,
              "LoRA {}: '{}' makes a {} change for '{}', which is {} in this {}; is the LoRA made "
              "for another size of the model?",
              use.file->path.string(), layer.key, shape_string(product), weight,
              shape_string(shape), model);
      }
      if (layer.bias_delta.defined()) {
        check((names.others.count(bias) || names.products.count(bias)) && base.has(bias),
              "LoRA {}: '{}' changes the bias '{}', which this {} does not have",
              use.file->path.string(), layer.key, bias, model);
        check(base.info(bias).shape == layer.bias_delta.shape(),
              "LoRA {}: '{}' has shape {}, the bias '{}' is {}", use.file->path.string(), layer.key,
              shape_string(layer.bias_delta.shape()), bias, shape_string(base.info(bias).shape));
      }
    }
}

// The layers' bias deltas added to `merged` (float32 copies of the stored biases).
void merge_bias_deltas(std::map<std::string, Tensor>& merged, const WeightStore& base,
                       const std::vector<ScaledLora>& loras) {
  for (const ScaledLora& use : loras)
    for (const LoraLayer& layer : use.file->layers)
      if (layer.bias_delta.defined()) {
        Tensor& bias = accumulator(merged, base, layer.module + ".bias", *use.file, layer);
        const float s = float(use.scale);
        float* b = bias.data<float>();
        const float* d = layer.bias_delta.data<float>();
        for (int64_t i = 0; i < bias.numel(); ++i) b[i] += s * d[i];
      }
}

// Each changed matrix's LoRA terms as one update, in the order the LoRAs come: their down
// matrices stacked [Σ rank, in], their up matrices side by side [out, Σ rank], each scaled by the
// user's scale times alpha / rank.
std::map<std::string, LowRankUpdate> stacked_updates(const std::vector<ScaledLora>& loras) {
  std::map<std::string, std::vector<std::pair<const LoraLayer*, float>>> terms;
  for (const ScaledLora& use : loras)
    for (const LoraLayer& layer : use.file->layers)
      if (layer.down.defined())
        terms[layer.module + ".weight"].emplace_back(&layer,
                                                     float(use.scale) * layer.alpha_over_rank);
  std::map<std::string, LowRankUpdate> updates;
  for (const auto& [name, parts] : terms) {
    int64_t rank = 0;
    for (const auto& part : parts) rank += part.first->down.size(0);
    const int64_t in = parts.front().first->down.size(1), out = parts.front().first->up.size(0);
    Tensor down = Tensor::empty({rank, in}), up = Tensor::empty({out, rank});
    int64_t at = 0;
    for (const auto& [layer, scale] : parts) {
      const int64_t r = layer->down.size(0);
      down.slice(0, at, at + r).copy_from(layer->down);
      // Columns [at, at + r) of each row: this LoRA's up matrix, scaled.
      const float* u = layer->up.data<float>();
      float* to = up.data<float>();
      for (int64_t o = 0; o < out; ++o)
        for (int64_t c = 0; c < r; ++c) to[o * rank + at + c] = scale * u[o * r + c];
      at += r;
    }
    updates.emplace(name, LowRankUpdate{down, up});
  }
  return updates;
}

// W + up · down in the stored dtype of `name` (float32 sums, one rounding), a block of rows at a
// time so that the float32 values of a block stay in cache: one read of W and one write of the
// result, where a float32 copy of the whole matrix would be read and written several times.
Tensor merged_matrix(const WeightStore& base, const std::string& name, const LowRankUpdate& update,
                     const std::vector<ScaledLora>& loras) {
  const DType stored = base.info(name).dtype, product = base.product_dtype(name);
  if (stored != product || stored == DType::F8E4M3) {
    std::string file;
    for (const ScaledLora& use : loras)
      for (const LoraLayer& layer : use.file->layers)
        if (file.empty() && layer.module + ".weight" == name)
          file = use.file->path.string() + ": '" + layer.key + "'";
    fail(
        "LoRA {} changes {}, which is stored as {}; merging into quantized or FP8 weights "
        "would requantize them: use --lora-mode runtime (or a bf16 or float32 checkpoint)",
        file, name, base.stored_type(name));
  }
  const Tensor weight = base.get(name);
  const int64_t rows = weight.size(0), in = weight.size(1);
  const Tensor down_t = update.down.permute({1, 0}).contiguous();  // [in, rank]
  Tensor result = Tensor::empty(weight.shape(), stored);
  const int64_t block = std::max<int64_t>(1, (int64_t(1) << 20) / in);
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t r1 = std::min(rows, r0 + block);
    const Tensor stored_rows = weight.slice(0, r0, r1);
    Tensor sum = stored == DType::F32 ? stored_rows.clone() : stored_rows.to(DType::F32);
    // up · down = up · (downᵀ)ᵀ: the product's x · wᵀ with x = up's rows, w = downᵀ.
    ops::add_(sum, ops::linear(update.up.slice(0, r0, r1).contiguous(), down_t));
    result.slice(0, r0, r1).copy_from(sum);
  }
  return result;
}

}  // namespace

WeightStore merge_loras(const WeightStore& base, const models::ParameterList& tree,
                        const std::vector<ScaledLora>& loras, const std::string& model) {
  if (loras.empty()) return base;
  check_fit(base, tree, loras, model);
  std::map<std::string, Tensor> merged;
  merge_bias_deltas(merged, base, loras);
  for (auto& [name, tensor] : merged) tensor = tensor.to(base.info(name).dtype);
  for (const auto& [name, update] : stacked_updates(loras))
    merged[name] = merged_matrix(base, name, update, loras);
  return base.with_replaced(merged);
}

WeightStore with_runtime_loras(const WeightStore& base, const models::ParameterList& tree,
                               const std::vector<ScaledLora>& loras, const std::string& model) {
  if (loras.empty()) return base;
  check_fit(base, tree, loras, model);
  // A table the host reads (small: Z-Image's modulation) is merged instead, as the bias deltas.
  const std::set<std::string> tables = listed_names(tree).tables;
  std::map<std::string, Tensor> merged;
  merge_bias_deltas(merged, base, loras);
  for (auto& [name, tensor] : merged) tensor = tensor.to(base.info(name).dtype);
  std::map<std::string, std::shared_ptr<const LowRankUpdate>> updates;
  for (auto& [name, update] : stacked_updates(loras))
    if (tables.count(name))
      merged[name] = merged_matrix(base, name, update, loras);
    else
      updates[name] = std::make_shared<const LowRankUpdate>(std::move(update));
  return base.with_replaced(merged).with_low_rank(updates);
}

std::set<std::string> linear_modules(const models::ParameterList& tree) {
  const ListedNames names = listed_names(tree);
  std::set<std::string> modules;
  const std::string weight = ".weight";
  for (const std::set<std::string>* matrices : {&names.products, &names.tables})
    for (const std::string& name : *matrices)
      if (name.ends_with(weight)) modules.insert(name.substr(0, name.size() - weight.size()));
  return modules;
}

LoraMode resolved_mode(LoraMode mode, const WeightStore& base,
                       const std::vector<ScaledLora>& loras) {
  if (mode != LoraMode::Auto) return mode;
  for (const ScaledLora& use : loras)
    for (const LoraLayer& layer : use.file->layers) {
      const std::string weight = layer.module + ".weight";
      if (!layer.down.defined() || !base.has(weight)) continue;
      const DType product = base.product_dtype(weight);
      if (dtype_is_blocks(product) || product == DType::F8E4M3Rows ||
          base.info(weight).dtype == DType::F8E4M3)
        return LoraMode::Runtime;
    }
  return LoraMode::Merge;
}

}  // namespace mmgen::lora
