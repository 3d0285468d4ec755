#include "models/dit/wan_weights.h"

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::dit {

void expect_weight(const WeightStore& store, const std::string& name, const Shape& shape) {
  check(store.has(name),
        "transformer weights in {}: tensor '{}' is missing; the checkpoint does not match its "
        "config.json (or is not a Wan text-to-video transformer)",
        store.origin().string(), name);
  const TensorInfo& info = store.info(name);
  check(dtype_is_floating(info.dtype) && info.dtype != DType::F64,
        "transformer weights in {}: tensor '{}' is {}, expected f32, bf16 or f16",
        store.origin().string(), name, dtype_name(info.dtype));
  check(info.shape == shape,
        "transformer weights in {}: tensor '{}' has shape {}, config.json implies {}",
        store.origin().string(), name, shape_string(info.shape), shape_string(shape));
}

Tensor load_weight(const WeightStore& store, const std::string& name) {
  return ops::weight_to_f32(store.get(name));
}

Tensor load_linear_weight(const WeightStore& store, const std::string& name) {
  return store.get(name).contiguous();
}

}  // namespace mmgen::dit
