#include "attention/flash_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "core/error.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MMGEN_FLASH_AVX2 1
// AVX-512: a 16-key panel is one register, so the micro-kernel holds 12 rows' accumulators
// (12 of 32 registers) where AVX2 holds 6 rows' in two registers each.
#if defined(__AVX512F__)
#define MMGEN_FLASH_AVX512 1
#endif
#endif

namespace mmgen::attention::flash {

namespace {

// Query rows per tile: a multiple of the micro-kernel's 6 rows, small enough that the tile's
// queries, scores and accumulator (3 · 48 · D floats) stay in L2 next to one key chunk.
constexpr int64_t kTileRows = 48;
// Keys per chunk of the online softmax: a 128 x D key chunk and its value panels stay cache
// resident while all the tile's rows use them.
constexpr int64_t kChunk = 128;
// Keys (and value columns) per micro-kernel panel: two 8-float AVX registers.
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

int64_t round_up(int64_t value, int64_t multiple) {
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

float horizontal_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
#endif

// The operations one tile needs, in a portable and (when compiled in) an AVX2 flavour.
struct PortableOps {
  static constexpr int64_t kRows = 6;
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
      alignas(32) float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t t = j; t < n; ++t) tail[t - j] = s[t] - shift;
      const __m256 mask = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
          _mm256_set1_epi32(int(n - j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
      const __m256 e = _mm256_and_ps(exp2_avx2(_mm256_load_ps(tail)), mask);
      _mm256_store_ps(tail, e);
      for (int64_t t = j; t < n; ++t) s[t] = tail[t - j];
      vsum = _mm256_add_ps(vsum, e);
    }
    return horizontal_sum(vsum);
  }
};
#endif

#ifdef MMGEN_FLASH_AVX512
// AVX-512 products; the softmax row operations stay AVX2 (a small share of the time).
struct Avx512Ops : Avx2Ops {
  static constexpr int64_t kRows = 12;
  template <int M>
  static void micro(const float* a, int64_t lda, const float* b, int64_t k, float* c, int64_t ldc,
                    bool accumulate) {
    micro_avx512<M>(a, lda, b, k, c, ldc, accumulate);
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

// ----------------------------------------------------------------------------- packing

// Where each key block of a pattern lives in a (batch, head)'s packed slab. Block j of L tokens
// (Lp = L rounded up to 16) holds
//   keys:   Lp/16 panels of [D][16]: panel p, element (d, t) = k[start + 16p + t][d];
//   values: Dp/16 panels of [Lp][16]: panel q, element (r, c) = v[start + r][16q + c];
// zero where t, r ≥ L or 16q + c ≥ D.
struct PackedLayout {
  std::vector<int64_t> key_offset, value_offset;
  std::vector<char> used;  // visited by some query block (others are not packed)
  int64_t slab = 0;        // floats per (batch, head)
};

PackedLayout packed_layout(const BlockSparsePattern& pattern, int64_t head_dim,
                           int64_t padded_dim) {
  PackedLayout layout;
  const int64_t blocks = pattern.kv_blocks.size();
  layout.key_offset.resize(size_t(blocks));
  layout.value_offset.resize(size_t(blocks));
  layout.used.assign(size_t(blocks), 0);
  for (int32_t j : pattern.indices) layout.used[size_t(j)] = 1;
  for (int64_t j = 0; j < blocks; ++j) {
    const int64_t padded = round_up(pattern.kv_blocks.length[size_t(j)], kPanel);
    layout.key_offset[size_t(j)] = layout.slab;
    layout.value_offset[size_t(j)] = layout.slab + padded * head_dim;
    layout.slab += padded * (head_dim + padded_dim);
  }
  return layout;
}

// Packs key block `j` of one (batch, head); `k` and `v` point at its token 0, rows `row` apart.
void pack_block(const float* k, const float* v, int64_t row, int64_t start, int64_t length,
                int64_t head_dim, int64_t padded_dim, float* keys, float* values) {
  const int64_t padded = round_up(length, kPanel);
  for (int64_t p = 0; p < padded / kPanel; ++p) {
    float* panel = keys + p * head_dim * kPanel;
    for (int64_t t = 0; t < kPanel; ++t) {
      const int64_t token = p * kPanel + t;
      if (token < length) {
        const float* src = k + (start + token) * row;
        for (int64_t d = 0; d < head_dim; ++d) panel[d * kPanel + t] = src[d];
      } else {
        for (int64_t d = 0; d < head_dim; ++d) panel[d * kPanel + t] = 0.0f;
      }
    }
  }
  for (int64_t q = 0; q < padded_dim / kPanel; ++q) {
    float* panel = values + q * padded * kPanel;
    const int64_t columns = std::min(kPanel, head_dim - q * kPanel);
    for (int64_t r = 0; r < padded; ++r) {
      float* dst = panel + r * kPanel;
      if (r < length) {
        const float* src = v + (start + r) * row + q * kPanel;
        std::memcpy(dst, src, size_t(columns) * sizeof(float));
        std::fill(dst + columns, dst + kPanel, 0.0f);
      } else {
        std::fill(dst, dst + kPanel, 0.0f);
      }
    }
  }
}

// ----------------------------------------------------------------------------- one query tile

struct Workspace {
  AlignedBuffer queries, scores, accumulator;
  std::vector<float> running_max, running_sum;
};

struct TileArgs {
  const float* q;  // first query row of the tile, rows `row` apart
  int64_t row;
  int64_t rows;
  int64_t head_dim, padded_dim;
  float scale;
  const BlockSparsePattern* pattern;
  const PackedLayout* layout;
  const float* slab;  // this (batch, head)'s packed keys and values
  const int32_t* list;
  int64_t list_length;
  float* out;  // first output row, rows `row` apart
  float* lse;  // first LSE entry (contiguous over rows); may be null
};

template <typename Ops>
void attend_tile(const TileArgs& t, Workspace& ws) {
  const int64_t rows = t.rows, dim = t.head_dim, pdim = t.padded_dim;
  // Queries scaled by scale·log2(e) so the softmax works in base 2 (exp2 is the cheap one).
  float* queries = ws.queries.get(rows * dim);
  const float factor = t.scale * kLog2e;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t d = 0; d < dim; ++d) queries[i * dim + d] = t.q[i * t.row + d] * factor;
  float* scores = ws.scores.get(rows * kChunk);
  float* acc = ws.accumulator.get(rows * pdim);
  std::fill(acc, acc + rows * pdim, 0.0f);
  ws.running_max.assign(size_t(rows), kNegativeInfinity);
  ws.running_sum.assign(size_t(rows), 0.0f);
  float* running_max = ws.running_max.data();
  float* running_sum = ws.running_sum.data();

  for (int64_t e = 0; e < t.list_length; ++e) {
    const int32_t block = t.list[e];
    const int64_t length = t.pattern->kv_blocks.length[size_t(block)];
    const int64_t padded_length = round_up(length, kPanel);
    const float* keys = t.slab + t.layout->key_offset[size_t(block)];
    const float* values = t.slab + t.layout->value_offset[size_t(block)];
    for (int64_t c0 = 0; c0 < length; c0 += kChunk) {
      const int64_t width = std::min(kChunk, length - c0), padded = round_up(width, kPanel);
      // scores[rows x padded] = queries · keysᵀ, one 16-key panel at a time.
      for (int64_t p = 0; p < padded / kPanel; ++p) {
        const float* panel = keys + (c0 / kPanel + p) * dim * kPanel;
        for (int64_t i = 0; i < rows; i += Ops::kRows)
          micro_rows<Ops>(std::min(Ops::kRows, rows - i), queries + i * dim, dim, panel, dim,
                          scores + i * padded + p * kPanel, padded, false);
      }
      // Online softmax: new running max, rescale what was accumulated, exponentiate.
      for (int64_t i = 0; i < rows; ++i) {
        float* s = scores + i * padded;
        const float new_max = std::max(running_max[i], Ops::row_max(s, width));
        const float correction =
            running_max[i] == kNegativeInfinity ? 0.0f : std::exp2(running_max[i] - new_max);
        const float sum = Ops::exp2_row(s, width, new_max);
        std::fill(s + width, s + padded, 0.0f);
        running_sum[i] = running_sum[i] * correction + sum;
        if (correction != 1.0f) {
          float* a = acc + i * pdim;
          for (int64_t d = 0; d < pdim; ++d) a[d] *= correction;
        }
        running_max[i] = new_max;
      }
      // acc[rows x Dp] += P · values, one 16-column value panel at a time.
      for (int64_t q = 0; q < pdim / kPanel; ++q) {
        const float* panel = values + q * padded_length * kPanel + c0 * kPanel;
        for (int64_t i = 0; i < rows; i += Ops::kRows)
          micro_rows<Ops>(std::min(Ops::kRows, rows - i), scores + i * padded, padded, panel,
                          padded, acc + i * pdim + q * kPanel, pdim, true);
      }
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    if (running_sum[i] <= 0) continue;  // empty list: zeros and −inf stay
    const float inverse = 1.0f / running_sum[i];
    float* o = t.out + i * t.row;
    const float* a = acc + i * pdim;
    for (int64_t d = 0; d < dim; ++d) o[d] = a[d] * inverse;
    if (t.lse) t.lse[i] = running_max[i] * kLn2 + std::log(running_sum[i]);
  }
}

// One unit of parallel work: `rows` query rows from `first` of query block `q_block`.
struct Task {
  int64_t q_block;
  int64_t first;
  int64_t rows;
};

template <typename Ops>
void run(const float* q, const float* k, const float* v, int64_t batch, int64_t q_len,
         int64_t kv_len, int64_t heads, int64_t head_dim, float scale,
         const std::vector<BlockSparsePattern>& patterns, float* out, float* lse) {
  const int64_t count = int64_t(patterns.size());
  const int64_t padded_dim = round_up(head_dim, kPanel), row = heads * head_dim;
  auto pattern_of = [&](int64_t bh) {
    return size_t(count == 1 ? 0 : count == heads ? bh % heads : bh);
  };

  std::vector<PackedLayout> layouts;
  std::vector<std::vector<Task>> tasks(static_cast<size_t>(count));
  for (int64_t p = 0; p < count; ++p) {
    const BlockSparsePattern& pattern = patterns[size_t(p)];
    layouts.push_back(packed_layout(pattern, head_dim, padded_dim));
    for (int64_t qb = 0; qb < pattern.q_blocks.size(); ++qb) {
      if (pattern.indptr[size_t(qb)] == pattern.indptr[size_t(qb) + 1]) continue;
      const int64_t start = pattern.q_blocks.start[size_t(qb)],
                    length = pattern.q_blocks.length[size_t(qb)];
      for (int64_t i = 0; i < length; i += kTileRows)
        tasks[size_t(p)].push_back({qb, start + i, std::min(kTileRows, length - i)});
    }
  }

  // Heads in groups whose packed keys and values fit the budget.
  AlignedBuffer packed;
  const int64_t pairs = batch * heads;
  for (int64_t g0 = 0; g0 < pairs;) {
    std::vector<int64_t> slab_start = {0};
    int64_t g1 = g0;
    while (g1 < pairs &&
           (g1 == g0 || slab_start.back() + layouts[pattern_of(g1)].slab <= kPackBudget)) {
      slab_start.push_back(slab_start.back() + layouts[pattern_of(g1)].slab);
      ++g1;
    }
    float* slabs = packed.get(slab_start.back());

    std::vector<std::pair<int64_t, int64_t>> pack_jobs;  // (bh, key block)
    std::vector<std::pair<int64_t, size_t>> work;        // (bh, task)
    double flops = 0;
    for (int64_t bh = g0; bh < g1; ++bh) {
      const size_t p = pattern_of(bh);
      for (int64_t j = 0; j < int64_t(layouts[p].used.size()); ++j)
        if (layouts[p].used[size_t(j)]) pack_jobs.emplace_back(bh, j);
      for (size_t t = 0; t < tasks[p].size(); ++t) work.emplace_back(bh, t);
      flops += double(patterns[p].visited()) * double(kv_len) /
               double(std::max<int64_t>(1, patterns[p].kv_blocks.size())) * double(q_len) *
               double(head_dim);
    }
    const bool parallel = flops > double(1 << 18);

#pragma omp parallel for schedule(dynamic) if (parallel)
    for (size_t n = 0; n < pack_jobs.size(); ++n) {
      const auto [bh, j] = pack_jobs[n];
      const int64_t b = bh / heads, h = bh % heads;
      const size_t p = pattern_of(bh);
      const BlockLayout& blocks = patterns[p].kv_blocks;
      float* slab = slabs + slab_start[size_t(bh - g0)];
      const int64_t offset = b * kv_len * row + h * head_dim;
      pack_block(k + offset, v + offset, row, blocks.start[size_t(j)], blocks.length[size_t(j)],
                 head_dim, padded_dim, slab + layouts[p].key_offset[size_t(j)],
                 slab + layouts[p].value_offset[size_t(j)]);
    }

#pragma omp parallel if (parallel)
    {
      Workspace ws;
#pragma omp for schedule(dynamic)
      for (size_t n = 0; n < work.size(); ++n) {
        const auto [bh, t] = work[n];
        const int64_t b = bh / heads, h = bh % heads;
        const size_t p = pattern_of(bh);
        const BlockSparsePattern& pattern = patterns[p];
        const Task& task = tasks[p][t];
        TileArgs args;
        args.q = q + (b * q_len + task.first) * row + h * head_dim;
        args.row = row;
        args.rows = task.rows;
        args.head_dim = head_dim;
        args.padded_dim = padded_dim;
        args.scale = scale;
        args.pattern = &pattern;
        args.layout = &layouts[p];
        args.slab = slabs + slab_start[size_t(bh - g0)];
        args.list = pattern.indices.data() + pattern.indptr[size_t(task.q_block)];
        args.list_length =
            pattern.indptr[size_t(task.q_block) + 1] - pattern.indptr[size_t(task.q_block)];
        args.out = out + (b * q_len + task.first) * row + h * head_dim;
        args.lse = lse ? lse + bh * q_len + task.first : nullptr;
        attend_tile<Ops>(args, ws);
      }
    }
    g0 = g1;
  }
}

}  // namespace

bool simd_available() {
#ifdef MMGEN_FLASH_AVX2
  return true;
#else
  return false;
#endif
}

const char* best_kernel_name() {
#if defined(MMGEN_FLASH_AVX512)
  return "AVX-512";
#elif defined(MMGEN_FLASH_AVX2)
  return "AVX2/FMA";
#else
  return "portable C++";
#endif
}

void run_block_sparse(const float* q, const float* k, const float* v, int64_t batch, int64_t q_len,
                      int64_t kv_len, int64_t heads, int64_t head_dim, float scale,
                      const std::vector<BlockSparsePattern>& patterns, float* out, float* lse,
                      KernelPath path) {
  if (batch * heads * q_len * kv_len * head_dim == 0 || patterns.empty()) return;
#ifdef MMGEN_FLASH_AVX512
  if (path == KernelPath::Best)
    return run<Avx512Ops>(q, k, v, batch, q_len, kv_len, heads, head_dim, scale, patterns, out,
                          lse);
#endif
#ifdef MMGEN_FLASH_AVX2
  if (path != KernelPath::Portable)
    return run<Avx2Ops>(q, k, v, batch, q_len, kv_len, heads, head_dim, scale, patterns, out, lse);
#else
  (void)path;
#endif
  run<PortableOps>(q, k, v, batch, q_len, kv_len, heads, head_dim, scale, patterns, out, lse);
}

BlockSparsePattern dense_pattern(int64_t q_len, int64_t kv_len) {
  return BlockSparsePattern::dense(BlockLayout::uniform(q_len, kTileRows),
                                   BlockLayout::uniform(kv_len, kChunk));
}

Tensor flash_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, float scale,
                       Tensor* lse, KernelPath path) {
  const Tensor q = q_in.to(DType::F32), k = k_in.to(DType::F32), v = v_in.to(DType::F32);
  check(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape(),
        "attention: expects q [B, Sq, H, D] and k, v [B, Sk, H, D], got q {} k {} v {}",
        shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()));
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), head_dim = q.size(3);
  const int64_t kv_len = k.size(1);
  check(k.size(0) == batch && k.size(2) == heads && k.size(3) == head_dim,
        "attention: q {} and k {} do not fit together", shape_string(q.shape()),
        shape_string(k.shape()));
  Tensor out = Tensor::zeros({batch, q_len, heads, head_dim});
  if (lse) *lse = Tensor::full({batch, heads, q_len}, kNegativeInfinity);
  const std::vector<BlockSparsePattern> patterns = {dense_pattern(q_len, kv_len)};
  run_block_sparse(q.data<float>(), k.data<float>(), v.data<float>(), batch, q_len, kv_len, heads,
                   head_dim, scale, patterns, out.data<float>(), lse ? lse->data<float>() : nullptr,
                   path);
  return out;
}

}  // namespace mmgen::attention::flash
