#include "core/gemm_cpu.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <utility>

#include "core/error.h"
#include "core/op_profile.h"
#include "core/parallel.h"

// The vector path wants AVX-512 F, BW and VL (every AVX-512 server CPU since Skylake, Zen 4 on).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define MMGEN_GEMM_AVX512 1
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
constexpr int64_t kJobPanels = 5;
// Multiply-adds per thread (4M). wan-shapes' 2M-multiply-add products stay on one thread and its
// 8.4M feed-forward products take two: on the 16-core Xeon host the op profile showed a team of
// four (the grain was 2M) spend 33-49 ms of the 20-step run packing and starting against 16-20 ms
// for two, with no faster product; on the 2-core VM two threads beat one (71 against 82 ms).
// One thread for all of them (8M) was tried in session 22 and changed nothing measurable.
constexpr int64_t kWorkPerThread = int64_t(1) << 22;

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
// r[b] becomes column b of the 16 x 16 block whose rows were r[0..15].
void transpose16(__m512 r[16]) {
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

// Up to 16 values of a weight row as float32 (`mask`: which of them exist).
__m512 load_row(const void* w, DType dtype, int64_t at, __mmask16 mask) {
  if (dtype == DType::F32) return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w) + at);
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
    default: {  // F16 (linear_product checked the type)
      const uint16_t* from = static_cast<const uint16_t*>(w);
      return pack_panel([from](int64_t i) { return f16_to_f32(from[i]); }, n0, n, k, panel);
    }
  }
}
#endif

// One tile: `rows` rows of c (at most kRows), `width` of the panel's kPanel outputs, `depth` steps
// of k starting at the panel block. `first` starts the chains at zero, `bias` (on the last block)
// is added after the sum, as torch's linear does.
struct Tile {
  const float* a;
  int64_t lda;
  const float* panel;
  float* c;
  int64_t ldc;
  int64_t depth;
  int64_t width;
  bool first;
  const float* bias;
  // The next tile's rows of the input, fetched into L2 while this one runs: a job's 112 rows step
  // through k together, more streams than the hardware prefetchers follow, so without this every
  // tile's first panel waits for its input from L3 or memory.
  const float* next_a;
  int64_t next_rows;
};

#ifdef MMGEN_GEMM_AVX512
constexpr int kRows = 8;

template <int R>
void tile_kernel(const Tile& t) {
  constexpr int V = kVectors;
  __mmask16 mask[V];
  for (int v = 0; v < V; ++v) {
    const int64_t lanes = std::clamp<int64_t>(t.width - 16 * v, 0, 16);
    mask[v] = __mmask16((1u << lanes) - 1);
  }
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      acc[r][v] =
          t.first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask[v], t.c + r * t.ldc + 16 * v);
  const float* a = t.a;
  const float* p = t.panel;
  for (int64_t i = 0; i < t.depth; ++i, ++a, p += kPanel) {
    __m512 b[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) b[v] = _mm512_load_ps(p + 16 * v);
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      _mm_prefetch(reinterpret_cast<const char*>(p + kPanelAhead * kPanel + 16 * v), _MM_HINT_T0);
    // One line of the next tile's input per step: row i % 8, line i / 16 (each line twice).
    const int64_t row = std::min<int64_t>(i & 7, t.next_rows - 1);
    _mm_prefetch(reinterpret_cast<const char*>(t.next_a + row * t.lda + (i >> 4) * 16),
                 _MM_HINT_T1);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * t.lda]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
    }
  }
  if (t.bias) {
    __m512 bias[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bias[v] = _mm512_maskz_loadu_ps(mask[v], t.bias + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_add_ps(acc[r][v], bias[v]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(t.c + r * t.ldc + 16 * v, mask[v], acc[r][v]);
}
#else
constexpr int kRows = 4;

// The same chains in plain C++ (std::fma rounds as the vector instruction does, so the values are
// bit-identical to the AVX-512 kernel's); the compiler vectorises the inner loop over outputs.
template <int R>
void tile_kernel(const Tile& t) {
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

using TileKernel = void (*)(const Tile&);

template <int... R>
constexpr std::array<TileKernel, sizeof...(R)> make_kernels(std::integer_sequence<int, R...>) {
  return {&tile_kernel<R + 1>...};
}
// kernels[r - 1] handles r rows.
constexpr auto kernels = make_kernels(std::make_integer_sequence<int, kRows>());

struct Product {
  const float* a;
  int64_t lda;
  const float* packed;  // panels of k x kPanel floats
  const float* bias;
  float* c;
  int64_t m, k, n;
};

// Rows [m0, m1) of c for panels [p0, p1): depth blocks outside; inside, each tile of input rows
// stays in L1 while it passes over the job's panels.
void run_job(const Product& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  for (int64_t k0 = 0; k0 < g.k; k0 += kDepth) {
    const int64_t depth = std::min(kDepth, g.k - k0);
    const bool first = k0 == 0, last = k0 + depth == g.k;
    for (int64_t r = m0; r < m1; r += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, m1 - r);
      // The tile after this one: the next rows at this depth, or the job's first rows at the next.
      int64_t next_r = r + kRows, next_k0 = k0;
      if (next_r >= m1) next_r = m0, next_k0 = k0 + kDepth;
      if (next_k0 >= g.k) next_r = r, next_k0 = k0;
      const float* next_a = g.a + next_r * g.lda + next_k0;
      const int64_t next_rows = std::min<int64_t>(kRows, m1 - next_r);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t n0 = p * kPanel;
        const float* panel = g.packed + p * kPanel * g.k + k0 * kPanel;
        const float* bias = last && g.bias ? g.bias + n0 : nullptr;
        const Tile tile{g.a + r * g.lda + k0,
                        g.lda,
                        panel,
                        g.c + r * g.n + n0,
                        g.n,
                        depth,
                        std::min(kPanel, g.n - n0),
                        first,
                        bias,
                        next_a,
                        next_rows};
        kernels[size_t(rows - 1)](tile);
      }
    }
  }
}

// The packed weight lives in a buffer kept by the calling thread between products, so a forward's
// products reuse the same pages instead of faulting fresh ones in each time.
float* packing_buffer(size_t floats) {
  struct Buffer {
    std::unique_ptr<float, decltype(&std::free)> data{nullptr, &std::free};
    size_t capacity = 0;
  };
  thread_local Buffer buffer;
  if (buffer.capacity < floats) {
    const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    buffer.data.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    check(buffer.data != nullptr, "linear: out of memory packing a weight of {} floats", floats);
    buffer.capacity = floats;
  }
  return buffer.data.get();
}

}  // namespace

void linear_product(const float* a, int64_t lda, const void* w, DType w_dtype, const float* bias,
                    float* c, int64_t m, int64_t k, int64_t n) {
  // Checked here, outside the parallel region, where an error may still leave as an exception.
  check(w_dtype == DType::F32 || w_dtype == DType::BF16 || w_dtype == DType::F16,
        "linear: weights of type {} are not supported on the CPU", dtype_name(w_dtype));
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) c[r * n + j] = bias ? bias[j] : 0.0f;
    return;
  }
  const int64_t panels = (n + kPanel - 1) / kPanel;
  float* packed = packing_buffer(size_t(panels * kPanel * k));
  const Product g{a, lda, packed, bias, c, m, k, n};
  const int64_t row_jobs = (m + kJobRows - 1) / kJobRows;
  const int64_t panel_jobs = (panels + kJobPanels - 1) / kJobPanels;
  const int64_t jobs = row_jobs * panel_jobs;
  const int threads =
      int(std::min<int64_t>(threads_for(m * n * k, kWorkPerThread), std::max(jobs, panels)));
  // With MMGEN_OP_PROFILE, the packing's share is timed at the barrier that ends it.
  const bool profiling = profile::enabled();
  const auto start =
      profiling ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  auto packed_at = start;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#pragma omp for schedule(static)
    for (int64_t p = 0; p < panels; ++p)
      pack_weight_panel(w, w_dtype, p * kPanel, n, k, packed + p * kPanel * k);
    if (profiling) {
#pragma omp master
      packed_at = std::chrono::steady_clock::now();
    }
    // Consecutive jobs share their panels: the threads sweep one block of outputs together, so it
    // comes from memory once.
#pragma omp for schedule(dynamic, 1)
    for (int64_t job = 0; job < jobs; ++job) {
      const int64_t pj = job / row_jobs, mj = job % row_jobs;
      run_job(g, mj * kJobRows, std::min(m, (mj + 1) * kJobRows), pj * kJobPanels,
              std::min(panels, (pj + 1) * kJobPanels));
    }
  }
  if (profiling)
    profile::add("linear: weight packing",
                 std::chrono::duration_cast<std::chrono::nanoseconds>(packed_at - start).count());
}

}  // namespace mmgen::cpu
