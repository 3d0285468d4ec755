#include "core/gguf_convert.h"

#include <array>
#include <string_view>

#include "core/error.h"
#include "core/gguf_writer.h"

namespace mmgen::gguf {
namespace {

// ComfyUI-GGUF's QUANTIZATION_THRESHOLD: smaller tensors stay float32.
constexpr int64_t kSmallTensor = 1024;

// Parts of a name that mark a tensor the model reads at high precision.
constexpr std::array<std::string_view, 6> kHighPrecision = {
    "norm", "scale_shift_table", "modulation", "time_embedding", "embedder", "patch_embedding"};

// ggml's llama_ftype numbers for general.file_type: ALL_F32, MOSTLY_F16, MOSTLY_Q8_0,
// MOSTLY_Q4_K_S (every matrix q4_k), MOSTLY_BF16.
uint32_t file_type(GgmlType type) {
  switch (type) {
    case GgmlType::F16:
      return 1;
    case GgmlType::Q8_0:
      return 7;
    case GgmlType::Q4_K:
      return 14;
    case GgmlType::BF16:
      return 32;
    default:
      return 0;
  }
}

}  // namespace

bool keeps_precision(const std::string& name, const Shape& shape) {
  const bool matrix = shape.size() >= 2 && shape_numel(shape) > kSmallTensor;
  bool high_precision = false;
  for (const std::string_view part : kHighPrecision)
    high_precision = high_precision || name.find(part) != std::string::npos;
  return !matrix || high_precision;
}

GgmlType converted_type(const std::string& name, const Shape& shape, GgmlType wanted) {
  const int64_t count = shape_numel(shape);
  const GgmlTypeInfo* info = ggml_type_info(uint32_t(wanted));
  check(info != nullptr, "convert: unknown type {}", uint32_t(wanted));
  // The rows the file stores: the innermost dimension (ComfyUI-GGUF flattens more than 4 to 2).
  const int64_t row = shape.size() > 4 ? count / shape[0] : (shape.empty() ? 1 : shape.back());
  if (keeps_precision(name, shape)) return GgmlType::F32;
  if (row % info->block == 0) return wanted;
  // Rows that are not whole q4_k super-blocks take q8_0 when they are whole blocks of 32, as
  // llama.cpp's quantize falls back to a type of smaller blocks.
  return wanted == GgmlType::Q4_K && row % 32 == 0 ? GgmlType::Q8_0 : GgmlType::F32;
}

GgmlType parse_convert_type(const std::string& text) {
  if (text == "q8_0") return GgmlType::Q8_0;
  if (text == "q4_k") return GgmlType::Q4_K;
  if (text == "f16") return GgmlType::F16;
  if (text == "bf16") return GgmlType::BF16;
  if (text == "f32") return GgmlType::F32;
  fail("convert: --type {} is not one mmgen writes; choose q8_0, q4_k, f16, bf16 or f32", text);
}

ConversionSummary convert_to_gguf(const WeightStore& weights, const std::filesystem::path& out,
                                  GgmlType wanted, nlohmann::json metadata) {
  ConversionSummary summary;
  std::vector<TensorToWrite> tensors;
  for (const std::string& name : weights.names()) {
    const TensorInfo& info = weights.info(name);
    TensorToWrite t;
    t.name = name;
    t.shape = info.shape;
    t.type = converted_type(name, info.shape, wanted);
    t.load = [&weights, name] { return weights.get_f32(name); };
    const GgmlTypeInfo* type = ggml_type_info(uint32_t(t.type));
    const int64_t count = shape_numel(info.shape);
    summary.tensors += 1;
    summary.converted += t.type == wanted ? 1 : 0;
    summary.fallback += t.type != wanted && t.type == GgmlType::Q8_0 ? 1 : 0;
    summary.bytes_out += uint64_t(count / type->block) * type->bytes;
    tensors.push_back(std::move(t));
  }
  check(!tensors.empty(), "convert: {} holds no tensors", weights.origin().string());
  summary.bytes_in = weights.stored_bytes();
  metadata["general.file_type"] = file_type(wanted);
  metadata["general.quantization_version"] = 2;
  write_gguf(out, metadata, tensors);
  return summary;
}

}  // namespace mmgen::gguf
