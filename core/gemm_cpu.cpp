#include "core/gemm_cpu.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/gemm_amx.h"
#include "core/gguf_quants.h"
#include "core/op_profile.h"
#include "core/parallel.h"
#include "core/scaled_fp8.h"
#include "core/transpose_cpu.h"

// The vector path wants AVX-512 F, BW and VL (every AVX-512 server CPU since Skylake, Zen 4 on).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define MMGEN_GEMM_AVX512 1
#include "core/x86_intrinsics.h"
// The bf16 products (vdpbf16ps) want AVX-512 BF16 as well (Cooper Lake, Sapphire Rapids, Zen 4 on).
#ifdef __AVX512BF16__
#define MMGEN_GEMM_BF16 1
#endif
#elif defined(__AVX2__) && defined(__FMA__)
// Without AVX-512 (Zen 2/3, Intel's client cores, x86-64-v3 builds): a tile kernel in 8-float
// vectors. The plain C++ kernel below is only vectorised by the optimiser (the VAE tiling example
// took 9.67 s with it, 4.38 s with this one) and not at all in the sanitizers' -Og build, where
// the sanitized tiling test ran past its 900 s timeout.
#define MMGEN_GEMM_AVX2 1
#include <immintrin.h>
#endif

namespace mmgen::cpu {
namespace {

// The weight is packed per call into panels of kPanel outputs: panel[k][j] = w[n0 + j][k], so the
// kernel reads one contiguous row of kPanel weights per step of k. Packing from bf16 converts as it
// goes, so a bf16 checkpoint is read once per product and never expanded whole.
//
// The tile is kRows x kPanel: 8 rows of three 16-float vectors with AVX-512 (24 accumulators, 3
// panel vectors and a broadcast in the 32 registers: 11 loads per 24 multiply-adds). Measured
// beside 14 x 32 and 6 x 64 on the Zen 5 VM (104 against 100 GFLOP/s on one core, 117 the core's
// peak) and on the 16-core Xeon (about the same on one core, 1230-1470 against 1230-1380 GFLOP/s
// on 16).
constexpr int kVectors = 3;
constexpr int64_t kPanel = 16 * kVectors;
// A kernel call runs kDepth steps of k: its rows of the input (8 x 256 floats, 8 KiB) stay in L1
// across the job's panels, each panel block (256 x 48 floats, 48 KiB) streams from L2.
constexpr int64_t kDepth = 256;
// How far ahead the kernel asks for its panel rows (8 steps, about 100 cycles: an L2 hit with room
// to spare). The Zen 4 VM's prefetchers need no help; on the Xeon, at 1-2 threads, these and the
// input prefetch below lifted the product from about 225 to 250-280 GFLOP/s on two cores.
constexpr int64_t kPanelAhead = 8;
// A job: 112 rows x 5 panels (240 outputs); the Wan 1.3B's 1536-wide products make 84 of them.
constexpr int64_t kJobRows = 112;
// On AMX a job's rows are four blocks of two 16-row tiles.
constexpr int64_t kJobRowsTiles = 128;
constexpr int64_t kJobPanels = 5;
// Multiply-adds per thread (4M). wan-shapes' 2M-multiply-add products stay on one thread and its
// 8.4M feed-forward products take two: on the 16-core Xeon host the op profile showed a team of
// four (the grain was 2M) spend 33-49 ms of the 20-step run packing and starting against 16-20 ms
// for two, with no faster product; on the 2-core VM two threads beat one (71 against 82 ms).
// One thread for all of them (8M) was tried in session 22 and changed nothing measurable.
constexpr int64_t kWorkPerThread = int64_t(1) << 22;
// Bytes of one q8_0 block (an f16 scale, 32 int8 values; core/dtype.h).
constexpr int64_t kQ8Block = 34;

constexpr int64_t round_up(int64_t value, int64_t to) {
  return (value + to - 1) / to * to;
}

#ifndef MMGEN_GEMM_AVX512
// Blocks of 64 steps of k: their 64 panel rows (12 KiB) stay in L1 while the panel's weight rows
// are read into them. (A whole column pass at a time touches every line of a panel kPanel times.)
template <typename Load>
void pack_panel(Load load, int64_t n0, int64_t n, int64_t k, float* panel) {
  constexpr int64_t kBlock = 64;
  const int64_t width = std::min(kPanel, n - n0);
  for (int64_t i0 = 0; i0 < k; i0 += kBlock) {
    const int64_t i1 = std::min(k, i0 + kBlock);
    for (int64_t j = 0; j < width; ++j) {
      const int64_t row = (n0 + j) * k;
      for (int64_t i = i0; i < i1; ++i) panel[i * kPanel + j] = load(row + i);
    }
    for (int64_t j = width; j < kPanel; ++j)
      for (int64_t i = i0; i < i1; ++i) panel[i * kPanel + j] = 0.0f;
  }
}
#endif

#ifdef MMGEN_GEMM_AVX512
// Up to 16 values of a weight row as float32 (`mask`: which of them exist).
__m512 load_row(const void* w, DType dtype, int64_t at, __mmask16 mask) {
  if (dtype == DType::F32) return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w) + at);
  if (dtype == DType::Q8_0) {  // 16 values of one block (rows are whole blocks, `at` % 16 == 0)
    const std::byte* block = static_cast<const std::byte*>(w) + (at / 32) * kQ8Block;
    uint16_t scale;
    std::memcpy(&scale, block, 2);
    const __m128i q = _mm_maskz_loadu_epi8(mask, block + 2 + at % 32);
    // value = q · d, one rounding, as gguf::dequantize computes it
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)),
                         _mm512_set1_ps(f16_to_f32(scale)));
  }
  const __m256i half = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + at);
  if (dtype == DType::F16) return _mm512_cvtph_ps(half);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

// Blocks of 16 x 16 transposed in registers: every load and store is a whole vector.
void pack_weight_panel(const void* w, DType dtype, int64_t n0, int64_t n, int64_t k, float* panel) {
  const int64_t width = std::min(kPanel, n - n0);
  __m512 r[16];
  for (int64_t i0 = 0; i0 < k; i0 += 16) {
    const int64_t depth = std::min<int64_t>(16, k - i0);
    const __mmask16 mask = __mmask16((1u << depth) - 1);
    for (int64_t j0 = 0; j0 < kPanel; j0 += 16) {
      for (int64_t j = 0; j < 16; ++j)
        r[j] =
            j0 + j < width ? load_row(w, dtype, (n0 + j0 + j) * k + i0, mask) : _mm512_setzero_ps();
      transpose16(r);
      for (int64_t b = 0; b < depth; ++b) _mm512_store_ps(panel + (i0 + b) * kPanel + j0, r[b]);
    }
  }
}
#else
void pack_weight_panel(const void* w, DType dtype, int64_t n0, int64_t n, int64_t k, float* panel) {
  switch (dtype) {
    case DType::F32: {
      const float* from = static_cast<const float*>(w);
      return pack_panel([from](int64_t i) { return from[i]; }, n0, n, k, panel);
    }
    case DType::BF16: {
      const uint16_t* from = static_cast<const uint16_t*>(w);
      return pack_panel([from](int64_t i) { return bf16_to_f32(from[i]); }, n0, n, k, panel);
    }
    case DType::Q8_0: {
      const std::byte* from = static_cast<const std::byte*>(w);
      return pack_panel(
          [from](int64_t i) {
            const std::byte* block = from + (i / 32) * kQ8Block;
            uint16_t scale;
            std::memcpy(&scale, block, 2);
            return float(int8_t(block[2 + i % 32])) * f16_to_f32(scale);
          },
          n0, n, k, panel);
    }
    default: {  // F16 (linear_product checked the type)
      const uint16_t* from = static_cast<const uint16_t*>(w);
      return pack_panel([from](int64_t i) { return f16_to_f32(from[i]); }, n0, n, k, panel);
    }
  }
}
#endif

// A panel's rows decoded into a scratch row block by `decode(row, out)` (k float32 values of weight
// row n0 + j), then packed as float32: for the weight types whose values are not read one at a time
// inside the packing loads.
template <typename Decode>
void pack_decoded_panel(int64_t n0, int64_t n, int64_t k, float* panel, const Decode& decode) {
  const int64_t width = std::min(kPanel, n - n0);
  thread_local std::vector<float> rows;
  rows.resize(size_t(width * k));
  for (int64_t j = 0; j < width; ++j) decode(n0 + j, rows.data() + j * k);
  pack_weight_panel(rows.data(), DType::F32, 0, width, k, panel);
}

// Quantized blocks other than q8_0 (the 4- and 5-bit types and the K-quants, whose values are
// spread over nibbles, high bits and sub-block scales): each row is dequantized whole by
// gguf::dequantize, so the packed values are the dequantized values to the bit. q8_0 is unpacked
// inside the packing loads instead.
void pack_block_panel(const void* w, DType dtype, int64_t n0, int64_t n, int64_t k, float* panel) {
  const size_t row_bytes = size_t(k / dtype_block_values(dtype)) * dtype_size(dtype);
  const auto* from = static_cast<const std::byte*>(w);
  const gguf::GgmlType type = gguf::ggml_type_of_blocks(dtype);
  pack_decoded_panel(n0, n, k, panel, [&](int64_t row, float* out) {
    gguf::dequantize(type, from + size_t(row) * row_bytes, out, k);
  });
}

// e4m3 rows with one scale each (f8_e4m3_rows; the scales follow the n · k values): each value
// e4m3 · its row's scale in one rounding, as Tensor::to gives them.
void pack_e4m3_panel(const void* w, int64_t n0, int64_t n, int64_t k, float* panel) {
  const auto* values = static_cast<const uint8_t*>(w);
  const auto* scales =
      reinterpret_cast<const float*>(static_cast<const std::byte*>(w) + row_scales_offset(n * k));
  const auto& table = fp8::e4m3_values();
  pack_decoded_panel(n0, n, k, panel, [&](int64_t row, float* out) {
    for (int64_t i = 0; i < k; ++i) out[i] = table[values[row * k + i]] * scales[row];
  });
}

// Panel p of the float32 products' packed weight, from any weight type linear_product takes.
void pack_any_panel(const void* w, DType w_dtype, int64_t p, int64_t n, int64_t k, float* panel) {
  if (w_dtype == DType::F8E4M3Rows) return pack_e4m3_panel(w, p * kPanel, n, k, panel);
  if (dtype_is_blocks(w_dtype) && w_dtype != DType::Q8_0)
    return pack_block_panel(w, w_dtype, p * kPanel, n, k, panel);
  pack_weight_panel(w, w_dtype, p * kPanel, n, k, panel);
}

#ifdef MMGEN_GEMM_BF16
// The bf16 products' panels: row q of a panel holds kPanel pairs (w[n0 + j][2q], w[n0 + j][2q + 1])
// of bfloat16, one 32-bit lane per output, as vdpbf16ps multiplies them against a broadcast pair of
// the input. An odd k's last pair and the outputs past n are zero.

// Up to 16 pairs of a weight row (32 values from `at`, `count` of them real) as bf16 pairs, rounded
// to nearest even from float32 or float16; bf16 weights are copied as stored.
__m512i load_pairs(const void* w, DType dtype, int64_t at, int64_t count) {
  count = std::clamp<int64_t>(count, 0, 32);
  if (dtype == DType::BF16) {
    const __mmask32 mask = count >= 32 ? ~__mmask32(0) : __mmask32((1u << count) - 1);
    return _mm512_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + at);
  }
  const auto half = [&](int64_t from) {
    const int64_t lanes = std::clamp<int64_t>(count - from, 0, 16);
    return load_row(w, dtype, at + from, __mmask16((1u << lanes) - 1));
  };
  // cvtne2ps_pbh(hi, lo): values 0..15 from lo, 16..31 from hi, in order.
  return (__m512i)_mm512_cvtne2ps_pbh(half(16), half(0));
}

// `steps` rows: the (k + 1) / 2 pairs, then zero rows.
void pack_weight_panel_bf16(const void* w, DType dtype, int64_t n0, int64_t n, int64_t k,
                            int64_t steps, uint32_t* panel) {
  const int64_t width = std::min(kPanel, n - n0);
  __m512 r[16];
  for (int64_t q0 = 0; q0 < steps; q0 += 16) {
    const int64_t depth = std::min<int64_t>(16, steps - q0);
    for (int64_t j0 = 0; j0 < kPanel; j0 += 16) {
      for (int64_t j = 0; j < 16; ++j)
        r[j] =
            j0 + j < width
                ? _mm512_castsi512_ps(load_pairs(w, dtype, (n0 + j0 + j) * k + 2 * q0, k - 2 * q0))
                : _mm512_setzero_ps();
      transpose16(r);  // 32-bit lanes: each pair moves whole
      for (int64_t b = 0; b < depth; ++b)
        _mm512_store_ps(reinterpret_cast<float*>(panel + (q0 + b) * kPanel + j0), r[b]);
    }
  }
}

// A row of the input as `steps` bf16 pairs, rounded to nearest even: the (k + 1) / 2 pairs (an odd
// k's last one padded with zero), then zero pairs.
void convert_input_row(const float* a, int64_t k, int64_t steps, uint32_t* to) {
  for (int64_t q0 = 0; q0 < steps; q0 += 16) {
    const int64_t count = std::clamp<int64_t>(k - 2 * q0, 0, 32);
    const auto half = [&](int64_t from) {
      const int64_t lanes = std::clamp<int64_t>(count - from, 0, 16);
      return _mm512_maskz_loadu_ps(__mmask16((1u << lanes) - 1), a + 2 * q0 + from);
    };
    const __m512i bits = (__m512i)_mm512_cvtne2ps_pbh(half(16), half(0));
    const int64_t lanes = std::min<int64_t>(16, steps - q0);
    _mm512_mask_storeu_epi32(to + q0, __mmask16((1u << lanes) - 1), bits);
  }
}
#endif

// One tile: `rows` rows of c (at most kRows), `width` of the panel's kPanel outputs, `depth` steps
// of k starting at the panel block. `first` starts the chains at zero, `bias` (on the last block)
// is added after the sum, as torch's linear does. `In` is float (float32 products, one step per k)
// or uint32_t (bf16 products, one step per pair of k).
template <typename In>
struct Tile {
  const In* a;
  int64_t lda;
  const In* panel;
  float* c;
  int64_t ldc;
  int64_t depth;
  int64_t width;
  bool first;
  const float* bias;
  // The next tile's rows of the input, fetched into L2 while this one runs: a job's 112 rows step
  // through k together, more streams than the hardware prefetchers follow, so without this every
  // tile's first panel waits for its input from L3 or memory.
  const In* next_a;
  int64_t next_rows;
};

#ifdef MMGEN_GEMM_AVX512
constexpr int kRows = 8;

template <int R, typename In>
struct Accumulators {
  __m512 acc[R][kVectors];
  __mmask16 mask[kVectors];

  explicit Accumulators(const Tile<In>& t) {
    for (int v = 0; v < kVectors; ++v) {
      const int64_t lanes = std::clamp<int64_t>(t.width - 16 * v, 0, 16);
      mask[v] = __mmask16((1u << lanes) - 1);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v)
        acc[r][v] = t.first ? _mm512_setzero_ps()
                            : _mm512_maskz_loadu_ps(mask[v], t.c + r * t.ldc + 16 * v);
  }

  // The bias (on the last depth block) after the sum, then the tile back to c.
  void store(const Tile<In>& t) {
    if (t.bias) {
      __m512 bias[kVectors];
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) bias[v] = _mm512_maskz_loadu_ps(mask[v], t.bias + 16 * v);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_add_ps(acc[r][v], bias[v]);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v)
        _mm512_mask_storeu_ps(t.c + r * t.ldc + 16 * v, mask[v], acc[r][v]);
  }
};

// Asks for step i's panel row kPanelAhead steps ahead, and for one line of the next tile's input
// per step (row i % 8, line i / 16: each line twice).
template <typename In>
inline void prefetch_ahead(const Tile<In>& t, const In* p, int64_t i) {
#pragma GCC unroll 4
  for (int v = 0; v < kVectors; ++v)
    _mm_prefetch(reinterpret_cast<const char*>(p + kPanelAhead * kPanel + 16 * v), _MM_HINT_T0);
  const int64_t row = std::min<int64_t>(i & 7, t.next_rows - 1);
  _mm_prefetch(reinterpret_cast<const char*>(t.next_a + row * t.lda + (i >> 4) * 16), _MM_HINT_T1);
}

template <int R>
void tile_kernel(const Tile<float>& t) {
  Accumulators<R, float> c(t);
  const float* a = t.a;
  const float* p = t.panel;
  for (int64_t i = 0; i < t.depth; ++i, ++a, p += kPanel) {
    __m512 b[kVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) b[v] = _mm512_load_ps(p + 16 * v);
    prefetch_ahead(t, p, i);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * t.lda]);
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) c.acc[r][v] = _mm512_fmadd_ps(x, b[v], c.acc[r][v]);
    }
  }
  c.store(t);
}

#ifdef MMGEN_GEMM_BF16
// The same tile over pairs of k: each vdpbf16ps adds both products of a pair to the float32 chain.
// (A second loop rather than a shared one with a step functor: the two differ in every line of the
// hot loop, its loads, broadcast and multiply-add.)
template <int R>
void tile_kernel(const Tile<uint32_t>& t) {
  Accumulators<R, uint32_t> c(t);
  const uint32_t* a = t.a;
  const uint32_t* p = t.panel;
  for (int64_t i = 0; i < t.depth; ++i, ++a, p += kPanel) {
    __m512bh b[kVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) b[v] = (__m512bh)_mm512_load_si512(p + 16 * v);
    prefetch_ahead(t, p, i);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(int(a[r * t.lda]));
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) c.acc[r][v] = _mm512_dpbf16_ps(c.acc[r][v], x, b[v]);
    }
  }
  c.store(t);
}
#endif
#elif defined(MMGEN_GEMM_AVX2)
constexpr int kRows = 4;
// A panel of kPanel outputs is taken as two halves of three 8-float vectors: 4 rows x 3 vectors are
// 12 accumulators, with the 3 panel vectors and a broadcast the 16 registers AVX2 has.
constexpr int kHalfVectors = 3;
constexpr int64_t kHalf = 8 * kHalfVectors;

// Lanes [0, lanes) of an 8-float vector, as the mask maskload and maskstore take.
inline __m256i lanes_mask(int64_t lanes) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::clamp<int64_t>(lanes, 0, 8))), index);
}

template <int R>
void half_tile(const Tile<float>& t, int64_t j0) {
  __m256i mask[kHalfVectors];
  __m256 acc[R][kHalfVectors];
#pragma GCC unroll 4
  for (int v = 0; v < kHalfVectors; ++v) mask[v] = lanes_mask(t.width - j0 - 8 * v);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kHalfVectors; ++v)
      acc[r][v] =
          t.first ? _mm256_setzero_ps() : _mm256_maskload_ps(t.c + r * t.ldc + j0 + 8 * v, mask[v]);
  const float* a = t.a;
  const float* p = t.panel + j0;
  for (int64_t i = 0; i < t.depth; ++i, ++a, p += kPanel) {
    __m256 b[kHalfVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kHalfVectors; ++v) b[v] = _mm256_loadu_ps(p + 8 * v);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * t.lda);
#pragma GCC unroll 4
      for (int v = 0; v < kHalfVectors; ++v) acc[r][v] = _mm256_fmadd_ps(x, b[v], acc[r][v]);
    }
  }
  if (t.bias) {  // after the sum, as torch's linear adds it
#pragma GCC unroll 4
    for (int v = 0; v < kHalfVectors; ++v) {
      const __m256 bias = _mm256_maskload_ps(t.bias + j0 + 8 * v, mask[v]);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][v] = _mm256_add_ps(acc[r][v], bias);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kHalfVectors; ++v)
      _mm256_maskstore_ps(t.c + r * t.ldc + j0 + 8 * v, mask[v], acc[r][v]);
}

// The same chains as the AVX-512 kernel's (one fused multiply-add per step of k), so the values
// are bit-identical to it and to the plain C++ kernel's.
template <int R>
void tile_kernel(const Tile<float>& t) {
  half_tile<R>(t, 0);
  if (t.width > kHalf) half_tile<R>(t, kHalf);
}
#else
constexpr int kRows = 4;

// The same chains in plain C++ (std::fma rounds as the vector instruction does, so the values are
// bit-identical to the AVX-512 kernel's); the compiler vectorises the inner loop over outputs.
template <int R>
void tile_kernel(const Tile<float>& t) {
  float acc[R][kPanel];
  for (int r = 0; r < R; ++r)
    for (int64_t j = 0; j < kPanel; ++j)
      acc[r][j] = t.first || j >= t.width ? 0.0f : t.c[r * t.ldc + j];
  for (int64_t i = 0; i < t.depth; ++i) {
    const float* p = t.panel + i * kPanel;
    for (int r = 0; r < R; ++r) {
      const float x = t.a[r * t.lda + i];
      for (int64_t j = 0; j < kPanel; ++j) acc[r][j] = std::fma(x, p[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int64_t j = 0; j < t.width; ++j)
      t.c[r * t.ldc + j] = t.bias ? acc[r][j] + t.bias[j] : acc[r][j];
}
#endif

template <typename In>
using TileKernel = void (*)(const Tile<In>&);

template <typename In, int... R>
constexpr std::array<TileKernel<In>, sizeof...(R)> make_kernels(std::integer_sequence<int, R...>) {
  return {static_cast<TileKernel<In>>(&tile_kernel<R + 1>)...};
}
// kernels<In>[r - 1] handles r rows.
template <typename In>
constexpr auto kernels = make_kernels<In>(std::make_integer_sequence<int, kRows>());

template <typename In>
struct Product {
  const In* a;
  int64_t lda;
  const In* packed;  // panels of k x kPanel steps
  const float* bias;
  float* c;
  int64_t m, k, n;  // k in steps: values of k (float32) or pairs (bf16)
  // Segmented rows (SegmentedRows, float32 only): column i of row r is
  // a[r · lda + offsets[i / segment] + i % segment]; segment 0 for plain rows.
  int64_t segment = 0;
  const int64_t* offsets = nullptr;

  // Where row r's columns from k0 on start (their depth block stays inside one segment).
  const In* at(int64_t r, int64_t k0) const {
    return a + r * lda + (segment ? offsets[k0 / segment] + k0 % segment : k0);
  }
  // How many steps of k from k0 one depth block takes: kDepth, cut at the end of k and of k0's
  // segment.
  int64_t depth_at(int64_t k0) const {
    const int64_t depth = std::min(kDepth, k - k0);
    return segment ? std::min(depth, segment - k0 % segment) : depth;
  }
};

// Rows [m0, m1) of c for panels [p0, p1): depth blocks outside; inside, each tile of input rows
// stays in L1 while it passes over the job's panels.
template <typename In>
void run_job(const Product<In>& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  for (int64_t k0 = 0, depth = 0; k0 < g.k; k0 += depth) {
    depth = g.depth_at(k0);
    const bool first = k0 == 0, last = k0 + depth == g.k;
    for (int64_t r = m0; r < m1; r += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, m1 - r);
      // The tile after this one: the next rows at this depth, or the job's first rows at the next.
      int64_t next_r = r + kRows, next_k0 = k0;
      if (next_r >= m1) next_r = m0, next_k0 = k0 + depth;
      if (next_k0 >= g.k) next_r = r, next_k0 = k0;
      const In* next_a = g.at(next_r, next_k0);
      const int64_t next_rows = std::min<int64_t>(kRows, m1 - next_r);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t n0 = p * kPanel;
        const In* panel = g.packed + p * kPanel * g.k + k0 * kPanel;
        const float* bias = last && g.bias ? g.bias + n0 : nullptr;
        const Tile<In> tile{
            g.at(r, k0), g.lda, panel,  g.c + r * g.n + n0, g.n, depth, std::min(kPanel, g.n - n0),
            first,       bias,  next_a, next_rows};
        kernels<In>[size_t(rows - 1)](tile);
      }
    }
  }
}

// The packed weight (and the bf16 products' converted input) live in buffers kept by the calling
// thread between products, so a forward's products reuse the same pages instead of faulting fresh
// ones in each time.
template <int Slot>
void* kept_buffer(size_t bytes) {
  struct Buffer {
    std::unique_ptr<void, decltype(&std::free)> data{nullptr, &std::free};
    size_t capacity = 0;
  };
  thread_local Buffer buffer;
  if (buffer.capacity < bytes) {
    buffer.data.reset(std::aligned_alloc(64, size_t(round_up(int64_t(bytes), 64))));
    check(buffer.data != nullptr, "linear: out of memory packing a weight of {} bytes", bytes);
    buffer.capacity = bytes;
  }
  return buffer.data.get();
}

// A product's plan: the padded input rows it prepares, its panels and their packing, its jobs.
struct Plan {
  int64_t m, work;     // rows of c, multiply-adds (for the team size)
  int64_t panels;      // of kPanel outputs
  int64_t job_rows;    // rows per job
  int64_t input_rows;  // rows to prepare (the bf16 products' converted input), 0 for none
};

// Packs the weight (and prepares the input), then runs the jobs, all in one parallel region.
// `pack(p)` packs panel p, `prepare(r)` input row r, `job(m0, m1, p0, p1)` runs rows [m0, m1) of
// c for panels [p0, p1).
template <typename Pack, typename Prepare, typename Job>
void run_product(const Plan& plan, Pack pack, Prepare prepare, Job job) {
  const int64_t row_jobs = (plan.m + plan.job_rows - 1) / plan.job_rows;
  const int64_t panel_jobs = (plan.panels + kJobPanels - 1) / kJobPanels;
  const int64_t jobs = row_jobs * panel_jobs;
  const int threads =
      int(std::min<int64_t>(threads_for(plan.work, kWorkPerThread), std::max(jobs, plan.panels)));
  // With MMGEN_OP_PROFILE, the packing's share is timed at the barrier that ends it.
  const bool profiling = profile::enabled();
  const auto start =
      profiling ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  auto packed_at = start;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < plan.input_rows; ++r) prepare(r);
#pragma omp for schedule(static)
    for (int64_t p = 0; p < plan.panels; ++p) pack(p);
    if (profiling) {
#pragma omp master
      packed_at = std::chrono::steady_clock::now();
    }
    // Consecutive jobs share their panels: the threads sweep one block of outputs together, so it
    // comes from memory once.
#pragma omp for schedule(dynamic, 1)
    for (int64_t index = 0; index < jobs; ++index) {
      const int64_t pj = index / row_jobs, mj = index % row_jobs;
      job(mj * plan.job_rows, std::min(plan.m, (mj + 1) * plan.job_rows), pj * kJobPanels,
          std::min(plan.panels, (pj + 1) * kJobPanels));
    }
  }
  if (profiling)
    profile::add("linear: weight packing",
                 std::chrono::duration_cast<std::chrono::nanoseconds>(packed_at - start).count());
}

// Checked outside the parallel regions, where an error may still leave as an exception.
void check_weight_type(DType w_dtype, int64_t k) {
  check(w_dtype == DType::F32 || w_dtype == DType::BF16 || w_dtype == DType::F16 ||
            w_dtype == DType::F8E4M3Rows || dtype_is_blocks(w_dtype),
        "linear: weights of type {} are not supported on the CPU", dtype_name(w_dtype));
  check(k % dtype_block_values(w_dtype) == 0, "linear: {} rows of {} are not whole blocks",
        dtype_name(w_dtype), k);
}

// c = bias (or zeros) for a product over no k; true when there is nothing else to compute.
bool trivial_product(const float* bias, float* c, int64_t m, int64_t k, int64_t n) {
  if (m == 0 || n == 0) return true;
  if (k != 0) return false;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) c[r * n + j] = bias ? bias[j] : 0.0f;
  return true;
}

std::atomic<ProductPrecision> precision{ProductPrecision::F32};

}  // namespace

bool bf16_products_available() {
#ifdef MMGEN_GEMM_BF16
  return true;
#else
  return false;
#endif
}

void set_product_precision(ProductPrecision wanted) {
  check(wanted == ProductPrecision::F32 || bf16_products_available(),
        "bf16 products need a CPU with AVX-512 BF16 and a build for it (-march=native on such a "
        "CPU); this build has none: use the float32 products");
  precision = wanted;
}

ProductPrecision product_precision() {
  return precision;
}

PackedWeight::PackedWeight(const void* w, DType w_dtype, int64_t n, int64_t k) : n_(n), k_(k) {
  check_weight_type(w_dtype, k);
  const int64_t panels = (n + kPanel - 1) / kPanel;
  const size_t bytes = size_t(round_up(panels * kPanel * k * 4, 64));
  panels_.reset(static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64))));
  check(panels_ != nullptr, "linear: out of memory packing a weight of {} bytes", bytes);
  const bool profiling = profile::enabled();
  const auto start =
      profiling ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  const int threads = int(std::min<int64_t>(threads_for(n * k), panels));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t p = 0; p < panels; ++p)
    pack_any_panel(w, w_dtype, p, n, k, panels_.get() + p * kPanel * k);
  if (profiling)
    profile::add("linear: weight packing", std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               std::chrono::steady_clock::now() - start)
                                               .count());
}

void linear_product(const float* a, int64_t lda, const PackedWeight& w, const float* bias, float* c,
                    int64_t m) {
  const int64_t offset = 0;
  linear_product(SegmentedRows{a, lda, std::max<int64_t>(w.k(), 1), &offset}, w, bias, c, m);
}

void linear_product(const SegmentedRows& a, const PackedWeight& w, const float* bias, float* c,
                    int64_t m) {
  const int64_t k = w.k(), n = w.n();
  check(a.segment > 0 && k % a.segment == 0, "linear: {} columns in segments of {}", k, a.segment);
  if (trivial_product(bias, c, m, k, n)) return;
  const int64_t panels = (n + kPanel - 1) / kPanel;
  const Product<float> g{a.a, a.lda, w.panels(), bias, c, m, k, n, a.segment, a.offsets};
  run_product(
      Plan{m, m * n * k, panels, kJobRows, 0}, [](int64_t) {}, [](int64_t) {},
      [&](int64_t m0, int64_t m1, int64_t p0, int64_t p1) { run_job(g, m0, m1, p0, p1); });
}

void linear_product(const float* a, int64_t lda, const void* w, DType w_dtype, const float* bias,
                    float* c, int64_t m, int64_t k, int64_t n) {
  check_weight_type(w_dtype, k);
  if (trivial_product(bias, c, m, k, n)) return;
  const int64_t panels = (n + kPanel - 1) / kPanel;
#ifdef MMGEN_GEMM_BF16
  // Quantized blocks and e4m3 rows take the float32 product.
  if (precision == ProductPrecision::BF16 && !dtype_is_blocks(w_dtype) &&
      w_dtype != DType::F8E4M3Rows) {
    // On AMX the pairs are padded to whole tile steps and the rows to whole blocks (zeros).
    const bool tiles = amx::available();
    const int64_t pairs = (k + 1) / 2;
    const int64_t steps = tiles ? round_up(pairs, amx::kStepPairs) : pairs;
    const int64_t rows = tiles ? round_up(m, amx::kBlockRows) : m;
    auto* packed = static_cast<uint32_t*>(kept_buffer<0>(size_t(panels * kPanel * steps) * 4));
    auto* input = static_cast<uint32_t*>(kept_buffer<1>(size_t(rows * steps) * 4));
    const auto pack = [&](int64_t p) {
      pack_weight_panel_bf16(w, w_dtype, p * kPanel, n, k, steps, packed + p * kPanel * steps);
    };
    const auto prepare = [&](int64_t r) {
      uint32_t* to = input + r * steps;
      if (r < m) return convert_input_row(a + r * lda, k, steps, to);
      std::fill(to, to + steps, 0u);
    };
    const Plan plan{m, m * n * k, panels, tiles ? kJobRowsTiles : kJobRows, rows};
    if (tiles)
      return run_product(plan, pack, prepare, [&](int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
        amx::run_job(input, packed, steps, bias, c, m, n, m0, m1, p0, p1);
      });
    const Product<uint32_t> g{input, steps, packed, bias, c, m, steps, n};
    return run_product(plan, pack, prepare, [&](int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
      run_job(g, m0, m1, p0, p1);
    });
  }
#endif
  auto* packed = static_cast<float*>(kept_buffer<0>(size_t(panels * kPanel * k) * 4));
  const Product<float> g{a, lda, packed, bias, c, m, k, n};
  run_product(
      Plan{m, m * n * k, panels, kJobRows, 0},
      [&](int64_t p) { pack_any_panel(w, w_dtype, p, n, k, packed + p * kPanel * k); },
      [](int64_t) {},
      [&](int64_t m0, int64_t m1, int64_t p0, int64_t p1) { run_job(g, m0, m1, p0, p1); });
}

}  // namespace mmgen::cpu
