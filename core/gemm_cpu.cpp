#include "core/gemm_cpu.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <utility>

#include "core/error.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace mmgen::cpu {
namespace {

// The weight is packed per call into panels of kPanel outputs: panel[k][j] = w[n0 + j][k], so the
// kernel reads one contiguous row of 32 weights per step of k. Packing from bf16 converts as it
// goes, so a bf16 checkpoint is read once per product and never expanded whole.
constexpr int64_t kPanel = 32;
// A kernel call runs kDepth steps of k: its panel block (kDepth x 32 floats, 32 KiB) stays in L1
// while the rows of the job's input block (kJobRows x kDepth floats, 224 KiB) stay in L2.
constexpr int64_t kDepth = 512;
constexpr int64_t kJobRows = 112;
constexpr int64_t kJobPanels = 8;
// Below this many multiply-adds per thread a product runs on fewer threads: starting and joining
// a team costs more than the work it would share (measured on the 16-core host).
constexpr int64_t kWorkPerThread = int64_t(1) << 21;

template <typename Load>
void pack_panel(Load load, int64_t n0, int64_t n, int64_t k, float* panel) {
  const int64_t width = std::min(kPanel, n - n0);
  for (int64_t j = 0; j < width; ++j) {
    const int64_t row = (n0 + j) * k;
    for (int64_t i = 0; i < k; ++i) panel[i * kPanel + j] = load(row + i);
  }
  for (int64_t j = width; j < kPanel; ++j)
    for (int64_t i = 0; i < k; ++i) panel[i * kPanel + j] = 0.0f;
}

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
    case DType::F16: {
      const uint16_t* from = static_cast<const uint16_t*>(w);
      return pack_panel([from](int64_t i) { return f16_to_f32(from[i]); }, n0, n, k, panel);
    }
    default:
      fail("linear: weights of type {} are not supported on the CPU", dtype_name(dtype));
  }
}

// One tile: `rows` rows of c (at most kRows), `width` of the panel's 32 outputs, `depth` steps of k
// starting at the panel block. `first` starts the chains at zero, `bias` (on the last block) is
// added after the sum, as torch's linear does.
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
};

#ifdef __AVX512F__
constexpr int kRows = 14;  // 28 accumulators + 2 panel vectors + 1 broadcast: 31 of 32 registers

template <int R>
void tile_kernel(const Tile& t) {
  const __mmask16 m0 = t.width >= 16 ? __mmask16(0xffff) : __mmask16((1u << t.width) - 1);
  const __mmask16 m1 = t.width >= 32   ? __mmask16(0xffff)
                       : t.width <= 16 ? __mmask16(0)
                                       : __mmask16((1u << (t.width - 16)) - 1);
  __m512 lo[R], hi[R];
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) {
    lo[r] = t.first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, t.c + r * t.ldc);
    hi[r] = t.first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, t.c + r * t.ldc + 16);
  }
  const float* a = t.a;
  const float* p = t.panel;
  for (int64_t i = 0; i < t.depth; ++i, ++a, p += kPanel) {
    const __m512 b0 = _mm512_load_ps(p), b1 = _mm512_load_ps(p + 16);
#pragma GCC unroll 14
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * t.lda]);
      lo[r] = _mm512_fmadd_ps(x, b0, lo[r]);
      hi[r] = _mm512_fmadd_ps(x, b1, hi[r]);
    }
  }
  if (t.bias) {
    const __m512 bias0 = _mm512_maskz_loadu_ps(m0, t.bias),
                 bias1 = _mm512_maskz_loadu_ps(m1, t.bias + 16);
#pragma GCC unroll 14
    for (int r = 0; r < R; ++r) {
      lo[r] = _mm512_add_ps(lo[r], bias0);
      hi[r] = _mm512_add_ps(hi[r], bias1);
    }
  }
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(t.c + r * t.ldc, m0, lo[r]);
    _mm512_mask_storeu_ps(t.c + r * t.ldc + 16, m1, hi[r]);
  }
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
  const float* packed;  // panels of k x 32 floats
  const float* bias;
  float* c;
  int64_t m, k, n;
};

// Rows [m0, m1) of c for panels [p0, p1): depth blocks outside, so a block of panels and a block of
// input rows stay cached while every tile of the job passes over them.
void run_job(const Product& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  for (int64_t k0 = 0; k0 < g.k; k0 += kDepth) {
    const int64_t depth = std::min(kDepth, g.k - k0);
    const bool first = k0 == 0, last = k0 + depth == g.k;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n0 = p * kPanel;
      const float* panel = g.packed + p * kPanel * g.k + k0 * kPanel;
      const float* bias = last && g.bias ? g.bias + n0 : nullptr;
      for (int64_t r = m0; r < m1; r += kRows) {
        const int64_t rows = std::min<int64_t>(kRows, m1 - r);
        const Tile tile{g.a + r * g.lda + k0,       g.lda, panel, g.c + r * g.n + n0, g.n, depth,
                        std::min(kPanel, g.n - n0), first, bias};
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
  const int64_t work = m * n * k;
  const int threads = int(std::clamp<int64_t>(
      std::min<int64_t>(work / kWorkPerThread, std::max(jobs, panels)), 1, omp_get_max_threads()));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#pragma omp for schedule(static)
    for (int64_t p = 0; p < panels; ++p)
      pack_weight_panel(w, w_dtype, p * kPanel, n, k, packed + p * kPanel * k);
      // Consecutive jobs share their panels: the threads sweep one block of outputs together, so it
      // comes from memory once.
#pragma omp for schedule(dynamic, 1)
    for (int64_t job = 0; job < jobs; ++job) {
      const int64_t pj = job / row_jobs, mj = job % row_jobs;
      run_job(g, mj * kJobRows, std::min(m, (mj + 1) * kJobRows), pj * kJobPanels,
              std::min(panels, (pj + 1) * kJobPanels));
    }
  }
}

}  // namespace mmgen::cpu
