// LoRA files (models/lora/lora_file.h): a safetensors file read as a LoRA for the Wan
// transformer (or FLUX's, in BFL's names), in any layout its keys may take, then merged into a
// tiny base of the shapes the keys name, and applied as runtime updates. Whatever the bytes, the
// reader and the merge either give layers whose shapes agree or refuse with mmgen::Error; every
// read stays inside what was checked.
#include "core/ops.h"
#include "core/safetensors.h"
#include "fuzz/fuzz_support.h"
#include "models/dit/flux/flux_bfl_names.h"
#include "models/dit/wan/wan_weights.h"
#include "models/lora/lora_file.h"
#include "models/lora/lora_merge.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const auto path = fuzz::write_scratch("x.safetensors", data, size);
  return fuzz::expect_only_errors([&] {
    const WeightStore store = WeightStore::open_file(path);
    // FLUX's BFL names (fused layers split by rows, at a width of 4), else Wan's.
    const lora::ModuleNames names = [](const std::string& original) {
      std::vector<lora::LoraTarget> targets = dit::flux_lora_targets(original, 4);
      if (targets.empty()) targets = {{dit::wan_lora_module_name(original), {}}};
      return targets;
    };
    const lora::LoraFile file = lora::read_lora_store(store, path, "transformer", names,
                                                      SafetensorsFile::open(path).metadata());
    // A base holding each layer the file names, at the shape its matrices make (small ones only).
    NamedTensors base;
    for (const lora::LoraLayer& layer : file.layers) {
      if (layer.down.defined() && layer.up.size(0) * layer.down.size(1) <= (1 << 16))
        base.emplace_back(layer.module + ".weight",
                          Tensor::zeros({layer.up.size(0), layer.down.size(1)}));
      if (layer.bias_delta.defined() && layer.bias_delta.numel() <= (1 << 16))
        base.emplace_back(layer.module + ".bias", Tensor::zeros({layer.bias_delta.numel()}));
    }
    const auto base_path = fuzz::scratch_file("base.safetensors");
    write_safetensors(base_path, base);
    const WeightStore weights = WeightStore::open_file(base_path);
    const models::ParameterList tree = [&](const models::ParameterVisitor& visit) {
      for (auto& [name, tensor] : base)
        visit({name, tensor,
               name.ends_with(".weight") ? models::Role::Product : models::Role::Float32});
    };
    const WeightStore merged = lora::merge_loras(weights, tree, {{&file, 0.5}}, "fuzz base");
    const WeightStore runtime =
        lora::with_runtime_loras(weights, tree, {{&file, 0.5}, {&file, 2.0}}, "fuzz base");
    float sum = 0;
    for (const auto& [name, tensor] : base) {
      sum += merged.get_f32(name).data<float>()[0];
      // The runtime update's product on one row of ones.
      const Tensor weight = runtime.get_for_product(name);
      if (weight.dim() == 2)
        sum += ops::linear(Tensor::full({1, weight.size(1)}, 1.0f), weight).data<float>()[0];
    }
    volatile float sink = sum;
    (void)sink;
  });
}
