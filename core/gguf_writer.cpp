#include "core/gguf_writer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file.h"

namespace mmgen::gguf {
namespace {

constexpr uint64_t kAlignment = 32;

class Buffer {
 public:
  template <typename T>
  void put(T value) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &value, sizeof(T));
  }
  void put_string(const std::string& text) {
    put<uint64_t>(text.size());
    bytes.insert(bytes.end(), text.begin(), text.end());
  }
  void pad() { bytes.resize((bytes.size() + kAlignment - 1) / kAlignment * kAlignment, '\0'); }
  std::string bytes;
};

// A metadata value: its gguf type then its bytes (integers as i64 or u64, numbers as f64).
void put_value(Buffer& out, const nlohmann::json& value, bool typed = true) {
  const auto type = [&](uint32_t t) {
    if (typed) out.put<uint32_t>(t);
  };
  if (value.is_boolean()) {
    type(7);
    out.put<uint8_t>(value.get<bool>());
  } else if (value.is_number_unsigned()) {
    type(10);
    out.put<uint64_t>(value.get<uint64_t>());
  } else if (value.is_number_integer()) {
    type(11);
    out.put<int64_t>(value.get<int64_t>());
  } else if (value.is_number_float()) {
    type(12);
    out.put<double>(value.get<double>());
  } else if (value.is_string()) {
    type(8);
    out.put_string(value.get<std::string>());
  } else if (value.is_array()) {
    type(9);
    check(!value.empty(), "gguf writer: an empty metadata array has no element type");
    // One element type for the whole array: that of the first element.
    Buffer first;
    put_value(first, value[0]);
    uint32_t element;
    std::memcpy(&element, first.bytes.data(), 4);
    out.put<uint32_t>(element);
    out.put<uint64_t>(value.size());
    for (const auto& item : value) {
      Buffer one;
      put_value(one, item);
      uint32_t item_type;
      std::memcpy(&item_type, one.bytes.data(), 4);
      check(item_type == element, "gguf writer: a metadata array mixes types");
      out.bytes.append(one.bytes, 4, std::string::npos);
    }
  } else {
    fail("gguf writer: metadata value {} has no GGUF type", value.dump());
  }
}

}  // namespace

void quantize_q8_0(const float* values, int64_t count, std::byte* out) {
  check(count % 32 == 0, "q8_0: {} values are not whole blocks of 32", count);
  for (int64_t block = 0; block < count / 32; ++block, out += 34) {
    const float* x = values + block * 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t half = f32_to_f16(d);
    std::memcpy(out, &half, 2);
    for (int j = 0; j < 32; ++j) {
      const int8_t q = int8_t(std::round(x[j] * id));
      std::memcpy(out + 2 + j, &q, 1);
    }
  }
}

void quantize_q4_k(const float* values, int64_t count, std::byte* out) {
  constexpr int64_t kSuper = 256, kSub = 32, kBytes = 144;
  check(count % kSuper == 0, "q4_k: {} values are not whole super-blocks of 256", count);
  for (int64_t block = 0; block < count / kSuper; ++block, out += kBytes) {
    const float* x = values + block * kSuper;
    std::array<float, 8> scale{}, minimum{};  // per sub-block: x ≈ scale·q − minimum
    for (int s = 0; s < 8; ++s) {
      float lo = 0.0f, hi = -std::numeric_limits<float>::infinity();
      for (int l = 0; l < kSub; ++l)
        lo = std::min(lo, x[s * kSub + l]), hi = std::max(hi, x[s * kSub + l]);
      scale[size_t(s)] = (hi - lo) / 15.0f;
      minimum[size_t(s)] = -lo;
    }
    const uint16_t d_half = f32_to_f16(*std::max_element(scale.begin(), scale.end()) / 63.0f);
    const uint16_t dmin_half =
        f32_to_f16(*std::max_element(minimum.begin(), minimum.end()) / 63.0f);
    const float d = f16_to_f32(d_half), dmin = f16_to_f32(dmin_half);
    std::array<uint8_t, 8> sc{}, m{};
    for (size_t s = 0; s < 8; ++s) {
      sc[s] = d > 0 ? uint8_t(std::clamp(std::ceil(scale[s] / d), 0.0f, 63.0f)) : 0;
      m[s] = dmin > 0 ? uint8_t(std::clamp(std::round(minimum[s] / dmin), 0.0f, 63.0f)) : 0;
    }
    std::memcpy(out, &d_half, 2);
    std::memcpy(out + 2, &dmin_half, 2);
    // The 12 bytes of 6-bit scales and mins, as ggml's get_scale_min_k4 reads them back.
    std::array<uint8_t, 12> packed{};
    for (size_t j = 0; j < 8; ++j) {
      if (j < 4) {
        packed[j] |= sc[j];
        packed[j + 4] |= m[j];
      } else {
        packed[j + 4] = uint8_t((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
        packed[j - 4] |= uint8_t((sc[j] >> 4) << 6);
        packed[j] |= uint8_t((m[j] >> 4) << 6);
      }
    }
    std::memcpy(out + 4, packed.data(), 12);
    // Sub-blocks 2c and 2c + 1 share 32 bytes: the first in the low nibbles, the second high.
    std::array<uint8_t, 128> qs{};
    for (int s = 0; s < 8; ++s) {
      const float d1 = d * float(sc[size_t(s)]), m1 = dmin * float(m[size_t(s)]);
      for (int l = 0; l < kSub; ++l) {
        const float q =
            d1 > 0 ? std::clamp(std::round((x[s * kSub + l] + m1) / d1), 0.0f, 15.0f) : 0;
        qs[size_t((s / 2) * kSub + l)] |= uint8_t(uint8_t(q) << (s % 2 ? 4 : 0));
      }
    }
    std::memcpy(out + 16, qs.data(), 128);
  }
}

void write_gguf(const std::filesystem::path& path, const nlohmann::json& metadata,
                const std::vector<TensorToWrite>& tensors) {
  check(metadata.is_object(), "gguf writer: metadata must be an object");
  nlohmann::json keys = metadata;
  struct Placed {
    const TensorToWrite* tensor;
    const GgmlTypeInfo* info;
    std::vector<uint64_t> ne;  // innermost first
    uint64_t bytes;
  };
  std::vector<Placed> placed;
  for (const TensorToWrite& t : tensors) {
    const GgmlTypeInfo* info = ggml_type_info(uint32_t(t.type));
    check(info && (t.type == GgmlType::F32 || t.type == GgmlType::F16 || t.type == GgmlType::BF16 ||
                   t.type == GgmlType::Q8_0 || t.type == GgmlType::Q4_K),
          "gguf writer: {} cannot be written as type {}", t.name, uint32_t(t.type));
    check(t.values.defined() || t.load, "gguf writer: {} has no values", t.name);
    Shape shape = t.values.defined() ? t.values.shape() : t.shape;
    const int64_t count = shape_numel(shape);
    if (shape.empty()) shape = {1};
    if (shape.size() > 4) {  // ComfyUI-GGUF's rule: flatten, keep the shape
      keys["comfy.gguf.orig_shape." + t.name] = shape;
      shape = {shape[0], count / shape[0]};
    }
    Placed p{&t, info, {}, 0};
    for (size_t d = shape.size(); d-- > 0;) p.ne.push_back(uint64_t(shape[d]));
    check(int64_t(p.ne[0]) % info->block == 0,
          "gguf writer: {} has rows of {}, not whole {} blocks of {}", t.name, p.ne[0], info->name,
          info->block);
    p.bytes = uint64_t(count / info->block) * info->bytes;
    placed.push_back(std::move(p));
  }
  // One tensor's bytes in the type it is written as.
  const auto encode = [](const Placed& p) {
    const TensorToWrite& t = *p.tensor;
    const Tensor values = t.values.defined() ? t.values : t.load();
    const Tensor f32 = values.to(DType::F32).contiguous();
    const int64_t count = f32.numel();
    check(uint64_t(count / p.info->block) * p.info->bytes == p.bytes,
          "gguf writer: {} gave {} values, its shape holds another count", t.name, count);
    std::string data(p.bytes, '\0');
    std::byte* out = reinterpret_cast<std::byte*>(data.data());
    const float* x = f32.data<float>();
    const bool quantized = t.type == GgmlType::Q8_0 || t.type == GgmlType::Q4_K;
    for (int64_t i = 0; i < count && !quantized; ++i) {
      if (t.type == GgmlType::F32) std::memcpy(out + 4 * i, x + i, 4);
      const uint16_t half = t.type == GgmlType::F16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
      if (t.type != GgmlType::F32) std::memcpy(out + 2 * i, &half, 2);
    }
    if (t.type == GgmlType::Q8_0) quantize_q8_0(x, count, out);
    if (t.type == GgmlType::Q4_K) quantize_q4_k(x, count, out);
    return data;
  };

  Buffer head;
  head.put<uint32_t>(0x46554747u);  // "GGUF"
  head.put<uint32_t>(3);
  head.put<uint64_t>(placed.size());
  head.put<uint64_t>(keys.size());
  for (auto it = keys.begin(); it != keys.end(); ++it) {
    head.put_string(it.key());
    if (it.key().rfind("comfy.gguf.orig_shape.", 0) == 0) {
      // ComfyUI-GGUF's loader takes these as arrays of i32 only.
      head.put<uint32_t>(9);
      head.put<uint32_t>(5);
      head.put<uint64_t>(it->size());
      for (const auto& d : *it) head.put<int32_t>(d.get<int32_t>());
      continue;
    }
    put_value(head, *it);
  }
  uint64_t offset = 0;
  for (const Placed& p : placed) {
    head.put_string(p.tensor->name);
    head.put<uint32_t>(uint32_t(p.ne.size()));
    for (uint64_t n : p.ne) head.put<uint64_t>(n);
    head.put<uint32_t>(uint32_t(p.tensor->type));
    head.put<uint64_t>(offset);
    offset += (p.bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  head.pad();
  write_atomically(path, [&](const std::filesystem::path& temporary) {
    std::ofstream out(temporary, std::ios::binary);
    out.write(head.bytes.data(), std::streamsize(head.bytes.size()));
    for (const Placed& p : placed) {
      Buffer data;
      data.bytes = encode(p);
      data.pad();
      out.write(data.bytes.data(), std::streamsize(data.bytes.size()));
    }
    check(bool(out), "{}: could not write the GGUF file", temporary.string());
  });
}

}  // namespace mmgen::gguf
