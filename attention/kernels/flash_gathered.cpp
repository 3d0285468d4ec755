// The flash kernel with the token reorder folded in (gathered_block_sparse_attention's engine):
// each query tile's selected keys are gathered through the key order, whatever blocks they come
// from, straight into the micro-kernel's panel layout, kChunk keys at a time. Sparse VideoGen 2's
// clusters of ~16 keys thus cost what large blocks do: one softmax rescale per 128 keys, and no
// packed copy of the whole reordered k and v.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "attention/kernels/flash_kernel.h"
#include "attention/kernels/flash_ops.h"

namespace mmgen::attention::flash {

namespace {

using namespace detail;

// Query rows per task: every task gathers its keys once, so more rows spread that copy over more
// products; 192 rows' queries, scores and accumulator (3 · 192 · 128 floats at D 128) still fit L2.
constexpr int64_t kGatherRows = 192;

struct GatherTask {
  int64_t bh, q_block, first, rows;  // rows [first, first + rows) of the query block
};

struct GatherWorkspace {
  TileBuffers tile;
  AlignedBuffer keys, values;  // one chunk of gathered keys in panel layout
};

struct GatherArgs {
  const float *q, *k, *v;
  int64_t q_len, kv_len, heads, dim, padded_dim;
  float scale;
  const BlockSparsePattern* pattern;
  const int64_t *q_order, *k_order;  // null: the identity
  float* out;
  float* lse;  // may be null
};

#ifdef MMGEN_FLASH_AVX512
// Transposes the 16 x 16 block in r (r[i] row i) in registers: unpack pairs of rows, shuffle to
// 4 x 4 blocks per 128-bit lane, then move the lanes across registers.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m512 u[16];  // u[4g + j], lane L: element 4L + j of rows 4g .. 4g + 3
  for (int g = 0; g < 4; ++g) {
    u[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(3, 2, 3, 2));
    r[j] = _mm512_shuffle_f32x4(v0, w0, _MM_SHUFFLE(2, 0, 2, 0));
    r[4 + j] = _mm512_shuffle_f32x4(v0, w0, _MM_SHUFFLE(3, 1, 3, 1));
    r[8 + j] = _mm512_shuffle_f32x4(v1, w1, _MM_SHUFFLE(2, 0, 2, 0));
    r[12 + j] = _mm512_shuffle_f32x4(v1, w1, _MM_SHUFFLE(3, 1, 3, 1));
  }
}
#endif

// Packs `count` (<= 16) gathered tokens into one key panel (element (d, t) at d·16 + t) and 16
// rows of each value panel (value panel q at values + q·value_stride); slots from `count` on are
// zeros, as are the columns from dim to padded_dim.
template <typename Ops>
void pack_panel(const float* const* key_rows, const float* const* value_rows, int64_t count,
                int64_t dim, int64_t padded_dim, float* keys, float* values, int64_t value_stride) {
#ifdef MMGEN_FLASH_AVX512
  if constexpr (std::is_same_v<Ops, Avx512Ops>) {
    // Keys: 16 dimensions of the 16 tokens at a time, transposed in registers.
    for (int64_t d0 = 0; d0 < dim; d0 += kPanel) {
      const int64_t width = std::min(kPanel, dim - d0);
      const __mmask16 mask = __mmask16((1u << width) - 1u);
      __m512 r[16];
      for (int64_t t = 0; t < kPanel; ++t)
        r[t] = t < count ? _mm512_maskz_loadu_ps(mask, key_rows[t] + d0) : _mm512_setzero_ps();
      transpose16(r);
      for (int64_t d = 0; d < width; ++d) _mm512_store_ps(keys + (d0 + d) * kPanel, r[d]);
    }
    for (int64_t q = 0; q < padded_dim / kPanel; ++q) {
      const int64_t width = std::min(kPanel, dim - q * kPanel);
      const __mmask16 mask = __mmask16((1u << width) - 1u);
      float* panel = values + q * value_stride;
      for (int64_t t = 0; t < kPanel; ++t)
        _mm512_store_ps(panel + t * kPanel,
                        t < count ? _mm512_maskz_loadu_ps(mask, value_rows[t] + q * kPanel)
                                  : _mm512_setzero_ps());
    }
    return;
  }
#endif
  for (int64_t t = 0; t < kPanel; ++t) {
    for (int64_t d = 0; d < dim; ++d) keys[d * kPanel + t] = t < count ? key_rows[t][d] : 0.0f;
    for (int64_t q = 0; q < padded_dim / kPanel; ++q) {
      float* dst = values + q * value_stride + t * kPanel;
      const int64_t columns = t < count ? std::min(kPanel, dim - q * kPanel) : 0;
      if (columns > 0) std::memcpy(dst, value_rows[t] + q * kPanel, size_t(columns) * 4);
      std::fill(dst + columns, dst + kPanel, 0.0f);
    }
  }
}

template <typename Ops>
void attend_gathered(const GatherArgs& a, const GatherTask& task, GatherWorkspace& ws) {
  const int64_t b = task.bh / a.heads, h = task.bh % a.heads, row = a.heads * a.dim;
  const int64_t rows = task.rows, dim = a.dim, pdim = a.padded_dim;
  const BlockSparsePattern& pattern = *a.pattern;
  const int64_t q_base = pattern.q_blocks.start[size_t(task.q_block)] + task.first;
  auto q_token = [&](int64_t i) { return a.q_order ? a.q_order[q_base + i] : q_base + i; };
  const float* q_head = a.q + b * a.q_len * row + h * dim;
  const float* k_head = a.k + b * a.kv_len * row + h * dim;
  const float* v_head = a.v + b * a.kv_len * row + h * dim;

  TileState state =
      ws.tile.start(rows, dim, pdim, a.scale, [&](int64_t i) { return q_head + q_token(i) * row; });

  // One chunk of gathered keys: key panel p at keys + p·dim·16, value panel q at
  // values + q·kChunk·16 (the layouts of a KeySegment); the chunk's tokens are collected first
  // and packed 16 at a time.
  float* keys = ws.keys.get(kChunk * dim);
  float* values = ws.values.get(kChunk * pdim);
  const int64_t value_stride = kChunk * kPanel;
  const float* key_rows[kChunk];
  const float* value_rows[kChunk];
  int64_t filled = 0;
  auto flush = [&]() {
    if (filled == 0) return;
    // The padding of the last panel is zeros: its weights are zeroed, and 0 · NaN would be NaN.
    for (int64_t p = 0; p < round_up(filled, kPanel) / kPanel; ++p)
      pack_panel<Ops>(key_rows + p * kPanel, value_rows + p * kPanel,
                      std::min(kPanel, filled - p * kPanel), dim, pdim, keys + p * dim * kPanel,
                      values + p * kPanel * kPanel, value_stride);
    const KeySegment chunk{keys, values, value_stride, filled};
    attend_segments<Ops>(state, &chunk, 1);
    filled = 0;
  };
  for (int64_t e = pattern.indptr[size_t(task.q_block)];
       e < pattern.indptr[size_t(task.q_block) + 1]; ++e) {
    const int32_t block = pattern.indices[size_t(e)];
    const int64_t start = pattern.kv_blocks.start[size_t(block)],
                  length = pattern.kv_blocks.length[size_t(block)];
    for (int64_t t = 0; t < length; ++t) {
      const int64_t token = a.k_order ? a.k_order[start + t] : start + t;
      key_rows[filled] = k_head + token * row;
      value_rows[filled] = v_head + token * row;
      if (++filled == kChunk) flush();
    }
  }
  flush();
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t token = q_token(i);
    finish_row(state, i, a.out + (b * a.q_len + token) * row + h * dim,
               a.lse ? a.lse + task.bh * a.q_len + token : nullptr);
  }
}

template <typename Ops>
void run(const float* q, const float* k, const float* v, int64_t batch, int64_t q_len,
         int64_t kv_len, int64_t heads, int64_t head_dim, float scale,
         const std::vector<BlockSparsePattern>& patterns,
         const std::vector<const int64_t*>& q_orders, const std::vector<const int64_t*>& k_orders,
         float* out, float* lse) {
  const int64_t count = int64_t(patterns.size());
  auto pattern_of = [&](int64_t bh) {
    return size_t(count == 1 ? 0 : count == heads ? bh % heads : bh);
  };
  std::vector<GatherTask> tasks;
  double flops = 0;
  for (int64_t bh = 0; bh < batch * heads; ++bh) {
    const BlockSparsePattern& pattern = patterns[pattern_of(bh)];
    for (int64_t qb = 0; qb < pattern.q_blocks.size(); ++qb) {
      const int64_t length = pattern.q_blocks.length[size_t(qb)];
      int64_t keys = 0;
      for (int64_t e = pattern.indptr[size_t(qb)]; e < pattern.indptr[size_t(qb) + 1]; ++e)
        keys += pattern.kv_blocks.length[size_t(pattern.indices[size_t(e)])];
      if (keys == 0) continue;
      flops += double(length) * double(keys) * double(head_dim);
      // Even row tiles of at most kGatherRows (200 rows are 100 + 100, not 192 + 8).
      const int64_t tiles = (length + kGatherRows - 1) / kGatherRows;
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t first = length * t / tiles, last = length * (t + 1) / tiles;
        tasks.push_back({bh, qb, first, last - first});
      }
    }
  }
#pragma omp parallel if (flops > double(1 << 18))
  {
    GatherWorkspace ws;
#pragma omp for schedule(dynamic)
    for (size_t n = 0; n < tasks.size(); ++n) {
      const GatherTask& task = tasks[n];
      const size_t p = pattern_of(task.bh);
      const GatherArgs args{q,
                            k,
                            v,
                            q_len,
                            kv_len,
                            heads,
                            head_dim,
                            round_up(head_dim, kPanel),
                            scale,
                            &patterns[p],
                            q_orders.empty() ? nullptr : q_orders[p],
                            k_orders.empty() ? nullptr : k_orders[p],
                            out,
                            lse};
      attend_gathered<Ops>(args, task, ws);
    }
  }
}

}  // namespace

void run_gathered(const float* q, const float* k, const float* v, int64_t batch, int64_t q_len,
                  int64_t kv_len, int64_t heads, int64_t head_dim, float scale,
                  const std::vector<BlockSparsePattern>& patterns,
                  const std::vector<const int64_t*>& q_orders,
                  const std::vector<const int64_t*>& k_orders, float* out, float* lse,
                  KernelPath path) {
  if (batch * heads * q_len * kv_len * head_dim == 0 || patterns.empty()) return;
  with_kernel_path(path, [&](auto ops) {
    run<decltype(ops)>(q, k, v, batch, q_len, kv_len, heads, head_dim, scale, patterns, q_orders,
                       k_orders, out, lse);
  });
}

}  // namespace mmgen::attention::flash
