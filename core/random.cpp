#include "core/random.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

// The Box-Muller kernels below reproduce torch's float rounding step by step: every fused
// multiply-add torch's build performs is written as std::fma, and nothing else may be fused, so
// the compiler must not contract a·b + c on its own (GCC does by default in C++ mode).
#if defined(__GNUC__) && !defined(__clang__)
#define MMGEN_EXACT_FP __attribute__((optimize("fp-contract=off")))
#else
#define MMGEN_EXACT_FP
#endif

namespace mmgen {
namespace {

float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// Natural log for x in (0, 1] as avx_mathfun.h's log256_ps computes it (Cephes logf: split into
// exponent and a mantissa in [sqrt(1/2), sqrt(2)), degree-8 polynomial), one lane at a time.
MMGEN_EXACT_FP float cephes_log(float x) {
  const float smallest_normal = float_from_bits(0x00800000u);
  if (x < smallest_normal) x = smallest_normal;
  const int32_t exponent = int32_t(bits_of(x) >> 23) - 0x7f;
  x = float_from_bits((bits_of(x) & ~0x7f800000u) | bits_of(0.5f));  // mantissa in [0.5, 1)
  float e = float(exponent) + 1.0f;
  const float low_part = x < 0.707106781186547524f ? x : 0.0f;
  x = x - 1.0f;
  if (low_part != 0.0f) e = e - 1.0f;
  x = x + low_part;
  const float z = x * x;
  static constexpr float kPoly[] = {-1.1514610310E-1f, 1.1676998740E-1f,  -1.2420140846E-1f,
                                    1.4249322787E-1f,  -1.6668057665E-1f, 2.0000714765E-1f,
                                    -2.4999993993E-1f, 3.3333331174E-1f};
  float y = 7.0376836292E-2f;
  for (float c : kPoly) y = std::fma(y, x, c);
  y = y * x;
  const float e_q1 = e * -2.12194440e-4f;
  y = std::fma(y, z, e_q1);  // torch's build fuses y·z here, not e·q1
  y = y - z * 0.5f;
  x = x + y;
  return std::fma(e, 0.693359375f, x);
}

// sin and cos of x >= 0 as sincos256_ps computes them (Cephes sinf/cosf: reduction by π/4 in
// three parts, two polynomials, octant-dependent selection and signs).
MMGEN_EXACT_FP void cephes_sincos(float x_in, float* sin_out, float* cos_out) {
  float x = std::fabs(x_in);
  uint32_t sign_sin = bits_of(x_in) & 0x80000000u;
  float y = x * 1.27323954473516f;  // 4/π
  int32_t octant = int32_t(y);
  octant = (octant + 1) & ~1;
  y = float(octant);
  sign_sin ^= uint32_t(octant & 4) << 29;
  const uint32_t sign_cos = uint32_t(~(octant - 2) & 4) << 29;
  const bool first_polynomial_is_sin = (octant & 2) == 0;
  x = std::fma(y, -0.78515625f, x);
  x = std::fma(y, -2.4187564849853515625e-4f, x);
  x = std::fma(y, -3.77489497744594108e-8f, x);
  const float z = x * x;

  float cos_poly = std::fma(2.443315711809948E-005f, z, -1.388731625493765E-003f);
  cos_poly = std::fma(cos_poly, z, 4.166664568298827E-002f);
  cos_poly = cos_poly * z;
  const float half_z = z * 0.5f;
  cos_poly = std::fma(cos_poly, z, -half_z);
  cos_poly = cos_poly + 1.0f;

  float sin_poly = std::fma(-1.9515295891E-4f, z, 8.3321608736E-3f);
  sin_poly = std::fma(sin_poly, z, -1.6666654611E-1f);
  sin_poly = sin_poly * z;
  sin_poly = std::fma(sin_poly, x, x);

  const float s = first_polynomial_is_sin ? sin_poly : cos_poly;
  const float c = first_polynomial_is_sin ? cos_poly : sin_poly;
  *sin_out = float_from_bits(bits_of(s) ^ sign_sin);
  *cos_out = float_from_bits(bits_of(c) ^ sign_cos);
}

// normal_fill_16_AVX2: 16 uniforms in place → 16 normals (mean 0, std 1).
MMGEN_EXACT_FP void normal_fill_16(float* data) {
  const float two_pi = float(2.0f * 3.14159265358979323846);  // _mm256_set1_ps(2.0f * pi<double>)
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - data[j];  // [0, 1) → (0, 1] for the log
    const float u2 = data[j + 8];
    const float radius = std::sqrt(-2.0f * cephes_log(u1));
    float sin_theta, cos_theta;
    cephes_sincos(two_pi * u2, &sin_theta, &cos_theta);
    data[j] = radius * cos_theta;
    data[j + 8] = radius * sin_theta;
  }
}

}  // namespace

TorchCpuGenerator::TorchCpuGenerator(uint64_t seed) : engine_(uint32_t(seed & 0xffffffffu)) {}

uint64_t TorchCpuGenerator::next_u64() {
  const uint64_t high = engine_();
  const uint64_t low = engine_();
  return (high << 32) | low;
}

float TorchCpuGenerator::uniform_float() {
  return float(engine_() & ((1u << 24) - 1)) * (1.0f / float(1u << 24));
}

double TorchCpuGenerator::uniform_double() {
  return double(next_u64() & ((uint64_t(1) << 53) - 1)) * (1.0 / double(uint64_t(1) << 53));
}

double TorchCpuGenerator::normal_double() {
  if (cached_normal_) {
    const double value = *cached_normal_;
    cached_normal_.reset();
    return value;
  }
  const double u1 = uniform_double();
  const double u2 = uniform_double();
  const double radius = std::sqrt(-2.0 * std::log1p(-u2));
  const double theta = 2.0 * 3.14159265358979323846 * u1;
  cached_normal_ = radius * std::sin(theta);
  return radius * std::cos(theta);
}

void TorchCpuGenerator::fill_normal_blocks(float* data, int64_t size) {
  for (int64_t i = 0; i < size; ++i) data[i] = uniform_float();
  const int64_t blocks = size / 16;
#pragma omp parallel for schedule(static) if (blocks >= 4096)
  for (int64_t b = 0; b < blocks; ++b) normal_fill_16(data + 16 * b);
  if (size % 16 != 0) {
    // torch draws the last 16 values again and recomputes them (overlapping the last block).
    float* tail = data + size - 16;
    for (int i = 0; i < 16; ++i) tail[i] = uniform_float();
    normal_fill_16(tail);
  }
}

void TorchCpuGenerator::fill_normal_elementwise(float* data, int64_t size) {
  for (int64_t i = 0; i < size; ++i) data[i] = float(normal_double());
}

Tensor TorchCpuGenerator::randn(const Shape& shape) {
  for (int64_t d : shape)
    check(d >= 0, "randn: negative dimension in shape {}", shape_string(shape));
  Tensor out = Tensor::empty(shape, DType::F32);
  const int64_t size = out.numel();
  if (size >= 16) {
    fill_normal_blocks(out.data<float>(), size);
  } else {
    fill_normal_elementwise(out.data<float>(), size);
  }
  return out;
}

Tensor randn(const Shape& shape, uint64_t seed) {
  return TorchCpuGenerator(seed).randn(shape);
}

}  // namespace mmgen
