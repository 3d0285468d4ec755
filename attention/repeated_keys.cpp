#include "attention/repeated_keys.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/kernels/block_sparse.h"
#include "core/error.h"
#include "core/parallel.h"

namespace mmgen::attention {

RepeatedTail find_repeated_tail(const Tensor& rows) {
  check(rows.dim() == 3 && rows.size(1) > 0 && rows.is_cpu(),
        "find_repeated_tail: expects host rows [batch, length, channels], got {}",
        shape_string(rows.shape()));
  const Tensor c = rows.contiguous();
  const int64_t batch = c.size(0), length = c.size(1);
  const size_t row_bytes = size_t(c.size(2)) * dtype_size(c.dtype());
  RepeatedTail tail;
  tail.total = length;
  for (int64_t b = 0; b < batch; ++b) {
    const std::byte* element = c.raw() + size_t(b * length) * row_bytes;
    const std::byte* last = element + size_t(length - 1) * row_bytes;
    int64_t start = length - 1;
    while (start > 0 && std::memcmp(element + size_t(start - 1) * row_bytes, last, row_bytes) == 0)
      --start;
    tail.distinct.push_back(start);
  }
  return tail;
}

int64_t kept_rows(const RepeatedTail& tail) {
  return *std::max_element(tail.distinct.begin(), tail.distinct.end()) + 1;
}

namespace {

void check_keys(const Tensor& keys, const RepeatedTail& tail) {
  check(keys.dim() == 4 && keys.dtype() == DType::F32 && keys.is_cpu(),
        "repeated keys: expects float32 host keys [batch, keys, heads, head_dim], got {}",
        shape_string(keys.shape()));
  check(int64_t(tail.distinct.size()) == keys.size(0) && kept_rows(tail) == keys.size(1) &&
            tail.total >= keys.size(1),
        "repeated keys: {} keys do not hold a repeated tail of {} keys", shape_string(keys.shape()),
        tail.total);
}

}  // namespace

Tensor expand_repeated_tail(const Tensor& keys, const RepeatedTail& tail) {
  check_keys(keys, tail);
  const Tensor c = keys.contiguous();
  const int64_t batch = c.size(0), kept = c.size(1), row = c.size(2) * c.size(3);
  Tensor out = Tensor::empty({batch, tail.total, c.size(2), c.size(3)});
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < tail.total; ++j) {
      const int64_t from = j < tail.distinct[size_t(b)] ? j : kept - 1;
      std::memcpy(out.data<float>() + (b * tail.total + j) * row,
                  c.data<float>() + (b * kept + from) * row, size_t(row) * sizeof(float));
    }
  return out;
}

Tensor attend_repeated_tail(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, float scale,
                            const RepeatedTail& tail, const DenseWithLse& attend) {
  check_keys(k_in, tail);
  check(v_in.shape() == k_in.shape() && q_in.dim() == 4 && q_in.size(0) == k_in.size(0) &&
            q_in.size(2) == k_in.size(2) && q_in.size(3) == k_in.size(3),
        "repeated keys: q {}, k {} and v {} do not fit together", shape_string(q_in.shape()),
        shape_string(k_in.shape()), shape_string(v_in.shape()));
  const Tensor q = q_in.to(DType::F32).contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), head_dim = q.size(3);
  const int64_t kept = k.size(1);
  Tensor out = Tensor::empty(q.shape());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t distinct = tail.distinct[size_t(b)];
    // The distinct keys (none: an empty result, LSE −inf) ...
    Tensor part = Tensor::zeros({1, q_len, heads, head_dim}),
           lse = Tensor::full({1, heads, q_len}, -std::numeric_limits<float>::infinity());
    if (distinct > 0) {
      const auto keys = [&](const Tensor& t) {
        return t.slice(0, b, b + 1).slice(1, 0, distinct).contiguous();
      };
      part = attend(q.slice(0, b, b + 1), keys(k), keys(v), scale, &lse);
    }
    // ... and the repeated key alone: its value, with its score plus log(count) as the LSE of the
    // copies it stands for, merged in by block_sparse's merge_by_lse.
    const float log_count = float(std::log(double(tail.total - distinct)));
    Tensor repeated = Tensor::empty(part.shape()), repeated_lse = Tensor::empty(lse.shape());
    const float* qb = q.data<float>() + b * q_len * heads * head_dim;
    const float* kr = k.data<float>() + (b * kept + kept - 1) * heads * head_dim;
    const float* vr = v.data<float>() + (b * kept + kept - 1) * heads * head_dim;
    float* values = repeated.data<float>();
    float* scores = repeated_lse.data<float>();
    const int threads = threads_for(q_len * heads * head_dim);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t row = 0; row < q_len * heads; ++row) {
      const int64_t s = row / heads, h = row % heads;
      float dot = 0;
      for (int64_t d = 0; d < head_dim; ++d) dot += qb[row * head_dim + d] * kr[h * head_dim + d];
      scores[h * q_len + s] = scale * dot + log_count;
      std::copy_n(vr + h * head_dim, head_dim, values + row * head_dim);
    }
    merge_by_lse(part, lse, repeated, repeated_lse);
    out.select(0, b).copy_from(part.select(0, 0));
  }
  return out;
}

}  // namespace mmgen::attention
