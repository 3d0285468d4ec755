#include "models/parameters.h"

#include <map>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::models {

ParameterVisitor nested(const ParameterVisitor& visit, std::string prefix) {
  return [&visit, prefix = std::move(prefix)](const Parameter& p) {
    const std::string name = prefix + std::string(p.name);
    visit({name, p.tensor, p.role, p.group});
  };
}

Tensor place_parameter(const Tensor& tensor, Role role, const PlacementRule& rule) {
  if (!tensor.defined()) return tensor;
  switch (role) {
    case Role::Host:
      return tensor;
    case Role::Float32:
      return tensor.to(DType::F32).to(rule.device);
    case Role::Compute:
      return tensor.to(rule.compute).to(rule.device);
    case Role::Product:
      break;
  }
  check(!rule.fp8_products || rule.device == Device::CUDA,
        "FP8 products run on the GPU's tensor cores; the CPU computes in float32");
  if (rule.fp8_products) {
    if (tensor.dtype() == DType::F8E4M3Rows) return tensor.to(rule.device);
    return tensor.to(DType::BF16).to(rule.device).to(DType::F8E4M3Rows);
  }
  if (rule.keep_quantized_blocks && dtype_is_blocks(tensor.dtype()) && rule.device == Device::CUDA)
    return tensor.to(rule.device);
  return tensor.to(rule.compute).to(rule.device);
}

void place_parameters(const std::function<void(const ParameterVisitor&)>& list,
                      const PlacementRule& rule) {
  // Grouped products are collected first, then stacked: one allocation per group.
  std::map<int, std::vector<Tensor*>> groups;
  list([&](const Parameter& p) {
    if (p.group != 0 && p.role == Role::Product && p.tensor.defined() && !rule.fp8_products)
      groups[p.group].push_back(&p.tensor);
    else
      p.tensor = place_parameter(p.tensor, p.role, rule);
  });
  for (auto& [group, members] : groups) {
    std::vector<Tensor> host;
    for (const Tensor* t : members) host.push_back(*t);
    const std::vector<Tensor> stacked = ops::stack_weights(host, rule.compute, rule.device);
    for (size_t i = 0; i < members.size(); ++i) *members[i] = stacked[i];
  }
}

void expect_parameter(const WeightStore& store, const std::string& name, const Shape& shape,
                      std::string_view model) {
  check(store.has(name),
        "transformer weights in {}: tensor '{}' is missing; the checkpoint does not match its "
        "config.json (or is not a {} transformer)",
        store.origin().string(), name, model);
  const TensorInfo& info = store.info(name);
  check(dtype_is_floating(info.dtype) && info.dtype != DType::F64,
        "transformer weights in {}: tensor '{}' is {}, expected f32, bf16, f16 or f8_e4m3",
        store.origin().string(), name, dtype_name(info.dtype));
  check(info.shape == shape,
        "transformer weights in {}: tensor '{}' has shape {}, config.json implies {}",
        store.origin().string(), name, shape_string(info.shape), shape_string(shape));
}

}  // namespace mmgen::models
