#include "models/text_encoders/encoder_weights.h"

#include "core/error.h"

namespace mmgen::text_encoders {

Tensor require_encoder_weight(const WeightStore& weights, const std::string& name,
                              const Shape& shape, const char* checkpoint, EncoderWeight form) {
  check(weights.has(name),
        "text encoder weights in {} lack \"{}\"; is this {} checkpoint matching its config.json?",
        weights.origin().string(), name, checkpoint);
  const bool product = form == EncoderWeight::Product;
  Tensor tensor = product ? weights.get_for_product(name) : weights.get(name);
  // A block-quantized tensor's last dimension counts blocks; compare the values it holds.
  Shape values = tensor.shape();
  if (!values.empty()) values.back() *= dtype_block_values(tensor.dtype());
  const bool stored_as_expected =
      dtype_is_floating(tensor.dtype()) ||
      (product && (dtype_is_blocks(tensor.dtype()) || tensor.dtype() == DType::F8E4M3Rows));
  check(values == shape && stored_as_expected,
        "text encoder weight \"{}\" in {} is {} {}, expected a float tensor of shape {}; the "
        "checkpoint does not match config.json",
        name, weights.origin().string(), dtype_name(tensor.dtype()), shape_string(values),
        shape_string(shape));
  return tensor;
}

}  // namespace mmgen::text_encoders
