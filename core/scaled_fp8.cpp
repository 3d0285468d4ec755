#include "core/scaled_fp8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace mmgen::fp8 {
namespace {

bool ends_with(const std::string& name, const std::string& suffix) {
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// One scale per row of `values` (rows of its last dimension): a per-tensor scale repeated, or a
// per-output-channel one repeated over the rows each channel holds (a convolution's channel
// holds several).
std::vector<float> row_scales(const Tensor& values, const Tensor& scale) {
  const int64_t cols = values.dim() == 0 ? 1 : values.shape().back();
  const int64_t rows = cols > 0 ? values.numel() / cols : 0;
  std::vector<float> scales(size_t(rows), 1.0f);
  if (!scale.defined()) return scales;
  const Tensor s = scale.to(DType::F32).contiguous();
  const int64_t count = s.numel();
  check(count > 0 && rows % count == 0, "an fp8 scale of {} values for {} rows", count, rows);
  const int64_t per = rows / count;
  for (int64_t r = 0; r < rows; ++r) scales[size_t(r)] = s.data<float>()[r / per];
  return scales;
}

}  // namespace

const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> values{};
    for (int b = 0; b < 256; ++b) values[size_t(b)] = e4m3_to_f32(uint8_t(b));
    return values;
  }();
  return table;
}

bool is_companion(const std::string& name) {
  for (const char* suffix :
       {".scale_weight", ".weight_scale", ".scale_input", ".input_scale", ".comfy_quant"})
    if (ends_with(name, suffix)) return true;
  return name == "scaled_fp8" || ends_with(name, ".scaled_fp8");
}

std::vector<std::string> scale_names(const std::string& name) {
  const std::string layer =
      ends_with(name, ".weight") ? name.substr(0, name.size() - 6) : name + ".";
  return {layer + "scale_weight", layer + "weight_scale"};
}

void check_scale(const std::string& name, const Shape& values, const std::string& scale_name,
                 DType scale_dtype, const Shape& scale) {
  const int64_t count = shape_numel(scale);
  const int64_t channels = values.empty() ? 1 : values[0];
  const bool per_tensor = count == 1;
  const bool per_channel = !values.empty() && count == channels &&
                           (scale.size() == 1 || (scale.size() == 2 && scale[1] == 1));
  check(scale_dtype == DType::F32 || scale_dtype == DType::BF16 || scale_dtype == DType::F16,
        "the fp8 scale {} of {} is {}; a scale is f32, bf16 or f16", scale_name, name,
        dtype_name(scale_dtype));
  check(per_tensor || per_channel,
        "the fp8 scale {} of {} has shape {}; a scale is one value or one per output channel "
        "({} of {})",
        scale_name, name, shape_string(scale), channels, shape_string(values));
}

Tensor to_rows(const Tensor& values, const Tensor& scale) {
  check(values.dtype() == DType::F8E4M3, "fp8: {} values are not e4m3", dtype_name(values.dtype()));
  check(values.dim() >= 1 && values.shape().back() > 0, "fp8: a {} tensor has no rows",
        shape_string(values.shape()));
  const Tensor bytes = values.contiguous();
  const std::vector<float> scales = row_scales(bytes, scale);
  Tensor out = Tensor::empty(bytes.shape(), DType::F8E4M3Rows);
  std::memcpy(out.raw(), bytes.raw(), size_t(bytes.numel()));
  std::memcpy(out.row_scales(), scales.data(), scales.size() * sizeof(float));
  return out;
}

PerTensor quantize_per_tensor(const Tensor& f32) {
  const Tensor x = f32.to(DType::F32).contiguous();
  const float* in = x.data<float>();
  const int64_t count = x.numel();
  float amax = 0.0f;
  for (int64_t i = 0; i < count; ++i) amax = std::max(amax, std::fabs(in[i]));
  check(std::isfinite(amax), "fp8: a tensor with infinite or NaN values is not quantized");
  PerTensor result;
  result.scale = amax > 0.0f ? amax / kE4m3Largest : 1.0f;
  result.values = Tensor::empty(x.shape(), DType::F8E4M3);
  auto* out = reinterpret_cast<uint8_t*>(result.values.raw());
#pragma omp parallel for schedule(static) if (count >= (int64_t(1) << 18))
  for (int64_t i = 0; i < count; ++i) out[i] = f32_to_e4m3(in[i] / result.scale);
  return result;
}

}  // namespace mmgen::fp8
