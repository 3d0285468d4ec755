#include "core/fp8_convert.h"

#include <memory>
#include <vector>

#include "core/error.h"
#include "core/gguf_convert.h"
#include "core/scaled_fp8.h"

namespace mmgen::fp8 {

std::string scale_name_of(const std::string& name) {
  return scale_names(name).front();
}

ConversionSummary convert_to_fp8(const WeightStore& weights, const std::filesystem::path& out,
                                 std::map<std::string, std::string> metadata) {
  ConversionSummary summary;
  std::vector<TensorToStore> tensors;
  // ComfyUI's marker: its dtype says which FP8 the file holds. Empty: it asks for no
  // full-precision products (two values would).
  tensors.push_back(
      {"scaled_fp8", DType::F8E4M3, {0}, [] { return Tensor::empty({0}, DType::F8E4M3); }});
  for (const std::string& name : weights.names()) {
    const TensorInfo& info = weights.info(name);
    summary.tensors += 1;
    if (gguf::keeps_precision(name, info.shape)) {
      // What get() gives, from the header: a GGUF input's tensors (info says f32) and e4m3 ones
      // read as float32.
      const DType stored = info.dtype == DType::F8E4M3 ? DType::F32 : info.dtype;
      tensors.push_back({name, stored, info.shape, [&weights, name] { return weights.get(name); }});
      summary.bytes_out += uint64_t(shape_numel(info.shape)) * dtype_size(stored);
      continue;
    }
    summary.converted += 1;
    // The scale is known once the values are quantized: the weight's entry quantizes, and the
    // scale's entry (written next) reads what it kept.
    auto scale = std::make_shared<float>(1.0f);
    tensors.push_back({name, DType::F8E4M3, info.shape, [&weights, name, scale] {
                         PerTensor q = quantize_per_tensor(weights.get_f32(name));
                         *scale = q.scale;
                         return q.values;
                       }});
    tensors.push_back({scale_name_of(name), DType::F32, {}, [scale] {
                         Tensor value = Tensor::empty({}, DType::F32);
                         *value.data<float>() = *scale;
                         return value;
                       }});
    summary.bytes_out += uint64_t(shape_numel(info.shape)) + 4;
  }
  check(summary.tensors > 0, "convert: {} holds no tensors", weights.origin().string());
  summary.bytes_in = weights.stored_bytes();
  metadata["format"] = "pt";
  metadata["mmgen.fp8"] = "e4m3fn, one float32 scale_weight per matrix (max |w| / 448)";
  write_safetensors(out, tensors, metadata);
  return summary;
}

}  // namespace mmgen::fp8
