#include "core/gguf_quants.h"

#include <cstring>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"

namespace mmgen::gguf {
namespace {

constexpr int64_t kQK = 32;    // elements per block of the legacy quants
constexpr int64_t kQKK = 256;  // elements per super-block of the K-quants

float half_at(const std::byte* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_to_f32(bits);
}

const uint8_t* bytes_at(const std::byte* p) {
  return reinterpret_cast<const uint8_t*>(p);
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block (ggml's get_scale_min_k4).
void scale_min_k4(int j, const uint8_t* q, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Each block type: its bytes and its dequantization of one block to `y`.
void q8_0(const std::byte* b, float* y) {  // half d; int8 qs[32]
  const float d = half_at(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < kQK; ++j) y[j] = float(qs[j]) * d;
}

void q4_0(const std::byte* b, float* y) {  // half d; uint8 qs[16]
  const float d = half_at(b);
  const uint8_t* qs = bytes_at(b + 2);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = float((qs[j] & 0x0F) - 8) * d;
    y[j + kQK / 2] = float((qs[j] >> 4) - 8) * d;
  }
}

void q4_1(const std::byte* b, float* y) {  // half d, m; uint8 qs[16]
  const float d = half_at(b), m = half_at(b + 2);
  const uint8_t* qs = bytes_at(b + 4);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = float(qs[j] & 0x0F) * d + m;
    y[j + kQK / 2] = float(qs[j] >> 4) * d + m;
  }
}

void q5_0(const std::byte* b, float* y) {  // half d; uint8 qh[4]; uint8 qs[16]
  const float d = half_at(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = bytes_at(b + 6);
  for (int j = 0; j < kQK / 2; ++j) {
    const int high0 = int(((qh >> j) << 4) & 0x10), high1 = int((qh >> (j + 12)) & 0x10);
    y[j] = float(((qs[j] & 0x0F) | high0) - 16) * d;
    y[j + kQK / 2] = float(((qs[j] >> 4) | high1) - 16) * d;
  }
}

void q5_1(const std::byte* b, float* y) {  // half d, m; uint8 qh[4]; uint8 qs[16]
  const float d = half_at(b), m = half_at(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = bytes_at(b + 8);
  for (int j = 0; j < kQK / 2; ++j) {
    const int high0 = int(((qh >> j) << 4) & 0x10), high1 = int((qh >> (j + 12)) & 0x10);
    y[j] = float((qs[j] & 0x0F) | high0) * d + m;
    y[j + kQK / 2] = float((qs[j] >> 4) | high1) * d + m;
  }
}

void q4_k(const std::byte* b, float* y) {  // half d, dmin; uint8 scales[12]; uint8 qs[128]
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* scales = bytes_at(b + 4);
  const uint8_t* q = bytes_at(b + 16);
  for (int j = 0, is = 0; j < kQKK; j += 64, is += 2, q += 32) {
    uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
  }
}

void q5_k(const std::byte* b, float* y) {  // half d, dmin; scales[12]; qh[32]; qs[128]
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* scales = bytes_at(b + 4);
  const uint8_t* qh = bytes_at(b + 16);
  const uint8_t* ql = bytes_at(b + 48);
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < kQKK; j += 64, is += 2, ql += 32) {
    uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    u1 = uint8_t(u1 << 2);
    u2 = uint8_t(u2 << 2);
  }
}

void q6_k(const std::byte* b, float* y) {  // uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d
  const uint8_t* ql = bytes_at(b);
  const uint8_t* qh = bytes_at(b + 128);
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int n = 0; n < kQKK; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * float(sc[is]) * float(q1);
      y[l + 32] = d * float(sc[is + 2]) * float(q2);
      y[l + 64] = d * float(sc[is + 4]) * float(q3);
      y[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
  static const GgmlTypeInfo f32{"f32", 1, 4}, f16{"f16", 1, 2}, bf16{"bf16", 1, 2},
      q4_0_info{"q4_0", kQK, 18}, q4_1_info{"q4_1", kQK, 20}, q5_0_info{"q5_0", kQK, 22},
      q5_1_info{"q5_1", kQK, 24}, q8_0_info{"q8_0", kQK, 34}, q4_k_info{"q4_k", kQKK, 144},
      q5_k_info{"q5_k", kQKK, 176}, q6_k_info{"q6_k", kQKK, 210};
  switch (GgmlType(type)) {
    case GgmlType::F32:
      return &f32;
    case GgmlType::F16:
      return &f16;
    case GgmlType::BF16:
      return &bf16;
    case GgmlType::Q4_0:
      return &q4_0_info;
    case GgmlType::Q4_1:
      return &q4_1_info;
    case GgmlType::Q5_0:
      return &q5_0_info;
    case GgmlType::Q5_1:
      return &q5_1_info;
    case GgmlType::Q8_0:
      return &q8_0_info;
    case GgmlType::Q4_K:
      return &q4_k_info;
    case GgmlType::Q5_K:
      return &q5_k_info;
    case GgmlType::Q6_K:
      return &q6_k_info;
  }
  return nullptr;
}

void dequantize(GgmlType type, const std::byte* blocks, float* out, int64_t count) {
  const GgmlTypeInfo* info = ggml_type_info(uint32_t(type));
  check(info != nullptr, "gguf: tensor type {} is not read", uint32_t(type));
  check(count % info->block == 0, "gguf: {} elements of {} are not whole blocks of {}", count,
        info->name, info->block);
  const int64_t blocks_count = count / info->block;
  const auto each = [&](auto&& one) {
    for (int64_t i = 0; i < blocks_count; ++i)
      one(blocks + size_t(i) * info->bytes, out + i * info->block);
  };
  switch (type) {
    case GgmlType::F32:
      std::memcpy(out, blocks, size_t(count) * 4);
      return;
    case GgmlType::F16:
      return each([](const std::byte* b, float* y) { *y = half_at(b); });
    case GgmlType::BF16:
      return each([](const std::byte* b, float* y) {
        uint16_t bits;
        std::memcpy(&bits, b, 2);
        *y = bf16_to_f32(bits);
      });
    case GgmlType::Q4_0:
      return each(q4_0);
    case GgmlType::Q4_1:
      return each(q4_1);
    case GgmlType::Q5_0:
      return each(q5_0);
    case GgmlType::Q5_1:
      return each(q5_1);
    case GgmlType::Q8_0:
      return each(q8_0);
    case GgmlType::Q4_K:
      return each(q4_k);
    case GgmlType::Q5_K:
      return each(q5_k);
    case GgmlType::Q6_K:
      return each(q6_k);
  }
}

namespace {
constexpr std::pair<GgmlType, DType> kBlockDTypes[] = {
    {GgmlType::Q8_0, DType::Q8_0}, {GgmlType::Q4_0, DType::Q4_0}, {GgmlType::Q4_1, DType::Q4_1},
    {GgmlType::Q5_0, DType::Q5_0}, {GgmlType::Q5_1, DType::Q5_1}, {GgmlType::Q4_K, DType::Q4_K},
    {GgmlType::Q5_K, DType::Q5_K}, {GgmlType::Q6_K, DType::Q6_K},
};
}  // namespace

std::optional<DType> block_dtype(GgmlType type) {
  for (const auto& [ggml, dtype] : kBlockDTypes)
    if (ggml == type) return dtype;
  return std::nullopt;
}

GgmlType ggml_type_of_blocks(DType dtype) {
  for (const auto& [ggml, blocks] : kBlockDTypes)
    if (blocks == dtype) return ggml;
  fail("{} is not a type of quantized blocks", dtype_name(dtype));
}

}  // namespace mmgen::gguf
