#include "core/transpose_cpu.h"

#include <algorithm>

namespace mmgen::cpu {

void transpose(const float* from, int64_t from_stride, int64_t rows, int64_t cols, float* to,
               int64_t to_stride) {
  constexpr int64_t kBlock = 16;
  for (int64_t i0 = 0; i0 < rows; i0 += kBlock) {
    const int64_t height = std::min(kBlock, rows - i0);
    for (int64_t j0 = 0; j0 < cols; j0 += kBlock) {
      const int64_t width = std::min(kBlock, cols - j0);
#if defined(__AVX512F__)
      const __mmask16 load = __mmask16((1u << width) - 1), store = __mmask16((1u << height) - 1);
      __m512 r[kBlock];
      for (int64_t i = 0; i < kBlock; ++i)
        r[i] = i < height ? _mm512_maskz_loadu_ps(load, from + (i0 + i) * from_stride + j0)
                          : _mm512_setzero_ps();
      transpose16(r);
      for (int64_t j = 0; j < width; ++j)
        _mm512_mask_storeu_ps(to + (j0 + j) * to_stride + i0, store, r[j]);
#else
      for (int64_t j = j0; j < j0 + width; ++j)
        for (int64_t i = i0; i < i0 + height; ++i)
          to[j * to_stride + i] = from[i * from_stride + j];
#endif
    }
  }
}

}  // namespace mmgen::cpu
