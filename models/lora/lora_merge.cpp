#include "models/lora/lora_merge.h"

#include <map>
#include <set>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::lora {
namespace {

// The names `tree` lists as products and as other tensors (a derived part such as FLUX's
// "proj_out.weight[mlp]" under the stored name it is cut from).
struct ListedNames {
  std::set<std::string> products, others;
};

ListedNames listed_names(const models::ParameterList& tree) {
  ListedNames names;
  tree([&](const models::Parameter& p) {
    std::string name(p.name);
    name = name.substr(0, name.find('['));
    (p.role == models::Role::Product ? names.products : names.others).insert(name);
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

}  // namespace

WeightStore merge_loras(const WeightStore& base, const models::ParameterList& tree,
                        const std::vector<ScaledLora>& loras, const std::string& model) {
  if (loras.empty()) return base;
  const ListedNames names = listed_names(tree);
  // Every layer checked against the model first: a misfit file changes nothing.
  for (const ScaledLora& use : loras)
    for (const LoraLayer& layer : use.file->layers) {
      const std::string weight = layer.module + ".weight", bias = layer.module + ".bias";
      if (layer.down.defined()) {
        check(names.products.count(weight) && base.has(weight),
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

  std::map<std::string, Tensor> merged;
  for (const ScaledLora& use : loras)
    for (const LoraLayer& layer : use.file->layers) {
      if (layer.down.defined()) {
        // up · down = up · (downᵀ)ᵀ: the product's x · wᵀ with x = up, w = downᵀ.
        const Tensor delta =
            ops::linear(layer.up, layer.down.permute({1, 0}).contiguous(), Tensor(), DType::F32);
        Tensor& weight = accumulator(merged, base, layer.module + ".weight", *use.file, layer);
        const float s = float(use.scale) * layer.alpha_over_rank;
        float* w = weight.data<float>();
        const float* d = delta.data<float>();
        for (int64_t i = 0; i < weight.numel(); ++i) w[i] += s * d[i];
      }
      if (layer.bias_delta.defined()) {
        Tensor& bias = accumulator(merged, base, layer.module + ".bias", *use.file, layer);
        const float s = float(use.scale);
        float* b = bias.data<float>();
        const float* d = layer.bias_delta.data<float>();
        for (int64_t i = 0; i < bias.numel(); ++i) b[i] += s * d[i];
      }
    }
  for (auto& [name, tensor] : merged) tensor = tensor.to(base.info(name).dtype);
  return base.with_replaced(merged);
}

}  // namespace mmgen::lora
