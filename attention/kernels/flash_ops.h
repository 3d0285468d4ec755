// Internals the flash kernel's two drivers share (attention/kernels/flash_kernel.cpp for packed key
// blocks, attention/kernels/flash_gathered.cpp for keys gathered through a token order): the tile
// sizes, the register-blocked micro-kernels, the softmax row operations per instruction set, and
// one online-softmax step of a query tile over a chunk of packed keys. Not part of the public API.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <vector>

#include "attention/kernels/flash_kernel.h"

// GCC 12's AVX-512 intrinsics initialise registers from themselves (_mm512_undefined_ps), which
// -Wmaybe-uninitialized reports wherever they are inlined (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#if defined(__AVX2__) && defined(__FMA__)
#include "core/x86_intrinsics.h"  // (silences -Wuninitialized too, which sanitizer builds raise)
#define MMGEN_FLASH_AVX2 1
// AVX-512: a 16-key panel is one register, so the micro-kernel holds 12 rows' accumulators
// (12 of 32 registers) where AVX2 holds 6 rows' in two registers each.
#if defined(__AVX512F__)
#define MMGEN_FLASH_AVX512 1
#endif
#endif

namespace mmgen::attention::flash::detail {

// Query rows per tile: a multiple of the micro-kernel's 6 rows, small enough that the tile's
// queries, scores and accumulator (3 · 48 · D floats) stay in L2 next to one key chunk.
constexpr int64_t kTileRows = 48;
// Keys per chunk of the online softmax: a 128 x D key chunk and its value panels stay cache
// resident while all the tile's rows use them.
constexpr int64_t kChunk = 128;
// Keys (and value columns) per micro-kernel panel: two 8-float AVX registers, one AVX-512 one.
constexpr int64_t kPanel = 16;
// Rows of the micro-kernels (Ops::kRows): 6 with AVX2 (6 x 16 accumulators are 12 of the 16
// registers), 12 with AVX-512; the tile's rows are a multiple of both.
static_assert(kTileRows % 12 == 0);
// Packed keys and values of at most this many floats (256 MB) are built at a time; more heads are
// processed group by group.
constexpr int64_t kPackBudget = int64_t(64) << 20;
// Exponents below this (base 2) give a weight of exactly 0, so no denormal reaches P·V.
constexpr float kExp2Floor = -125.0f;
constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

inline int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// 64-byte aligned float buffer (packed panels are read with aligned loads' speed).
struct AlignedBuffer {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data;
  int64_t capacity = 0;
  float* get(int64_t floats) {
    if (floats > capacity) {
      const size_t bytes = size_t(round_up(std::max<int64_t>(floats, 16) * 4, 64));
      float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!p) throw std::bad_alloc();
      data.reset(p);
      capacity = int64_t(bytes / 4);
    }
    return data.get();
  }
};

// ----------------------------------------------------------------------------- micro-kernels

// c[M x 16] (+)= a[M x k] (row stride lda) · b[k x 16] (16 floats per k, contiguous).
template <int M>
void micro_portable(const float* a, int64_t lda, const float* b, int64_t k, float* c, int64_t ldc,
                    bool accumulate) {
  float acc[M][kPanel];
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < kPanel; ++j) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * kPanel;
    for (int r = 0; r < M; ++r) {
      const float ar = a[r * lda + p];
      for (int j = 0; j < kPanel; ++j) acc[r][j] += ar * bp[j];
    }
  }
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < kPanel; ++j) c[r * ldc + j] = acc[r][j];
}

#ifdef MMGEN_FLASH_AVX2
// The same with the 2·M accumulators in named registers (arrays of __m256 end up in memory).
#define MMGEN_FLASH_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
template <int M>
void micro_avx2(const float* a, int64_t lda, const float* b, int64_t k, float* c, int64_t ldc,
                bool accumulate) {
#define MMGEN_FLASH_DECLARE(r) __m256 lo##r = _mm256_setzero_ps(), hi##r = _mm256_setzero_ps();
  MMGEN_FLASH_ROWS(MMGEN_FLASH_DECLARE)
#undef MMGEN_FLASH_DECLARE
  if (accumulate) {
#define MMGEN_FLASH_LOAD(r)                   \
  if constexpr (M > r) {                      \
    lo##r = _mm256_loadu_ps(c + r * ldc);     \
    hi##r = _mm256_loadu_ps(c + r * ldc + 8); \
  }
    MMGEN_FLASH_ROWS(MMGEN_FLASH_LOAD)
#undef MMGEN_FLASH_LOAD
  }
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_load_ps(b + p * kPanel), b1 = _mm256_load_ps(b + p * kPanel + 8);
#define MMGEN_FLASH_STEP(r)                                 \
  if constexpr (M > r) {                                    \
    const __m256 ar = _mm256_broadcast_ss(a + r * lda + p); \
    lo##r = _mm256_fmadd_ps(ar, b0, lo##r);                 \
    hi##r = _mm256_fmadd_ps(ar, b1, hi##r);                 \
  }
    MMGEN_FLASH_ROWS(MMGEN_FLASH_STEP)
#undef MMGEN_FLASH_STEP
  }
#define MMGEN_FLASH_STORE(r)                  \
  if constexpr (M > r) {                      \
    _mm256_storeu_ps(c + r * ldc, lo##r);     \
    _mm256_storeu_ps(c + r * ldc + 8, hi##r); \
  }
  MMGEN_FLASH_ROWS(MMGEN_FLASH_STORE)
#undef MMGEN_FLASH_STORE
}
#undef MMGEN_FLASH_ROWS

#ifdef MMGEN_FLASH_AVX512
// c[M x 16] (+)= a[M x k] · b[k x 16] with M ≤ 12 accumulators of one 512-bit register each.
#define MMGEN_FLASH_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
template <int M>
void micro_avx512(const float* a, int64_t lda, const float* b, int64_t k, float* c, int64_t ldc,
                  bool accumulate) {
#define MMGEN_FLASH_DECLARE(r) __m512 acc##r = _mm512_setzero_ps();
  MMGEN_FLASH_ROWS(MMGEN_FLASH_DECLARE)
#undef MMGEN_FLASH_DECLARE
  if (accumulate) {
#define MMGEN_FLASH_LOAD(r) \
  if constexpr (M > r) acc##r = _mm512_loadu_ps(c + r * ldc);
    MMGEN_FLASH_ROWS(MMGEN_FLASH_LOAD)
#undef MMGEN_FLASH_LOAD
  }
  for (int64_t p = 0; p < k; ++p) {
    const __m512 bp = _mm512_load_ps(b + p * kPanel);
#define MMGEN_FLASH_STEP(r) \
  if constexpr (M > r) acc##r = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + p]), bp, acc##r);
    MMGEN_FLASH_ROWS(MMGEN_FLASH_STEP)
#undef MMGEN_FLASH_STEP
  }
#define MMGEN_FLASH_STORE(r) \
  if constexpr (M > r) _mm512_storeu_ps(c + r * ldc, acc##r);
  MMGEN_FLASH_ROWS(MMGEN_FLASH_STORE)
#undef MMGEN_FLASH_STORE
}

// c[M x 32] (+)= a[M x k] · [b0 | b1], two 16-column panels side by side (c's 32 columns are
// contiguous): 2·M accumulators, and per step of k two panel loads and M broadcasts feed 2·M
// fused multiply-adds, where the one-panel kernel spends M + 1 loads on M. Loads, not FMAs, bound
// the one-panel kernel on CPUs with two 512-bit FMA units and two 512-bit loads per cycle.
template <int M>
void micro_avx512_wide(const float* a, int64_t lda, const float* b0, const float* b1, int64_t k,
                       float* c, int64_t ldc, bool accumulate) {
#define MMGEN_FLASH_DECLARE(r) __m512 lo##r = _mm512_setzero_ps(), hi##r = _mm512_setzero_ps();
  MMGEN_FLASH_ROWS(MMGEN_FLASH_DECLARE)
#undef MMGEN_FLASH_DECLARE
  if (accumulate) {
#define MMGEN_FLASH_LOAD(r)                    \
  if constexpr (M > r) {                       \
    lo##r = _mm512_loadu_ps(c + r * ldc);      \
    hi##r = _mm512_loadu_ps(c + r * ldc + 16); \
  }
    MMGEN_FLASH_ROWS(MMGEN_FLASH_LOAD)
#undef MMGEN_FLASH_LOAD
  }
  for (int64_t p = 0; p < k; ++p) {
    const __m512 x0 = _mm512_load_ps(b0 + p * kPanel), x1 = _mm512_load_ps(b1 + p * kPanel);
#define MMGEN_FLASH_STEP(r)                           \
  if constexpr (M > r) {                              \
    const __m512 ar = _mm512_set1_ps(a[r * lda + p]); \
    lo##r = _mm512_fmadd_ps(ar, x0, lo##r);           \
    hi##r = _mm512_fmadd_ps(ar, x1, hi##r);           \
  }
    MMGEN_FLASH_ROWS(MMGEN_FLASH_STEP)
#undef MMGEN_FLASH_STEP
  }
#define MMGEN_FLASH_STORE(r)                   \
  if constexpr (M > r) {                       \
    _mm512_storeu_ps(c + r * ldc, lo##r);      \
    _mm512_storeu_ps(c + r * ldc + 16, hi##r); \
  }
  MMGEN_FLASH_ROWS(MMGEN_FLASH_STORE)
#undef MMGEN_FLASH_STORE
}
#undef MMGEN_FLASH_ROWS
#endif

// 2^x for x ≤ 0: 2^round(x) through the exponent bits times a degree-7 Taylor polynomial of 2^f
// on f ∈ [−½, ½] (truncation error 5e-9, below float rounding); exactly 0 below kExp2Floor.
inline __m256 exp2_avx2(__m256 x) {
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(kExp2Floor), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(kExp2Floor));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(1.5252733804059841e-05f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.5403530393381608e-04f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-03f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-03f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-02f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-01f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-01f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)), keep);
}

inline float horizontal_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
#endif

// The operations one tile needs, in a portable and (when compiled in) an AVX2 flavour.
struct PortableOps {
  static constexpr int64_t kRows = 6;
  static constexpr bool kWide = false;  // has micro_wide (two panels per call)
  template <int M>
  static void micro(const float* a, int64_t lda, const float* b, int64_t k, float* c, int64_t ldc,
                    bool accumulate) {
    micro_portable<M>(a, lda, b, k, c, ldc, accumulate);
  }
  static float row_max(const float* s, int64_t n) {
    float m = kNegativeInfinity;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
    return m;
  }
  // s[j] := 2^(s[j] − shift) for j < n; returns their sum.
  static float exp2_row(float* s, int64_t n, float shift) {
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      const float x = s[j] - shift;
      s[j] = x < kExp2Floor ? 0.0f : std::exp2(x);
      sum += s[j];
    }
    return sum;
  }
};

#ifdef MMGEN_FLASH_AVX2
struct Avx2Ops {
  static constexpr int64_t kRows = 6;
  static constexpr bool kWide = false;
  template <int M>
  static void micro(const float* a, int64_t lda, const float* b, int64_t k, float* c, int64_t ldc,
                    bool accumulate) {
    micro_avx2<M>(a, lda, b, k, c, ldc, accumulate);
  }
  static float row_max(const float* s, int64_t n) {
    int64_t j = 0;
    float m = kNegativeInfinity;
    if (n >= 8) {
      __m256 v = _mm256_loadu_ps(s);
      for (j = 8; j + 8 <= n; j += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(s + j));
      m = horizontal_max(v);
    }
    for (; j < n; ++j) m = std::max(m, s[j]);
    return m;
  }
  static float exp2_row(float* s, int64_t n, float shift) {
    const __m256 vshift = _mm256_set1_ps(shift);
    __m256 vsum = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256 e = exp2_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), vshift));
      _mm256_storeu_ps(s + j, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    if (j < n) {  // the tail through a padded register (s has room up to the panel edge)
      // rest < 8 after the loop above; the bound in the loops says so to GCC, which otherwise
      // warns (-Waggressive-loop-optimizations) where it inlines this with a known n.
      const int64_t rest = std::min<int64_t>(n - j, 8);
      alignas(32) float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t t = 0; t < rest; ++t) tail[t] = s[j + t] - shift;
      const __m256 mask = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
          _mm256_set1_epi32(int(rest)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
      const __m256 e = _mm256_and_ps(exp2_avx2(_mm256_load_ps(tail)), mask);
      _mm256_store_ps(tail, e);
      for (int64_t t = 0; t < rest; ++t) s[j + t] = tail[t];
      vsum = _mm256_add_ps(vsum, e);
    }
    return horizontal_sum(vsum);
  }
};
#endif

#ifdef MMGEN_FLASH_AVX512
// 2^x for x <= 0 as exp2_avx2 computes it, 16 lanes at a time.
inline __m512 exp2_avx512(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExp2Floor), _CMP_GE_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(kExp2Floor));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.5252733804059841e-05f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530393381608e-04f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-02f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  const __m512i bits =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mov_ps(keep, _mm512_mul_ps(p, _mm512_castsi512_ps(bits)));
}

// AVX-512 products and softmax row operations (tails through masked loads and stores).
struct Avx512Ops {
  static constexpr int64_t kRows = 12;
  static constexpr bool kWide = true;
  template <int M>
  static void micro(const float* a, int64_t lda, const float* b, int64_t k, float* c, int64_t ldc,
                    bool accumulate) {
    micro_avx512<M>(a, lda, b, k, c, ldc, accumulate);
  }
  template <int M>
  static void micro_wide(const float* a, int64_t lda, const float* b0, const float* b1, int64_t k,
                         float* c, int64_t ldc, bool accumulate) {
    micro_avx512_wide<M>(a, lda, b0, b1, k, c, ldc, accumulate);
  }
  static __mmask16 tail_mask(int64_t count) { return __mmask16((1u << count) - 1u); }
  // Horizontal reductions through memory (GCC 12's _mm512_reduce_* trip -Wmaybe-uninitialized).
  static float lanes_max(__m512 v) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    return *std::max_element(lanes, lanes + 16);
  }
  static float lanes_sum(__m512 v) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    float sum = 0;
    for (float lane : lanes) sum += lane;
    return sum;
  }
  static float row_max(const float* s, int64_t n) {
    __m512 m = _mm512_set1_ps(kNegativeInfinity);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(s + j));
    if (j < n)
      m = _mm512_mask_max_ps(m, tail_mask(n - j), m,
                             _mm512_maskz_loadu_ps(tail_mask(n - j), s + j));
    return lanes_max(m);
  }
  static float exp2_row(float* s, int64_t n, float shift) {
    const __m512 vshift = _mm512_set1_ps(shift);
    __m512 sum = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      const __m512 e = exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(s + j), vshift));
      _mm512_storeu_ps(s + j, e);
      sum = _mm512_add_ps(sum, e);
    }
    if (j < n) {
      const __mmask16 mask = tail_mask(n - j);
      const __m512 e = _mm512_maskz_mov_ps(
          mask, exp2_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), vshift)));
      _mm512_mask_storeu_ps(s + j, mask, e);
      sum = _mm512_add_ps(sum, e);
    }
    return lanes_sum(sum);
  }
};
#endif

// c[rows x 16] (+)= a[rows x k] · panel, for any rows ≤ Ops::kRows.
template <typename Ops, int M = int(Ops::kRows)>
void micro_rows(int64_t rows, const float* a, int64_t lda, const float* b, int64_t k, float* c,
                int64_t ldc, bool accumulate) {
  if constexpr (M >= 1) {
    if (rows == M) return Ops::template micro<M>(a, lda, b, k, c, ldc, accumulate);
    return micro_rows<Ops, M - 1>(rows, a, lda, b, k, c, ldc, accumulate);
  }
}

// c[rows x 32] (+)= a[rows x k] · [b0 | b1], for any rows ≤ Ops::kRows (Ops::kWide only).
template <typename Ops, int M = int(Ops::kRows)>
void micro_rows_wide(int64_t rows, const float* a, int64_t lda, const float* b0, const float* b1,
                     int64_t k, float* c, int64_t ldc, bool accumulate) {
  if constexpr (M >= 1) {
    if (rows == M) return Ops::template micro_wide<M>(a, lda, b0, b1, k, c, ldc, accumulate);
    return micro_rows_wide<Ops, M - 1>(rows, a, lda, b0, b1, k, c, ldc, accumulate);
  }
}

// c[rows x 16·panels] (+)= a[rows x k] · panels, panel p at b + p·stride: two panels per
// micro-kernel call where Ops has the wide kernel.
template <typename Ops>
void multiply_panels(int64_t rows, const float* a, int64_t lda, const float* b, int64_t stride,
                     int64_t panels, int64_t k, float* c, int64_t ldc, bool accumulate) {
  int64_t p = 0;
  if constexpr (Ops::kWide)
    for (; p + 2 <= panels; p += 2)
      for (int64_t i = 0; i < rows; i += Ops::kRows)
        micro_rows_wide<Ops>(std::min(Ops::kRows, rows - i), a + i * lda, lda, b + p * stride,
                             b + (p + 1) * stride, k, c + i * ldc + p * kPanel, ldc, accumulate);
  for (; p < panels; ++p)
    for (int64_t i = 0; i < rows; i += Ops::kRows)
      micro_rows<Ops>(std::min(Ops::kRows, rows - i), a + i * lda, lda, b + p * stride, k,
                      c + i * ldc + p * kPanel, ldc, accumulate);
}

// ----------------------------------------------------------------------------- one chunk

// The running state of one query tile's online softmax (base 2): its queries, already scaled by
// scale·log2(e), and per row the running maximum and sum of weights and the unnormalised output.
struct TileState {
  const float* queries;  // [rows, dim]
  int64_t rows, dim, padded_dim;
  float* scores;       // [rows, kChunk] scratch
  float* accumulator;  // [rows, padded_dim]
  float* running_max;  // [rows]
  float* running_sum;  // [rows]
};

// A run of `width` keys in packed panels: key panel p is key_panels + p·dim·16, holding element
// (d, t) at d·16 + t; value panel q (16 output columns) is value_panels + q·value_stride, holding
// row r at r·16. Panels run to the next multiple of 16 keys; the padding must be finite (its
// weights are zeroed, and 0 · inf would be NaN).
struct KeySegment {
  const float* key_panels;
  const float* value_panels;
  int64_t value_stride;
  int64_t width;
};

// One online-softmax step of the tile over several key segments whose padded widths add up to at
// most kChunk: their scores sit side by side in one row, so small key blocks (VSA's 64-token
// cubes) share one maximum, one rescale of the accumulator and one exponentiation pass.
template <typename Ops>
void attend_segments(TileState& t, const KeySegment* segments, int64_t count) {
  const int64_t rows = t.rows, dim = t.dim, pdim = t.padded_dim;
  int64_t padded = 0;
  for (int64_t g = 0; g < count; ++g) padded += round_up(segments[g].width, kPanel);
  // scores[rows x padded] = queries · keysᵀ, segment after segment; the columns of each
  // segment's padding get −inf, so the row operations give them a weight of exactly 0.
  for (int64_t g = 0, column = 0; g < count; ++g) {
    const KeySegment& segment = segments[g];
    const int64_t panels = round_up(segment.width, kPanel) / kPanel;
    multiply_panels<Ops>(rows, t.queries, dim, segment.key_panels, dim * kPanel, panels, dim,
                         t.scores + column, padded, false);
    if (segment.width < panels * kPanel)
      for (int64_t i = 0; i < rows; ++i)
        std::fill(t.scores + i * padded + column + segment.width,
                  t.scores + i * padded + column + panels * kPanel, kNegativeInfinity);
    column += panels * kPanel;
  }
  // Online softmax: new running max, rescale what was accumulated, exponentiate.
  for (int64_t i = 0; i < rows; ++i) {
    float* s = t.scores + i * padded;
    const float old_max = t.running_max[i];
    const float new_max = std::max(old_max, Ops::row_max(s, padded));
    const float correction = old_max == kNegativeInfinity ? 0.0f : std::exp2(old_max - new_max);
    const float sum = Ops::exp2_row(s, padded, new_max);
    t.running_sum[i] = t.running_sum[i] * correction + sum;
    if (correction != 1.0f) {
      float* a = t.accumulator + i * pdim;
      for (int64_t d = 0; d < pdim; ++d) a[d] *= correction;
    }
    t.running_max[i] = new_max;
  }
  // accumulator[rows x Dp] += P · values, segment after segment.
  for (int64_t g = 0, column = 0; g < count; ++g) {
    const KeySegment& segment = segments[g];
    const int64_t width = round_up(segment.width, kPanel);
    multiply_panels<Ops>(rows, t.scores + column, padded, segment.value_panels,
                         segment.value_stride, pdim / kPanel, width, t.accumulator, pdim, true);
    column += width;
  }
}

// Per-thread buffers of one query tile, grown to the largest tile seen.
struct TileBuffers {
  AlignedBuffer queries, scores, accumulator;
  std::vector<float> running_max, running_sum;

  // Starts a tile of `rows` queries: row i is query_row(i) (dim floats) scaled by scale·log2(e),
  // so the softmax works in base 2 (exp2 is the cheap one); the accumulator is zero and no key has
  // been seen.
  template <typename QueryRow>
  TileState start(int64_t rows, int64_t dim, int64_t padded_dim, float scale, QueryRow query_row) {
    float* q = queries.get(rows * dim);
    const float factor = scale * kLog2e;
    for (int64_t i = 0; i < rows; ++i) {
      const float* src = query_row(i);
      for (int64_t d = 0; d < dim; ++d) q[i * dim + d] = src[d] * factor;
    }
    float* acc = accumulator.get(rows * padded_dim);
    std::fill(acc, acc + rows * padded_dim, 0.0f);
    running_max.assign(size_t(rows), kNegativeInfinity);
    running_sum.assign(size_t(rows), 0.0f);
    return {q,
            rows,
            dim,
            padded_dim,
            scores.get(rows * kChunk),
            acc,
            running_max.data(),
            running_sum.data()};
  }
};

// Calls f(Ops{}) with the operations `path` selects: for Best the widest compiled in.
template <typename F>
void with_kernel_path(KernelPath path, F&& f) {
#ifdef MMGEN_FLASH_AVX512
  if (path == KernelPath::Best) return f(Avx512Ops{});
#endif
#ifdef MMGEN_FLASH_AVX2
  if (path != KernelPath::Portable) return f(Avx2Ops{});
#endif
  f(PortableOps{});
}

// Row i's normalised output into out_row (dim floats) and, when lse is non-null, its natural-log
// sum-exp into *lse; a row that saw no key keeps its zeros and −inf.
inline void finish_row(const TileState& t, int64_t i, float* out_row, float* lse) {
  const float total = t.running_sum[i];
  if (total <= 0) return;
  const float inverse = 1.0f / total;
  const float* a = t.accumulator + i * t.padded_dim;
  for (int64_t d = 0; d < t.dim; ++d) out_row[d] = a[d] * inverse;
  if (lse) *lse = t.running_max[i] * kLn2 + std::log(total);
}

}  // namespace mmgen::attention::flash::detail

#pragma GCC diagnostic pop
