// Float matrix transposes for the CPU kernels: the product's weight packing and the convolution's
// layout changes (core/gemm_cpu.cpp, core/conv_cpu.cpp), in 16 x 16 blocks held in registers where
// the build has AVX-512, so every load and store is a whole line.
#pragma once

#include <cstdint>

#include "core/x86_intrinsics.h"

namespace mmgen::cpu {

#if defined(__AVX512F__)
// r[b] becomes column b of the 16 x 16 block whose rows were r[0..15].
inline void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c], 128-bit lane l: rows 4g..4g+3 of column 4l + c.
  for (int g = 0; g < 4; ++g) {
    u[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 v = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88),
                 w = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd),
                 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88),
                 w2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    r[c] = _mm512_shuffle_f32x4(v, v2, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(w, w2, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(v, v2, 0xdd);
    r[12 + c] = _mm512_shuffle_f32x4(w, w2, 0xdd);
  }
}
#endif

// to[j · to_stride + i] = from[i · from_stride + j] for i < rows, j < cols (single-threaded).
void transpose(const float* from, int64_t from_stride, int64_t rows, int64_t cols, float* to,
               int64_t to_stride);

}  // namespace mmgen::cpu
