// FP8 weights as ComfyUI and its community store them in safetensors: e4m3 values (F8_E4M3)
// with a float scale beside each quantized weight, `<layer>.scale_weight` (ComfyUI's "scaled
// fp8" files, marked by a `scaled_fp8` tensor) or `<layer>.weight_scale` (its newer quantized
// layers), one per tensor or one per output channel; a weight without a scale has scale 1 (plain
// fp8_e4m3fn files). A value is e4m3 · scale. The input scales beside them (`scale_input`,
// `input_scale`) are not needed: mmgen quantizes activations per token as it runs.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mmgen::fp8 {

// Every e4m3 byte's value (e4m3_to_f32), for decoding by table lookup.
const std::array<float, 256>& e4m3_values();

// A tensor that belongs to a quantized layer rather than being a weight of the model (a scale,
// an input scale, a `.comfy_quant` marker) or the file's `scaled_fp8` marker.
bool is_companion(const std::string& name);

// The names a scale of weight `name` may have, in the order they are looked for.
std::vector<std::string> scale_names(const std::string& name);

// Checks that `scale` (named `scale_name`) can scale the e4m3 tensor `values` (named `name`):
// a float tensor of one value, or of one per output channel ([rows] or [rows, 1]).
void check_scale(const std::string& name, const Shape& values, const std::string& scale_name,
                 DType scale_dtype, const Shape& scale);

// The e4m3 `values` (F8E4M3) with `scale` (undefined: 1) as an F8E4M3Rows tensor of their shape:
// the bytes as stored and one scale per row (the last dimension), so the products read the file's
// values as they are. Tensor::to(F32) gives each value e4m3_to_f32(v) · scale in one rounding.
Tensor to_rows(const Tensor& values, const Tensor& scale);

// A float32 tensor as e4m3 with one scale for the whole tensor, ComfyUI's scaled-fp8 rule:
// scale = max |x| / 448 (1 for a tensor of zeros), values e4m3(x / scale) to nearest even.
struct PerTensor {
  Tensor values;  // F8E4M3, the input's shape
  float scale = 1.0f;
};
PerTensor quantize_per_tensor(const Tensor& f32);

}  // namespace mmgen::fp8
