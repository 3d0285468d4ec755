#include "core/dtype.h"

#include <algorithm>
#include <cmath>

namespace mmgen {
namespace {

struct DTypeInfo {
  DType dtype;
  size_t size;
  std::string_view name;
  std::string_view safetensors;
  int64_t block_values = 1;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::F32, 4, "f32", "F32"},
    {DType::F64, 8, "f64", "F64"},
    {DType::BF16, 2, "bf16", "BF16"},
    {DType::F16, 2, "f16", "F16"},
    {DType::I64, 8, "i64", "I64"},
    {DType::I32, 4, "i32", "I32"},
    {DType::I8, 1, "i8", "I8"},
    {DType::U8, 1, "u8", "U8"},
    {DType::Bool, 1, "bool", "BOOL"},
    {DType::F8E4M3, 1, "f8_e4m3", "F8_E4M3"},
    {DType::F8E4M3Rows, 1, "f8_e4m3_rows", ""},  // the row scales are not a safetensors type
    // ggml's blocks: no safetensors type
    {DType::Q8_0, 34, "q8_0", "", 32},
    {DType::Q4_0, 18, "q4_0", "", 32},
    {DType::Q4_1, 20, "q4_1", "", 32},
    {DType::Q5_0, 22, "q5_0", "", 32},
    {DType::Q5_1, 24, "q5_1", "", 32},
    {DType::Q4_K, 144, "q4_k", "", 256},
    {DType::Q5_K, 176, "q5_k", "", 256},
    {DType::Q6_K, 210, "q6_k", "", 256},
};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes)
    if (entry.dtype == dtype) return entry;
  return kDTypes[0];  // unreachable: every enumerator is in the table
}

}  // namespace

size_t dtype_size(DType dtype) {
  return info(dtype).size;
}
std::string_view dtype_name(DType dtype) {
  return info(dtype).name;
}
std::string_view dtype_safetensors_name(DType dtype) {
  return info(dtype).safetensors;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& entry : kDTypes)
    if (!entry.safetensors.empty() && entry.safetensors == name) return entry.dtype;
  return std::nullopt;
}

int64_t dtype_block_values(DType dtype) {
  return info(dtype).block_values;
}

bool dtype_is_blocks(DType dtype) {
  return info(dtype).block_values > 1;
}

bool dtype_is_floating(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::BF16 ||
         dtype == DType::F16 || dtype == DType::F8E4M3;
}

uint8_t f32_to_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  if (std::isnan(x)) return 0x7f;
  if (a >= 448.0) return sign | 0x7e;
  if (a == 0.0) return sign;
  int e = 0;
  std::frexp(a, &e);                         // a = m · 2^e, m in [0.5, 1)
  const int exponent = std::max(e - 1, -6);  // below 2^-6 the spacing stays 2^-9 (subnormals)
  const double step = std::ldexp(1.0, exponent - 3);
  const double r = std::nearbyint(a / step) * step;  // the current mode: nearest, ties to even
  if (r == 0.0) return sign;                         // below half the smallest subnormal
  std::frexp(r, &e);
  if (e - 1 < -6) return sign | uint8_t(std::lround(r / std::ldexp(1.0, -9)));
  return sign | uint8_t(((e - 1 + 7) << 3) | std::lround((r / std::ldexp(1.0, e - 1) - 1.0) * 8));
}

float e4m3_to_f32(uint8_t bits) {
  const int exponent = (bits >> 3) & 15, mantissa = bits & 7;
  if (exponent == 15 && mantissa == 7) return std::nanf("");
  const double magnitude = exponent == 0 ? std::ldexp(double(mantissa), -9)
                                         : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return float((bits & 0x80) ? -magnitude : magnitude);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: value = mantissa * 2^-24
    float value = std::ldexp(float(mantissa), -24);
    return sign ? -value : value;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to inf
  if (abs < 0x38800000u) {                        // subnormal or zero in f16
    float magnitude = std::bit_cast<float>(abs);
    return sign | uint16_t(std::nearbyint(magnitude * 16777216.0f));  // 2^24, ties to even
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | uint16_t((rounded - 0x38000000u) >> 13);
}

}  // namespace mmgen
