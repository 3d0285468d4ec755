#include "models/text_encoders/qwen3_attention.h"
// clang-format off
#include "core/x86_intrinsics.h"  // before anything that includes it: see there
// clang-format on

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace mmgen::text_encoders {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using StridedConst = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
using Strided = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

// Queries per task: a tile's score rows stay in cache between softmax and P·V.
constexpr int64_t kQueryTile = 64;
constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

// Where one sequence's keys and values live for this call: `count` rows `stride` floats apart.
struct KeyValueRows {
  const float* keys = nullptr;
  const float* values = nullptr;
  int64_t stride = 0;
};

// One sequence's queries (rows `q_stride` apart, at positions first_position + i) against its
// keys 0..first_position + queries - 1, for query head `head` reading key head `kv_head`.
void attend_tile(const float* q, int64_t q_stride, int64_t queries, int64_t first_position,
                 const KeyValueRows& kv, int64_t head_dim, float scale, int64_t window, float* out,
                 int64_t out_stride, RowMatrix& scores) {
  const int64_t kv_end = first_position + queries;
  const int64_t kv_begin = window > 0 ? std::max<int64_t>(0, first_position - window + 1) : 0;
  const int64_t span = kv_end - kv_begin;
  StridedConst q_tile(q, queries, head_dim, Eigen::OuterStride<>(q_stride));
  StridedConst keys(kv.keys + kv_begin * kv.stride, span, head_dim,
                    Eigen::OuterStride<>(kv.stride));
  StridedConst values(kv.values + kv_begin * kv.stride, span, head_dim,
                      Eigen::OuterStride<>(kv.stride));
  scores.resize(queries, span);
  scores.noalias() = q_tile * keys.transpose();
  for (int64_t i = 0; i < queries; ++i) {
    const int64_t position = first_position + i;
    // Visible keys of this query, as offsets into the span.
    const int64_t visible_begin =
        (window > 0 ? std::max<int64_t>(0, position - window + 1) : 0) - kv_begin;
    const int64_t visible_end = position + 1 - kv_begin;
    float* s = scores.data() + i * span;
    float max_score = kNegativeInfinity;
    for (int64_t j = visible_begin; j < visible_end; ++j) {
      s[j] *= scale;
      max_score = std::max(max_score, s[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < span; ++j) {
      if (j < visible_begin || j >= visible_end) {
        s[j] = 0.0f;
        continue;
      }
      s[j] = std::exp(s[j] - max_score);
      sum += s[j];
    }
    const float inverse = float(1.0 / sum);
    for (int64_t j = visible_begin; j < visible_end; ++j) s[j] *= inverse;
  }
  Strided out_tile(out, queries, head_dim, Eigen::OuterStride<>(out_stride));
  out_tile.noalias() = scores * values;
}

void check_call(const Tensor& q, const Tensor& k, const Tensor& v, int64_t tokens, int64_t kv_heads,
                int64_t head_dim) {
  check(q.dim() == 3 && k.dim() == 3 && v.shape() == k.shape() && q.size(0) == tokens &&
            k.size(0) == tokens && k.size(1) == kv_heads && q.size(2) == head_dim &&
            k.size(2) == head_dim && q.size(1) % kv_heads == 0,
        "causal attention: q {} k {} v {} do not fit a batch of {} tokens with {} KV heads of {}",
        shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()), tokens, kv_heads,
        head_dim);
  check(q.dtype() == DType::F32 && k.dtype() == DType::F32 && v.dtype() == DType::F32 &&
            q.is_contiguous() && k.is_contiguous() && v.is_contiguous() && q.is_cpu() &&
            k.is_cpu() && v.is_cpu(),
        "causal attention: q/k/v must be contiguous float32 on the CPU (the GPU attends through "
        "a paged runner)");
}

}  // namespace

int64_t CausalBatch::new_tokens() const {
  return std::accumulate(extend.begin(), extend.end(), int64_t(0));
}

std::vector<int64_t> CausalBatch::positions() const {
  std::vector<int64_t> result;
  result.reserve(size_t(new_tokens()));
  for (size_t i = 0; i < extend.size(); ++i)
    for (int64_t j = 0; j < extend[i]; ++j) result.push_back(cached[i] + j);
  return result;
}

CausalBatch CausalBatch::fresh(const std::vector<int64_t>& lengths) {
  return CausalBatch{std::vector<int64_t>(lengths.size(), 0), lengths};
}

DenseCausalAttention::DenseCausalAttention(int64_t layers, int64_t kv_heads, int64_t head_dim,
                                           bool keep_kv)
    : layers_(layers), kv_heads_(kv_heads), head_dim_(head_dim), keep_kv_(keep_kv) {}

void DenseCausalAttention::begin_forward(const CausalBatch& batch) {
  check(batch.cached.size() == batch.extend.size(),
        "causal attention: batch has {} cached lengths for {} sequences", batch.cached.size(),
        batch.extend.size());
  for (size_t i = 0; i < batch.sequences(); ++i) {
    check(batch.extend[i] >= 0, "causal attention: negative extend length");
    const int64_t held = keep_kv_ ? cached_tokens(i) : 0;
    check(batch.cached[i] == held,
          "causal attention: sequence {} claims {} cached tokens but the dense cache holds {}", i,
          batch.cached[i], held);
  }
  batch_ = batch;
  if (keep_kv_ && keys_.size() < batch.sequences()) {
    keys_.resize(batch.sequences(), std::vector<std::vector<float>>(size_t(layers_)));
    values_.resize(batch.sequences(), std::vector<std::vector<float>>(size_t(layers_)));
  }
}

int64_t DenseCausalAttention::cached_tokens(size_t sequence, int64_t layer) const {
  if (sequence >= keys_.size()) return 0;
  return int64_t(keys_[sequence][size_t(layer)].size()) / (kv_heads_ * head_dim_);
}

Tensor DenseCausalAttention::attend(int64_t layer, const Tensor& q, const Tensor& k,
                                    const Tensor& v, float scale, int64_t window) {
  const int64_t tokens = batch_.new_tokens();
  check(layer >= 0 && layer < layers_, "causal attention: layer {} of {}", layer, layers_);
  check_call(q, k, v, tokens, kv_heads_, head_dim_);
  const int64_t q_heads = q.size(1), group = q_heads / kv_heads_;
  const int64_t kv_row = kv_heads_ * head_dim_, q_row = q_heads * head_dim_;

  // Each sequence's K/V rows: its cache after appending the new tokens, or the call's own rows.
  std::vector<KeyValueRows> rows(batch_.sequences());
  std::vector<int64_t> starts(batch_.sequences());
  int64_t start = 0;
  for (size_t b = 0; b < batch_.sequences(); ++b) {
    starts[b] = start;
    const float* new_k = k.data<float>() + start * kv_row;
    const float* new_v = v.data<float>() + start * kv_row;
    if (keep_kv_) {
      auto& cache_k = keys_[b][size_t(layer)];
      auto& cache_v = values_[b][size_t(layer)];
      cache_k.insert(cache_k.end(), new_k, new_k + batch_.extend[b] * kv_row);
      cache_v.insert(cache_v.end(), new_v, new_v + batch_.extend[b] * kv_row);
      rows[b] = {cache_k.data(), cache_v.data(), kv_row};
    } else {
      rows[b] = {new_k, new_v, kv_row};
    }
    start += batch_.extend[b];
  }

  // One task per (sequence, query head, query tile).
  struct Task {
    int64_t sequence, head, first;
  };
  std::vector<Task> tasks;
  for (size_t b = 0; b < batch_.sequences(); ++b)
    for (int64_t h = 0; h < q_heads; ++h)
      for (int64_t first = 0; first < batch_.extend[b]; first += kQueryTile)
        tasks.push_back({int64_t(b), h, first});

  Tensor out = Tensor::empty(q.shape());
  int64_t work = 0;
  for (size_t b = 0; b < batch_.sequences(); ++b)
    work += batch_.extend[b] * (batch_.cached[b] + batch_.extend[b]);
  const bool parallel = work * q_heads * head_dim_ > (int64_t(1) << 16);
#pragma omp parallel if (parallel)
  {
    RowMatrix scores;
#pragma omp for schedule(dynamic)
    for (size_t t = 0; t < tasks.size(); ++t) {
      const Task& task = tasks[t];
      const size_t b = size_t(task.sequence);
      const int64_t queries = std::min(kQueryTile, batch_.extend[b] - task.first);
      const int64_t token = starts[b] + task.first;
      const KeyValueRows& kv = rows[b];
      const int64_t kv_offset = (task.head / group) * head_dim_;
      attend_tile(q.data<float>() + token * q_row + task.head * head_dim_, q_row, queries,
                  batch_.cached[b] + task.first,
                  {kv.keys + kv_offset, kv.values + kv_offset, kv.stride}, head_dim_, scale, window,
                  out.data<float>() + token * q_row + task.head * head_dim_, q_row, scores);
    }
  }
  return out;
}

}  // namespace mmgen::text_encoders
