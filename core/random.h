// Random numbers that are bit for bit those of torch's CPU generator, so a seed gives the same
// initial noise as `torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed))` in a
// diffusers pipeline (float32).
//
// What torch does (ATen CPUGeneratorImpl + cpu/DistributionTemplates.h, x86-64 with AVX2, which is
// what torch selects on any AVX2 machine):
//  - the engine is the standard 32-bit MT19937 seeded with the low 32 bits of the seed;
//  - a float uniform is (next32 & (2^24 - 1)) · 2^-24, a double one uses 53 bits of two draws;
//  - a contiguous float32 tensor of >= 16 elements is first filled with float uniforms, then every
//    block of 16 is turned into normals by Box-Muller over the pairs (j, j + 8) with Cephes-style
//    float polynomials for log and sin/cos (avx_mathfun.h, compiled with FMA contraction); when the
//    size is not a multiple of 16, the last 16 values are drawn again and recomputed;
//  - a smaller tensor draws element by element through the double-precision Box-Muller, which
//    keeps the second value of each pair for the next element.
#pragma once

#include <cstdint>
#include <optional>
#include <random>

#include "core/tensor.h"

namespace mmgen {

// torch.Generator("cpu") after manual_seed(seed): successive randn calls continue one stream,
// exactly as successive torch.randn(..., generator=g) calls do.
class TorchCpuGenerator {
 public:
  explicit TorchCpuGenerator(uint64_t seed);

  // A float32 tensor of standard normal samples (contiguous).
  Tensor randn(const Shape& shape);

  uint32_t next_u32() { return engine_(); }
  uint64_t next_u64();      // two draws, the first in the high half
  float uniform_float();    // [0, 1), 24 random bits
  double uniform_double();  // [0, 1), 53 random bits
  double normal_double();   // torch's at::normal_distribution<double>, with its pair cache

 private:
  void fill_normal_blocks(float* data, int64_t size);
  void fill_normal_elementwise(float* data, int64_t size);

  std::mt19937 engine_;
  std::optional<double> cached_normal_;
};

// torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed)) in float32.
Tensor randn(const Shape& shape, uint64_t seed);

}  // namespace mmgen
