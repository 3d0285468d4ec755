#include "models/parameters.h"

#include <map>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::models {

ParameterVisitor nested(const ParameterVisitor& visit, std::string prefix) {
  return [&visit, prefix = std::move(prefix)](const Parameter& p) {
    const std::string name = prefix + std::string(p.name);
    visit({name, p.tensor, p.role, p.shape, p.group});
  };
}

Tensor place_parameter(const Tensor& tensor, Role role, const PlacementRule& rule) {
  if (!tensor.defined()) return tensor;
  switch (role) {
    case Role::Host:
    case Role::Table:
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

void place_parameters(const ParameterList& list, const PlacementRule& rule) {
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

uint64_t shaped_bytes(const ParameterList& list, const PlacementRule& rule) {
  check(!rule.keep_quantized_blocks,
        "shaped_bytes: a GGUF file's blocks kept on the GPU take what the file gives them");
  uint64_t total = 0;
  list([&](const Parameter& p) {
    uint64_t values = 1;
    for (int64_t extent : p.shape) values *= uint64_t(extent);
    switch (p.role) {
      case Role::Host:
      case Role::Table:
        return;
      case Role::Float32:
        total += values * 4;
        return;
      case Role::Compute:
        total += values * dtype_size(rule.compute);
        return;
      case Role::Product:
        // e4m3 rows: the values, then one float32 scale per row (Tensor::nbytes).
        total += rule.fp8_products
                     ? row_scales_offset(int64_t(values)) + uint64_t(p.shape.front()) * 4
                     : values * dtype_size(rule.compute);
        return;
    }
  });
  return total;
}

void expect_tensor(const WeightStore& store, const std::string& name, const Shape& shape,
                   CheckpointKind kind) {
  check(store.has(name),
        "{} weights in {}: tensor '{}' is missing; the checkpoint does not match its "
        "config.json (or is not a {} {})",
        kind.component, store.origin().string(), name, kind.model, kind.component);
  // A GGUF file's tensors report float32 and the shape of the values they hold.
  const TensorInfo& info = store.info(name);
  check(dtype_is_floating(info.dtype) && info.dtype != DType::F64,
        "{} weights in {}: tensor '{}' is {}, expected f32, bf16, f16 or f8_e4m3", kind.component,
        store.origin().string(), name, dtype_name(info.dtype));
  check(info.shape == shape, "{} weights in {}: tensor '{}' has shape {}, config.json implies {}",
        kind.component, store.origin().string(), name, shape_string(info.shape),
        shape_string(shape));
}

void expect_parameters(const ParameterList& list, const WeightStore& store,
                       const std::string& prefix, CheckpointKind kind) {
  list([&](const Parameter& p) {
    expect_tensor(store, prefix + std::string(p.name), p.shape, kind);
  });
}

void load_parameters(const ParameterList& list, const WeightStore& store, const std::string& prefix,
                     Values values) {
  list([&](const Parameter& p) {
    const std::string name = prefix + std::string(p.name);
    if (p.role == Role::Product || p.role == Role::Table)
      p.tensor = store.get_for_product(name).contiguous();
    else if (values == Values::Float32)
      p.tensor = ops::weight_to_f32(store.get(name));
    else
      p.tensor = store.get(name);
  });
}

}  // namespace mmgen::models
