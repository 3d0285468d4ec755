#include "attention/kernels/block_sparse.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/kernels/flash_kernel.h"
#include "core/error.h"
#include "core/parallel.h"

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
  std::vector<const int64_t*> qo, ko;
  for (int64_t p = 0; p < count; ++p) {
    auto order = [&](const std::vector<std::vector<int64_t>>* orders) -> const int64_t* {
      return orders && !(*orders)[size_t(p)].empty() ? (*orders)[size_t(p)].data() : nullptr;
    };
    qo.push_back(order(q_orders));
    ko.push_back(order(k_orders));
  }
  flash::run_gathered(q.data<float>(), k.data<float>(), v.data<float>(), batch, q_len, kv_len,
                      heads, head_dim, scale, patterns, qo, ko, out.data<float>(),
                      lse ? lse->data<float>() : nullptr);
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
  // Rows are independent: one thread per grain of values.
  const int threads = threads_for(batch * heads * q_len * head_dim);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t l = 0; l < batch * heads * q_len; ++l) {
    const int64_t b = l / (heads * q_len), h = l / q_len % heads, i = l % q_len;
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
