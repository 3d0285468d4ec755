#include "attention/paged/tile_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mmgen::attention::paged {

namespace {

using StridedConst = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;

// Pages at least this long are attended in place (FA3's native page loop); shorter pages are
// gathered into blocks first, since a GEMM over a handful of keys costs more than the copy.
constexpr int64_t kInPlacePage = 64;

// Query rows of a tile's GEMMs are padded to a multiple of this (Eigen's GEBP kernel handles
// result columns four at a time and leftovers one at a time, in a different summation order).
constexpr int64_t kRowMultiple = 4;

}  // namespace

VisibleKeys visible_keys(const PagedLayer& layer, const ForwardBatch& batch, int64_t request,
                         bool causal) {
  VisibleKeys visible;
  visible.causal = causal;
  visible.window = layer.sliding_window_size;
  visible.valid_len = batch.valid_len(request);
  return visible;
}

void TileAttention::begin(const float* q, int64_t token_stride, int64_t count, int64_t first_head,
                          int64_t group, int64_t head_dim, int64_t q_pos0,
                          const VisibleKeys& visible, const ScoreBias* bias, float scale,
                          int64_t value_dim) {
  count_ = count;
  group_ = group;
  first_head_ = first_head;
  head_dim_ = head_dim;
  v_dim_ = value_dim < 0 ? head_dim : value_dim;
  q_pos0_ = q_pos0;
  visible_ = visible;
  bias_ = bias;
  scale_ = scale;
  const int64_t rows = count * group;
  const int64_t padded = (rows + kRowMultiple - 1) / kRowMultiple * kRowMultiple;
  q_.resize(padded, head_dim);
  for (int64_t g = 0; g < group; ++g)
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(q_.data() + (g * count + i) * head_dim,
                  q + i * token_stride + (first_head + g) * head_dim,
                  size_t(head_dim) * sizeof(float));
  q_.bottomRows(padded - rows).setZero();
  acc_.setZero(padded, v_dim_);
  max_.assign(size_t(rows), kNegInf);
  sum_.assign(size_t(rows), 0.0);
}

void TileAttention::key_span(int64_t& lo, int64_t& hi) const {
  // Both ends of a query's interval grow with its position.
  int64_t unused;
  visible_.range(q_pos0_, lo, unused);
  visible_.range(q_pos0_ + count_ - 1, unused, hi);
}

template <typename Prepare>
void TileAttention::update(const float* k, const float* v, int64_t stride, int64_t k_pos0,
                           int64_t n, const Prepare& prepare) {
  const int64_t rows = count_ * group_;
  StridedConst keys(k, n, head_dim_, Eigen::OuterStride<>(stride));
  StridedConst values(v, n, v_dim_, Eigen::OuterStride<>(stride));
  scores_.resize(q_.rows(), n);
  scores_.noalias() = q_ * keys.transpose();
  scores_.bottomRows(q_.rows() - rows).setZero();  // the padding rows add nothing
  bool any = false;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r / count_, i = r % count_;
    float* s = scores_.data() + r * n;
    prepare(first_head_ + g, q_pos0_ + i, s);
    float row_max = kNegInf;
    for (int64_t j = 0; j < n; ++j) row_max = std::max(row_max, s[j]);
    if (row_max == kNegInf) {  // nothing visible in this block
      std::fill(s, s + n, 0.0f);
      continue;
    }
    any = true;
    const float new_max = std::max(max_[size_t(r)], row_max);
    const float alpha = std::exp(max_[size_t(r)] - new_max);  // 0 for the first visible block
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - new_max);
      sum += s[j];
    }
    if (alpha != 1.0f) acc_.row(r) *= alpha;
    sum_[size_t(r)] = sum_[size_t(r)] * alpha + sum;
    max_[size_t(r)] = new_max;
  }
  if (any) acc_.noalias() += scores_ * values;
}

void TileAttention::attend(const float* k, const float* v, int64_t stride, int64_t k_pos0,
                           int64_t n) {
  if (row_rule_) {
    attend_custom(k, v, stride, k_pos0, n, *row_rule_);
    return;
  }
  update(k, v, stride, k_pos0, n, [&](int64_t head, int64_t q_pos, float* s) {
    int64_t lo, hi;
    visible_.range(q_pos, lo, hi);
    lo = std::clamp(lo - k_pos0, int64_t(0), n);
    hi = std::clamp(hi - k_pos0, int64_t(0), n);
    if (lo >= hi) {
      std::fill(s, s + n, kNegInf);
      return;
    }
    std::fill(s, s + lo, kNegInf);
    std::fill(s + hi, s + n, kNegInf);
    for (int64_t j = lo; j < hi; ++j) s[j] *= scale_;
    if (bias_) bias_->add(head, q_pos, k_pos0 + lo, hi - lo, s + lo);
  });
}

void TileAttention::attend_custom(const float* k, const float* v, int64_t stride, int64_t k_pos0,
                                  int64_t n, const RowScoreFn& row_rule) {
  update(k, v, stride, k_pos0, n,
         [&](int64_t head, int64_t q_pos, float* s) { row_rule(head, q_pos, k_pos0, n, s); });
}

void TileAttention::attend_run(const KeyRun& run, int64_t kv_head, int64_t block) {
  int64_t lo, hi;
  key_span(lo, hi);
  const int64_t first = std::max(lo, run.pos0), last = std::min(hi, run.pos0 + run.len);
  if (first >= last) return;
  const int64_t head_offset = kv_head * head_dim_;
  // Blocks start on a grid of the run's positions (pos0, pos0 + block, ...), not at the tile's
  // first visible key: a query then meets the same blocks whichever tile it is in.
  const int64_t grid_first = run.pos0 + (first - run.pos0) / block * block;
  if (run.k) {
    for (int64_t start = grid_first; start < last; start += block) {
      const int64_t n = std::min(block, last - start), row = (start - run.pos0) * run.stride;
      if (keep_block_ && !(*keep_block_)(start, n)) continue;
      attend(run.k + row + head_offset, run.v + row + head_offset, run.stride, start, n);
    }
    return;
  }
  if (run.pages && run.page_size >= kInPlacePage) {  // page by page, straight from the pool
    const int64_t p = run.page_size;
    for (int64_t start = first / p * p; start < last;) {
      const int64_t page_end = (start / p + 1) * p, n = std::min(last, page_end) - start;
      const int64_t slot = run.pages[start / p] * p + start % p;
      if (keep_block_ && !(*keep_block_)(start, n)) {
        start += n;
        continue;
      }
      attend(run.pool_k + slot * run.pool_row + head_offset,
             run.pool_v + slot * run.pool_row + head_offset, run.pool_row, start, n);
      start += n;
    }
    return;
  }
  k_scratch_.resize(size_t(block * head_dim_));
  v_scratch_.resize(size_t(block * head_dim_));  // rows head_dim_ apart, as K's (one stride)
  const size_t bytes = size_t(head_dim_) * sizeof(float), v_bytes = size_t(v_dim_) * sizeof(float);
  for (int64_t start = grid_first; start < last; start += block) {
    const int64_t n = std::min(block, last - start);
    if (keep_block_ && !(*keep_block_)(start, n)) continue;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t position = start + j;
      const int64_t slot = run.slots ? run.slots[position - run.pos0]
                                     : run.pages[position / run.page_size] * run.page_size +
                                           position % run.page_size;
      const int64_t offset = slot * run.pool_row + head_offset;
      std::memcpy(k_scratch_.data() + j * head_dim_, run.pool_k + offset, bytes);
      std::memcpy(v_scratch_.data() + j * head_dim_, run.pool_v + offset, v_bytes);
    }
    attend(k_scratch_.data(), v_scratch_.data(), head_dim_, start, n);
  }
}

void TileAttention::finish(float* out, int64_t out_token_stride, float* lse,
                           int64_t lse_token_stride) const {
  for (int64_t r = 0; r < count_ * group_; ++r) {
    const int64_t g = r / count_, i = r % count_, head = first_head_ + g;
    float* dst = out + i * out_token_stride + head * v_dim_;
    const double sum = sum_[size_t(r)];
    if (sum == 0) {
      std::fill(dst, dst + v_dim_, 0.0f);
      if (lse) lse[i * lse_token_stride + head] = kNegInf;
      continue;
    }
    const float inverse = float(1.0 / sum);
    const float* a = acc_.data() + r * v_dim_;
    for (int64_t d = 0; d < v_dim_; ++d) dst[d] = a[d] * inverse;
    if (lse) lse[i * lse_token_stride + head] = max_[size_t(r)] + float(std::log(sum));
  }
}

std::vector<TileTask> make_tile_tasks(const ForwardBatch& batch, const PagedLayer& layer,
                                      int64_t tile_tokens) {
  std::vector<TileTask> tasks;
  for (int64_t r = 0; r < batch.batch_size(); ++r) {
    const int64_t n = batch.extend_seq_lens[size_t(r)],
                  prefix = batch.extend_prefix_lens[size_t(r)];
    // Tiles cover positions [j·tile, (j + 1)·tile): after a cached prefix the first tile is
    // partial, and every query sits in the same tile, with the same keys, as without the cache.
    for (int64_t first = 0, count = 0; first < n; first += count) {
      count = std::min(n - first, tile_tokens - (prefix + first) % tile_tokens);
      for (int64_t h = 0; h < layer.num_kv_heads; ++h) tasks.push_back({r, h, first, count});
    }
  }
  return tasks;
}

void run_tiles(const std::vector<TileTask>& tasks, const float* q, const PagedLayer& layer,
               const ForwardBatch& batch, bool causal, const RunsOf& runs_of, int64_t block,
               float* out, float* lse) {
  const int64_t hq = layer.num_q_heads, d = layer.head_dim, dv = layer.value_dim(),
                group = layer.group();
  const int64_t count = int64_t(tasks.size());
  // A parallel region even for one task: Eigen then never threads a tile's GEMMs itself (its
  // threaded GEMM blocks the sum differently), so a query's result does not depend on the batch.
#pragma omp parallel
  {
    TileAttention tile;
    std::vector<KeyRun> runs;
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < count; ++t) {
      const TileTask& task = tasks[size_t(t)];
      const size_t r = size_t(task.request);
      const int64_t token = batch.extend_start_loc[r] + task.first;
      tile.begin(q + token * hq * d, hq * d, task.count, task.kv_head * group, group, d,
                 batch.extend_prefix_lens[r] + task.first,
                 visible_keys(layer, batch, task.request, causal), layer.bias, layer.scaling, dv);
      runs.clear();
      runs_of(task, runs);
      for (const KeyRun& run : runs) tile.attend_run(run, task.kv_head, block);
      tile.finish(out + token * hq * dv, hq * dv, lse ? lse + token * hq : nullptr, hq);
    }
  }
}

void merge_states(float* out_a, float* lse_a, const float* out_b, const float* lse_b,
                  int64_t tokens, int64_t heads, int64_t head_dim) {
#pragma omp parallel for schedule(static) if (tokens * heads * head_dim >= (1 << 16))
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t i = t * heads + h;
      const float la = lse_a[i], lb = lse_b[i];
      if (lb == kNegInf) continue;
      float* oa = out_a + i * head_dim;
      const float* ob = out_b + i * head_dim;
      if (la == kNegInf) {
        std::memcpy(oa, ob, size_t(head_dim) * sizeof(float));
        lse_a[i] = lb;
        continue;
      }
      const float m = std::max(la, lb);
      const float wa = std::exp(la - m), wb = std::exp(lb - m), inverse = 1.0f / (wa + wb);
      for (int64_t x = 0; x < head_dim; ++x) oa[x] = (wa * oa[x] + wb * ob[x]) * inverse;
      lse_a[i] = m + std::log(wa + wb);
    }
}

}  // namespace mmgen::attention::paged
