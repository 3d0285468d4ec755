#include "attention/block_sparse.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/flash_kernel.h"
#include "core/error.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace mmgen::attention {

namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

void validate_layout(const BlockLayout& layout, int64_t length, const char* what) {
  check(layout.start.size() == layout.length.size(),
        "block-sparse: {} blocks have {} starts but {} lengths", what, layout.start.size(),
        layout.length.size());
  for (int64_t i = 0; i < layout.size(); ++i)
    check(layout.start[size_t(i)] >= 0 && layout.length[size_t(i)] >= 0 &&
              layout.start[size_t(i)] + layout.length[size_t(i)] <= length,
          "block-sparse: {} block {} [{}, +{}) lies outside {} tokens", what, i,
          layout.start[size_t(i)], layout.length[size_t(i)], length);
}

}  // namespace

BlockLayout BlockLayout::uniform(int64_t tokens, int64_t block) {
  check(block > 0, "block size must be positive");
  BlockLayout layout;
  for (int64_t s = 0; s < tokens; s += block) {
    layout.start.push_back(s);
    layout.length.push_back(std::min(block, tokens - s));
  }
  return layout;
}

BlockSparsePattern BlockSparsePattern::dense(BlockLayout q_blocks, BlockLayout kv_blocks) {
  BlockSparsePattern pattern;
  pattern.indptr.push_back(0);
  for (int64_t i = 0; i < q_blocks.size(); ++i) {
    for (int64_t j = 0; j < kv_blocks.size(); ++j) pattern.indices.push_back(int32_t(j));
    pattern.indptr.push_back(int64_t(pattern.indices.size()));
  }
  pattern.q_blocks = std::move(q_blocks);
  pattern.kv_blocks = std::move(kv_blocks);
  return pattern;
}

void BlockSparsePattern::validate(int64_t q_len, int64_t kv_len) const {
  validate_layout(q_blocks, q_len, "query");
  validate_layout(kv_blocks, kv_len, "key");
  check(int64_t(indptr.size()) == q_blocks.size() + 1 && indptr.front() == 0 &&
            indptr.back() == int64_t(indices.size()),
        "block-sparse: indptr must have one entry per query block plus one, from 0 to the list "
        "length");
  for (size_t i = 1; i < indptr.size(); ++i)
    check(indptr[i] >= indptr[i - 1], "block-sparse: indptr decreases at query block {}", i - 1);
  for (int32_t j : indices)
    check(j >= 0 && j < kv_blocks.size(), "block-sparse: key block {} out of range (there are {})",
          j, kv_blocks.size());
}

Tensor block_sparse_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                              float scale, const std::vector<BlockSparsePattern>& patterns,
                              Tensor* lse) {
  const Tensor q = q_in.to(DType::F32), k = k_in.to(DType::F32), v = v_in.to(DType::F32);
  check(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape(),
        "block-sparse: expects [B, S, H, D] tensors");
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), head_dim = q.size(3);
  const int64_t kv_len = k.size(1);
  check(k.size(0) == batch && k.size(2) == heads && k.size(3) == head_dim,
        "block-sparse: q {} and k {} differ", shape_string(q.shape()), shape_string(k.shape()));
  const int64_t count = int64_t(patterns.size());
  check(count == 1 || count == heads || count == batch * heads,
        "block-sparse: {} patterns for {} batches x {} heads (give 1, H or B*H)", count, batch,
        heads);
  for (const auto& pattern : patterns) pattern.validate(q_len, kv_len);

  const int64_t q_blocks = patterns[0].q_blocks.size();
  for (const auto& pattern : patterns)
    check(pattern.q_blocks.size() == q_blocks,
          "block-sparse: every pattern must have the same number of query blocks");

  Tensor out = Tensor::zeros({batch, q_len, heads, head_dim});
  if (lse) *lse = Tensor::full({batch, heads, q_len}, kNegativeInfinity);
  flash::run_block_sparse(q.data<float>(), k.data<float>(), v.data<float>(), batch, q_len, kv_len,
                          heads, head_dim, scale, patterns, out.data<float>(),
                          lse ? lse->data<float>() : nullptr);
  return out;
}

namespace {

// Query rows per task of the gathered kernel and keys per gathered chunk: a [64, 512] score tile
// (128 KB) and a 512-key chunk of keys and values (256 KB at D 64) stay in L2.
constexpr int64_t kGatherRows = 64;
constexpr int64_t kGatherChunk = 512;
// Exponents (base 2) below this give exactly 0, so no denormal reaches P·V.
constexpr float kExp2Floor = -125.0f;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMap = Eigen::Map<RowMatrix>;

#if defined(__AVX512F__)
// 2^x for x <= 0 as the flash kernel computes it: 2^round(x) through the exponent bits times a
// degree-7 polynomial of 2^f on [-1/2, 1/2]; exactly 0 below kExp2Floor.
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
#endif

// Largest of s[0..n).
float row_max(const float* s, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
#if defined(__AVX512F__)
  if (n >= 16) {
    __m512 v = _mm512_loadu_ps(s);
    for (j = 16; j + 16 <= n; j += 16) v = _mm512_max_ps(v, _mm512_loadu_ps(s + j));
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    for (float lane : lanes) m = std::max(m, lane);
  }
#endif
  for (; j < n; ++j) m = std::max(m, s[j]);
  return m;
}

// s[j] := 2^(s[j] − shift) for j < n (0 below the floor); returns their sum.
float exp2_row(float* s, int64_t n, float shift) {
  float sum = 0;
  int64_t j = 0;
#if defined(__AVX512F__)
  const __m512 vshift = _mm512_set1_ps(shift);
  __m512 vsum = _mm512_setzero_ps();
  for (; j + 16 <= n; j += 16) {
    const __m512 e = exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(s + j), vshift));
    _mm512_storeu_ps(s + j, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  if (j < n) {
    const __mmask16 mask = __mmask16((1u << (n - j)) - 1u);
    const __m512 e = _mm512_maskz_mov_ps(
        mask, exp2_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), vshift)));
    _mm512_mask_storeu_ps(s + j, mask, e);
    vsum = _mm512_add_ps(vsum, e);
    j = n;
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, vsum);
  for (float lane : lanes) sum += lane;
#endif
  for (; j < n; ++j) {
    const float x = s[j] - shift;
    s[j] = x < kExp2Floor ? 0.0f : std::exp2(x);
    sum += s[j];
  }
  return sum;
}

struct GatherTask {
  int64_t bh, q_block, first, rows;  // rows [first, first + rows) of the query block
};

// Per-thread buffers, sized for the largest task once (Eigen maps view them at each task's size).
struct GatherWorkspace {
  std::vector<float> queries, keys, values, scores, acc, running_max, running_sum;
};

// One task: `rows` query tokens of one query block against the keys of its list, gathered into
// chunks of up to kGatherChunk keys; online softmax across chunks (base 2).
void attend_gathered(const float* q, const float* k, const float* v, int64_t q_len, int64_t kv_len,
                     int64_t heads, int64_t dim, float scale, const BlockSparsePattern& pattern,
                     const int64_t* q_order, const int64_t* k_order, const GatherTask& task,
                     float* out, float* lse, GatherWorkspace& ws) {
  const int64_t b = task.bh / heads, h = task.bh % heads, row = heads * dim, rows = task.rows;
  const int64_t q_base = pattern.q_blocks.start[size_t(task.q_block)] + task.first;
  auto q_token = [&](int64_t i) { return q_order ? q_order[q_base + i] : q_base + i; };
  const float* q_head = q + b * q_len * row + h * dim;
  const float* k_head = k + b * kv_len * row + h * dim;
  const float* v_head = v + b * kv_len * row + h * dim;
  ws.queries.resize(size_t(rows * dim));
  ws.keys.resize(size_t(kGatherChunk * dim));
  ws.values.resize(size_t(kGatherChunk * dim));
  ws.scores.resize(size_t(rows * kGatherChunk));
  ws.acc.assign(size_t(rows * dim), 0.0f);
  ws.running_max.assign(size_t(rows), -std::numeric_limits<float>::infinity());
  ws.running_sum.assign(size_t(rows), 0.0f);
  const float factor = scale * kLog2e;
  for (int64_t i = 0; i < rows; ++i) {
    const float* src = q_head + q_token(i) * row;
    float* dst = ws.queries.data() + i * dim;
    for (int64_t d = 0; d < dim; ++d) dst[d] = src[d] * factor;
  }
  const RowMap queries(ws.queries.data(), rows, dim);
  RowMap acc(ws.acc.data(), rows, dim);

  int64_t filled = 0;
  auto flush = [&]() {
    if (filled == 0) return;
    RowMap scores(ws.scores.data(), rows, filled);
    scores.noalias() = queries * RowMap(ws.keys.data(), filled, dim).transpose();
    for (int64_t i = 0; i < rows; ++i) {
      float* s = ws.scores.data() + i * filled;
      const float old_max = ws.running_max[size_t(i)];
      const float new_max = std::max(old_max, row_max(s, filled));
      const float correction =
          old_max == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp2(old_max - new_max);
      const float sum = exp2_row(s, filled, new_max);
      ws.running_sum[size_t(i)] = ws.running_sum[size_t(i)] * correction + sum;
      ws.running_max[size_t(i)] = new_max;
      if (correction != 1.0f) acc.row(i) *= correction;
    }
    acc.noalias() += scores * RowMap(ws.values.data(), filled, dim);
    filled = 0;
  };
  const size_t bytes = size_t(dim) * sizeof(float);
  for (int64_t e = pattern.indptr[size_t(task.q_block)];
       e < pattern.indptr[size_t(task.q_block) + 1]; ++e) {
    const int32_t block = pattern.indices[size_t(e)];
    const int64_t start = pattern.kv_blocks.start[size_t(block)],
                  length = pattern.kv_blocks.length[size_t(block)];
    for (int64_t t = 0; t < length; ++t) {
      const int64_t token = k_order ? k_order[start + t] : start + t;
      std::memcpy(ws.keys.data() + filled * dim, k_head + token * row, bytes);
      std::memcpy(ws.values.data() + filled * dim, v_head + token * row, bytes);
      if (++filled == kGatherChunk) flush();
    }
  }
  flush();
  for (int64_t i = 0; i < rows; ++i) {
    const float total = ws.running_sum[size_t(i)];
    if (total <= 0) continue;  // no keys: zeros and −inf stay
    const int64_t token = q_token(i);
    float* o = out + (b * q_len + token) * row + h * dim;
    const float inverse = 1.0f / total;
    const float* a = ws.acc.data() + i * dim;  // acc maps this buffer
    for (int64_t d = 0; d < dim; ++d) o[d] = a[d] * inverse;
    if (lse) lse[task.bh * q_len + token] = ws.running_max[size_t(i)] * kLn2 + std::log(total);
  }
}

}  // namespace

Tensor gathered_block_sparse_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                       float scale, const std::vector<BlockSparsePattern>& patterns,
                                       const std::vector<std::vector<int64_t>>* q_orders,
                                       const std::vector<std::vector<int64_t>>* k_orders,
                                       Tensor* lse) {
  const Tensor q = q_in.to(DType::F32).contiguous(), k = k_in.to(DType::F32).contiguous(),
               v = v_in.to(DType::F32).contiguous();
  check(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape(),
        "block-sparse: expects [B, S, H, D] tensors");
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), head_dim = q.size(3);
  const int64_t kv_len = k.size(1);
  check(k.size(0) == batch && k.size(2) == heads && k.size(3) == head_dim,
        "block-sparse: q {} and k {} differ", shape_string(q.shape()), shape_string(k.shape()));
  const int64_t count = int64_t(patterns.size());
  check(count == 1 || count == heads || count == batch * heads,
        "block-sparse: {} patterns for {} batches x {} heads (give 1, H or B*H)", count, batch,
        heads);
  for (const auto& pattern : patterns) pattern.validate(q_len, kv_len);
  auto check_orders = [&](const std::vector<std::vector<int64_t>>* orders, int64_t length,
                          const char* what) {
    if (!orders) return;
    check(int64_t(orders->size()) == count, "block-sparse: {} {} orders for {} patterns",
          orders->size(), what, count);
    for (const auto& order : *orders) {
      check(order.empty() || int64_t(order.size()) == length,
            "block-sparse: a {} order of {} tokens for {} tokens", what, order.size(), length);
      for (int64_t token : order)
        check(token >= 0 && token < length, "block-sparse: {} order names token {} of {}", what,
              token, length);
    }
  };
  check_orders(q_orders, q_len, "query");
  check_orders(k_orders, kv_len, "key");

  Tensor out = Tensor::zeros({batch, q_len, heads, head_dim});
  if (lse) *lse = Tensor::full({batch, heads, q_len}, kNegativeInfinity);
  if (batch * heads * q_len * kv_len * head_dim == 0) return out;
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
      // Even row tiles of at most kGatherRows (a 70-row cluster is 35 + 35, not 64 + 6).
      const int64_t tiles = (length + kGatherRows - 1) / kGatherRows;
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t first = length * t / tiles, last = length * (t + 1) / tiles;
        tasks.push_back({bh, qb, first, last - first});
      }
    }
  }
  const float* qd = q.data<float>();
  const float* kd = k.data<float>();
  const float* vd = v.data<float>();
  float* od = out.data<float>();
  float* ld = lse ? lse->data<float>() : nullptr;
#pragma omp parallel if (flops > double(1 << 18))
  {
    GatherWorkspace ws;
#pragma omp for schedule(dynamic)
    for (size_t n = 0; n < tasks.size(); ++n) {
      const GatherTask& task = tasks[n];
      const size_t p = pattern_of(task.bh);
      const int64_t* qo = q_orders && !(*q_orders)[p].empty() ? (*q_orders)[p].data() : nullptr;
      const int64_t* ko = k_orders && !(*k_orders)[p].empty() ? (*k_orders)[p].data() : nullptr;
      attend_gathered(qd, kd, vd, q_len, kv_len, heads, head_dim, scale, patterns[p], qo, ko, task,
                      od, ld, ws);
    }
  }
  return out;
}

void merge_by_lse(Tensor& out_a, Tensor& lse_a, const Tensor& out_b, const Tensor& lse_b) {
  check(out_a.shape() == out_b.shape() && lse_a.shape() == lse_b.shape(),
        "merge_by_lse: shapes differ");
  const int64_t batch = out_a.size(0), q_len = out_a.size(1), heads = out_a.size(2),
                head_dim = out_a.size(3);
  float* oa = out_a.data<float>();
  const float* ob = out_b.data<float>();
  float* la = lse_a.data<float>();
  const float* lb = lse_b.data<float>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < q_len; ++i) {
        const int64_t l = (b * heads + h) * q_len + i;
        const float m = std::max(la[l], lb[l]);
        if (m == kNegativeInfinity) continue;
        const float wa = std::exp(la[l] - m), wb = std::exp(lb[l] - m);
        float* a = oa + ((b * q_len + i) * heads + h) * head_dim;
        const float* c = ob + ((b * q_len + i) * heads + h) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) a[d] = (wa * a[d] + wb * c[d]) / (wa + wb);
        la[l] = m + std::log(wa + wb);
      }
}

Tensor gather_tokens(const Tensor& x_in, const std::vector<int64_t>& index) {
  const Tensor x = x_in.contiguous();
  const int64_t batch = x.size(0), length = x.size(1),
                row = x.numel() / std::max<int64_t>(1, batch * length);
  Tensor out = Tensor::empty({batch, int64_t(index.size()), x.size(2), x.size(3)}, x.dtype());
  const size_t bytes = size_t(row) * dtype_size(x.dtype());
  for (int64_t b = 0; b < batch; ++b)
    for (size_t i = 0; i < index.size(); ++i) {
      check(index[i] >= 0 && index[i] < length, "gather_tokens: index {} outside {} tokens",
            index[i], length);
      std::memcpy(out.raw() + (b * int64_t(index.size()) + int64_t(i)) * int64_t(bytes),
                  x.raw() + (b * length + index[i]) * int64_t(bytes), bytes);
    }
  return out;
}

Tensor scatter_tokens(const Tensor& x_in, const std::vector<int64_t>& index, int64_t length) {
  const Tensor x = x_in.contiguous();
  const int64_t batch = x.size(0), count = x.size(1),
                row = x.numel() / std::max<int64_t>(1, batch * count);
  check(count == int64_t(index.size()), "scatter_tokens: {} tokens for {} indices", count,
        index.size());
  Tensor out = Tensor::zeros({batch, length, x.size(2), x.size(3)}, x.dtype());
  const size_t bytes = size_t(row) * dtype_size(x.dtype());
  for (int64_t b = 0; b < batch; ++b)
    for (size_t i = 0; i < index.size(); ++i) {
      check(index[i] >= 0 && index[i] < length, "scatter_tokens: index {} outside {} tokens",
            index[i], length);
      std::memcpy(out.raw() + (b * length + index[i]) * int64_t(bytes),
                  x.raw() + (b * count + int64_t(i)) * int64_t(bytes), bytes);
    }
  return out;
}

}  // namespace mmgen::attention
