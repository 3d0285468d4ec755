// What the GPU tests share: a minimal check harness (the GPU machine has no GoogleTest), bf16
// host conversions, random inputs, and ‖a − b‖ / ‖b‖.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace mmgen::cuda_testing {

inline int& failures() {
  static int count = 0;
  return count;
}

// Records a failed expectation with its description; the test's exit code counts them.
inline void expect(bool condition, const std::string& what) {
  std::printf("%s %s\n", condition ? "  ok  " : "  FAIL", what.c_str());
  if (!condition) ++failures();
}

// The message of the mmgen::Error that `action` throws; empty when it throws none.
inline std::string error_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return {};
}

// Standard-normal values already rounded to bf16, as bf16 bits and as floats.
struct Bf16Values {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
inline Bf16Values random_bf16(size_t count, std::mt19937& generator) {
  std::normal_distribution<float> normal;
  Bf16Values result;
  result.bits.resize(count);
  result.values.resize(count);
  for (size_t i = 0; i < count; ++i) {
    result.bits[i] = f32_to_bf16(normal(generator));
    result.values[i] = bf16_to_f32(result.bits[i]);
  }
  return result;
}

inline double relative_error(const std::vector<double>& actual,
                             const std::vector<double>& expected) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double d = actual[i] - expected[i];
    difference += d * d;
    norm += expected[i] * expected[i];
  }
  return std::sqrt(difference / (norm > 0 ? norm : 1.0));
}

// ‖actual − expected‖ / ‖expected‖ of two tensors on either device and of any float dtype;
// element by element in order; infinite when the element counts differ or `actual` holds a
// non-finite value (a test that cares about the shape checks it itself).
inline double relative_error(const Tensor& actual_any, const Tensor& expected_any) {
  const Tensor actual = actual_any.to(Device::CPU).to(DType::F32).contiguous();
  const Tensor expected = expected_any.to(Device::CPU).to(DType::F32).contiguous();
  if (actual.numel() != expected.numel()) return INFINITY;
  double difference = 0, norm = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double a = actual.data<float>()[i], e = expected.data<float>()[i];
    if (!std::isfinite(a)) return INFINITY;
    difference += (a - e) * (a - e);
    norm += e * e;
  }
  return std::sqrt(difference / norm);
}

inline int finish(const char* name) {
  std::printf("%s: %s (%d failed)\n", name, failures() ? "FAILED" : "passed", failures());
  return failures() ? 1 : 0;
}

}  // namespace mmgen::cuda_testing
