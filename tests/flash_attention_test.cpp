// The fa kernel and the block-sparse core against a double-precision oracle written straight from
// the definition (softmax over the allowed keys), on both the SIMD and the portable path.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "attention/backend.h"
#include "attention/kernels/block_sparse.h"
#include "attention/kernels/dense_attention.h"
#include "attention/kernels/flash_kernel.h"
#include "attention/repeated_keys.h"
#include "test_support.h"

namespace mmgen::attention {
namespace {

using flash::KernelPath;
using Allowed = std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)>;

Tensor random_tensor(const Shape& shape, uint32_t seed, float spread = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

// softmax(scale·q·kᵀ) over the allowed keys, in double; rows with none give 0 and LSE −inf.
Tensor oracle(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
              const Allowed& allowed, Tensor* lse = nullptr) {
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), dim = q.size(3),
                kv_len = k.size(1);
  Tensor out = Tensor::zeros(q.shape());
  if (lse) *lse = Tensor::full({batch, heads, q_len}, -std::numeric_limits<float>::infinity());
  auto at = [&](const Tensor& t, int64_t b, int64_t s, int64_t h, int64_t d) {
    return double(t.data<float>()[((b * t.size(1) + s) * heads + h) * dim + d]);
  };
  std::vector<double> scores(static_cast<size_t>(kv_len));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < q_len; ++i) {
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < kv_len; ++j) {
          if (!allowed(b, h, i, j)) continue;
          double s = 0;
          for (int64_t d = 0; d < dim; ++d) s += at(q, b, i, h, d) * at(k, b, j, h, d);
          scores[size_t(j)] = s * scale;
          max_score = std::max(max_score, scores[size_t(j)]);
        }
        if (max_score == -std::numeric_limits<double>::infinity()) continue;
        double sum = 0;
        std::vector<double> acc(size_t(dim), 0.0);
        for (int64_t j = 0; j < kv_len; ++j) {
          if (!allowed(b, h, i, j)) continue;
          const double p = std::exp(scores[size_t(j)] - max_score);
          sum += p;
          for (int64_t d = 0; d < dim; ++d) acc[size_t(d)] += p * at(v, b, j, h, d);
        }
        for (int64_t d = 0; d < dim; ++d)
          out.data<float>()[((b * q_len + i) * heads + h) * dim + d] = float(acc[size_t(d)] / sum);
        if (lse) lse->data<float>()[(b * heads + h) * q_len + i] = float(max_score + std::log(sum));
      }
  return out;
}

const Allowed kAll = [](int64_t, int64_t, int64_t, int64_t) { return true; };

struct Shape4 {
  int64_t batch, q_len, kv_len, heads, dim;
};

std::vector<KernelPath> paths() {
  std::vector<KernelPath> result = {KernelPath::Portable};
  if (flash::simd_available()) result.push_back(KernelPath::Avx2);
  if (std::string(flash::best_kernel_name()) == "AVX-512") result.push_back(KernelPath::Best);
  return result;
}

TEST(FlashAttention, MatchesTheOracleOverShapes) {
  const std::vector<Shape4> shapes = {
      {1, 1, 1, 1, 64},     {1, 7, 5, 2, 64},     {2, 61, 97, 3, 128},
      {1, 200, 131, 2, 72}, {1, 129, 300, 1, 40}, {1, 50, 257, 2, 8},
      {2, 33, 33, 2, 3},    {1, 300, 17, 2, 128}, {1, 97, 513, 1, 256},
  };
  uint32_t seed = 1;
  for (const auto& s : shapes)
    for (KernelPath path : paths()) {
      const Tensor q = random_tensor({s.batch, s.q_len, s.heads, s.dim}, seed++, 1.5f);
      const Tensor k = random_tensor({s.batch, s.kv_len, s.heads, s.dim}, seed++, 1.5f);
      const Tensor v = random_tensor({s.batch, s.kv_len, s.heads, s.dim}, seed++);
      const float scale = float(1.0 / std::sqrt(double(s.dim)));
      Tensor lse, expected_lse;
      const Tensor expected = oracle(q, k, v, scale, kAll, &expected_lse);
      const Tensor actual = flash::flash_attention(q, k, v, scale, &lse, path);
      SCOPED_TRACE(::testing::Message() << "shape " << s.batch << "x" << s.q_len << "x" << s.kv_len
                                        << "x" << s.heads << "x" << s.dim << " path " << int(path));
      EXPECT_LT(testing::relative_error(actual, expected), 2e-6);
      EXPECT_LT(testing::max_abs_diff(lse, expected_lse), 2e-5);
      // The float32 reference (torch_sdpa's kernel) agrees as well, within both kernels' float32
      // rounding (each is within 2e-6 of the double oracle).
      const Tensor sdpa = dense_attention({.q = q, .k = k, .v = v, .scale = scale});
      EXPECT_LT(testing::relative_error(actual, sdpa), 4e-6);
    }
}

TEST(FlashAttention, TakesStridedInputs) {
  // q, k, v as views into one packed [B, S, 3, H, D] projection, as models produce them.
  const Tensor qkv = random_tensor({1, 77, 3, 2, 64}, 5);
  const Tensor q = qkv.select(2, 0), k = qkv.select(2, 1), v = qkv.select(2, 2);
  const Tensor expected = oracle(q.contiguous(), k.contiguous(), v.contiguous(), 0.125f, kAll);
  EXPECT_LT(testing::relative_error(flash::flash_attention(q, k, v, 0.125f), expected), 2e-6);
}

TEST(FlashAttention, FaBackendIsRegisteredAndCountsDenseBlocks) {
  auto backend = make_dit_backend("fa", nlohmann::json::object());
  EXPECT_EQ(backend->name(), "fa");
  const Tensor q = random_tensor({1, 100, 2, 64}, 9), k = random_tensor({1, 300, 2, 64}, 10),
               v = random_tensor({1, 300, 2, 64}, 11);
  AttentionStats stats;
  const Tensor out = backend->forward(q, k, v, 0.125f, AttentionContext{}, &stats);
  EXPECT_LT(testing::relative_error(out, oracle(q, k, v, 0.125f, kAll)), 2e-6);
  EXPECT_GT(stats.total_blocks, 0);
  EXPECT_DOUBLE_EQ(stats.density(), 1.0);
}

TEST(BlockSparse, DensePatternsEqualDenseAttention) {
  const Tensor q = random_tensor({2, 150, 3, 64}, 21), k = random_tensor({2, 170, 3, 64}, 22),
               v = random_tensor({2, 170, 3, 64}, 23);
  const Tensor expected = oracle(q, k, v, 0.125f, kAll);
  for (auto [qb, kb] : {std::pair{64, 64}, {384, 384}, {7, 13}, {150, 1}}) {
    const auto pattern =
        BlockSparsePattern::dense(BlockLayout::uniform(150, qb), BlockLayout::uniform(170, kb));
    Tensor lse;
    const Tensor out = block_sparse_attention(q, k, v, 0.125f, {pattern}, &lse);
    EXPECT_LT(testing::relative_error(out, expected), 2e-6) << qb << " " << kb;
  }
}

// A random pattern with uneven blocks, zero-length blocks, empty lists and query tokens outside
// every block; `allowed` expands it to tokens, independently of the kernel.
struct RandomPattern {
  BlockSparsePattern pattern;
  std::vector<int64_t> q_owner;  // query token -> query block (−1: none)
};

BlockLayout uneven_layout(int64_t tokens, std::mt19937& rng, bool gaps) {
  BlockLayout layout;
  std::uniform_int_distribution<int64_t> size(0, 90);
  for (int64_t s = 0; s < tokens;) {
    const int64_t length = std::min(tokens - s, size(rng));
    layout.start.push_back(s);
    layout.length.push_back(length);
    s += length + (gaps && length % 3 == 0 ? 5 : 0);
  }
  return layout;
}

RandomPattern random_pattern(int64_t q_len, int64_t kv_len, uint32_t seed, int64_t q_blocks = -1) {
  std::mt19937 rng(seed);
  RandomPattern result;
  BlockSparsePattern& p = result.pattern;
  p.q_blocks = uneven_layout(q_len, rng, true);
  if (q_blocks >= 0) {  // fix the count (patterns of one call must agree on it)
    while (p.q_blocks.size() > q_blocks) {
      p.q_blocks.start.pop_back();
      p.q_blocks.length.pop_back();
    }
    while (p.q_blocks.size() < q_blocks) {
      p.q_blocks.start.push_back(0);
      p.q_blocks.length.push_back(0);
    }
  }
  p.kv_blocks = uneven_layout(kv_len, rng, false);
  std::bernoulli_distribution keep(0.4);
  p.indptr = {0};
  for (int64_t i = 0; i < p.q_blocks.size(); ++i) {
    if (i % 4 != 3)  // every fourth query block has an empty list
      for (int32_t j = 0; j < p.kv_blocks.size(); ++j)
        if (keep(rng)) p.indices.push_back(j);
    p.indptr.push_back(int64_t(p.indices.size()));
  }
  result.q_owner.assign(size_t(q_len), -1);
  for (int64_t i = 0; i < p.q_blocks.size(); ++i)
    for (int64_t t = 0; t < p.q_blocks.length[size_t(i)]; ++t)
      result.q_owner[size_t(p.q_blocks.start[size_t(i)] + t)] = i;
  return result;
}

bool visits(const RandomPattern& rp, int64_t i, int64_t j) {
  const int64_t qb = rp.q_owner[size_t(i)];
  if (qb < 0) return false;
  const auto& p = rp.pattern;
  for (int64_t e = p.indptr[size_t(qb)]; e < p.indptr[size_t(qb) + 1]; ++e) {
    const int64_t kb = p.indices[size_t(e)];
    if (j >= p.kv_blocks.start[size_t(kb)] &&
        j < p.kv_blocks.start[size_t(kb)] + p.kv_blocks.length[size_t(kb)])
      return true;
  }
  return false;
}

TEST(BlockSparse, MatchesTheMaskedOracleForOnePerHeadAndPerBatchHeadPatterns) {
  const int64_t batch = 2, heads = 3, q_len = 333, kv_len = 290, dim = 64;
  const Tensor q = random_tensor({batch, q_len, heads, dim}, 31, 1.5f),
               k = random_tensor({batch, kv_len, heads, dim}, 32, 1.5f),
               v = random_tensor({batch, kv_len, heads, dim}, 33);
  for (int64_t count : {int64_t(1), heads, batch * heads}) {
    std::vector<RandomPattern> rps;
    std::vector<BlockSparsePattern> patterns;
    const int64_t q_blocks = random_pattern(q_len, kv_len, 100).pattern.q_blocks.size();
    for (int64_t i = 0; i < count; ++i) {
      rps.push_back(random_pattern(q_len, kv_len, uint32_t(100 + i), q_blocks));
      patterns.push_back(rps.back().pattern);
    }
    const Allowed allowed = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
      const int64_t index = count == 1 ? 0 : count == heads ? h : b * heads + h;
      return visits(rps[size_t(index)], i, j);
    };
    Tensor expected_lse;
    const Tensor expected = oracle(q, k, v, 0.1f, allowed, &expected_lse);
    Tensor lse;
    const Tensor out = block_sparse_attention(q, k, v, 0.1f, patterns, &lse);
    EXPECT_LT(testing::relative_error(out, expected), 2e-6) << count << " patterns";
    // LSE: −inf exactly where no key is visited, close elsewhere.
    for (int64_t n = 0; n < lse.numel(); ++n) {
      const float a = lse.data<float>()[n], e = expected_lse.data<float>()[n];
      if (std::isinf(e)) {
        ASSERT_TRUE(std::isinf(a) && a < 0) << n;
      } else {
        ASSERT_NEAR(a, e, 2e-5) << n;
      }
    }
  }
}

TEST(BlockSparse, MergeByLseOfTwoHalvesEqualsTheWhole) {
  const Tensor q = random_tensor({1, 90, 2, 64}, 41), k = random_tensor({1, 200, 2, 64}, 42),
               v = random_tensor({1, 200, 2, 64}, 43);
  auto half = [&](int64_t first) {
    BlockSparsePattern p;
    p.q_blocks = BlockLayout::uniform(90, 30);
    p.kv_blocks = BlockLayout::uniform(200, 50);
    p.indptr = {0};
    for (int64_t i = 0; i < 3; ++i) {
      for (int32_t j = int32_t(first); j < 4; j += 2) p.indices.push_back(j);
      p.indptr.push_back(int64_t(p.indices.size()));
    }
    return p;
  };
  Tensor lse_a, lse_b;
  Tensor a = block_sparse_attention(q, k, v, 0.125f, {half(0)}, &lse_a);
  const Tensor b = block_sparse_attention(q, k, v, 0.125f, {half(1)}, &lse_b);
  merge_by_lse(a, lse_a, b, lse_b);
  Tensor whole_lse;
  const Tensor whole = flash::flash_attention(q, k, v, 0.125f, &whole_lse);
  EXPECT_LT(testing::relative_error(a, whole), 2e-6);
  EXPECT_LT(testing::max_abs_diff(lse_a, whole_lse), 2e-5);
}

TEST(BlockSparse, RejectsBadPatterns) {
  const Tensor q = random_tensor({1, 10, 2, 8}, 1), k = random_tensor({1, 10, 2, 8}, 2);
  auto pattern =
      BlockSparsePattern::dense(BlockLayout::uniform(10, 4), BlockLayout::uniform(12, 4));
  EXPECT_NE(testing::error_message([&] { block_sparse_attention(q, k, k, 1.0f, {pattern}); }), "");
  pattern = BlockSparsePattern::dense(BlockLayout::uniform(10, 4), BlockLayout::uniform(10, 4));
  EXPECT_NE(testing::error_message([&] {
              block_sparse_attention(q, k, k, 1.0f, {pattern, pattern, pattern});
            }),
            "");
}

// Keys [B, kept, H, D] whose element b repeats its last row from distinct[b] on.
Tensor with_repeated_tail(const Shape& shape, const std::vector<int64_t>& distinct, uint32_t seed) {
  Tensor t = random_tensor(shape, seed);
  const int64_t kept = shape[1], row = shape[2] * shape[3];
  for (int64_t b = 0; b < shape[0]; ++b)
    for (int64_t j = distinct[size_t(b)]; j < kept; ++j)
      std::copy_n(t.data<float>() + (b * kept + kept - 1) * row, row,
                  t.data<float>() + (b * kept + j) * row);
  return t;
}

TEST(RepeatedKeys, FindsEachElementsTailBitForBit) {
  Tensor rows = Tensor::zeros({3, 6, 4});
  for (int64_t i = 0; i < 4; ++i) {
    rows.data<float>()[0 * 24 + 0 * 4 + i] = 1.0f;  // element 0: one distinct row, five zeros
    for (int64_t j = 0; j < 6; ++j) rows.data<float>()[24 + j * 4 + i] = float(j + i);  // none
    rows.data<float>()[48 + 2 * 4 + i] = 2.0f;  // element 2: rows 0, 1 zero, row 2 not, rest zero
  }
  const RepeatedTail tail = find_repeated_tail(rows);
  EXPECT_EQ(tail.total, 6);
  EXPECT_EQ(tail.distinct, (std::vector<int64_t>{1, 5, 3}));
  EXPECT_EQ(kept_rows(tail), 6);
  // -0.0 and 0.0 are different bits, so not one repeated row.
  Tensor signs = Tensor::zeros({1, 3, 1});
  signs.data<float>()[2] = -0.0f;
  EXPECT_EQ(find_repeated_tail(signs).distinct, (std::vector<int64_t>{2}));
}

TEST(RepeatedKeys, ExpandsToTheRowsTheyStandFor) {
  const RepeatedTail tail{{2, 0}, 7};
  const Tensor keys = with_repeated_tail({2, 3, 2, 4}, tail.distinct, 5);
  const Tensor all = expand_repeated_tail(keys, tail);
  ASSERT_EQ(all.shape(), (Shape{2, 7, 2, 4}));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < 7; ++j)
      for (int64_t i = 0; i < 8; ++i)
        EXPECT_EQ(all.data<float>()[(b * 7 + j) * 8 + i],
                  keys.data<float>()[(b * 3 + std::min<int64_t>(j, 2)) * 8 + i]);
  EXPECT_NE(testing::error_message([&] { expand_repeated_tail(keys, {{2, 0}, 2}); }), "");
  EXPECT_NE(testing::error_message([&] { expand_repeated_tail(keys, {{1}, 7}); }), "");
}

// Counting the repeated key once gives the attention over every key it stands for (the oracle in
// double over the expanded keys); each element's values are what it gets alone, to the bit.
TEST(RepeatedKeys, CountedAttentionEqualsAttentionOverEveryKey) {
  const RepeatedTail tail{{5, 0, 9}, 40};
  const Tensor q = random_tensor({3, 37, 2, 16}, 11, 2.0f);
  const Tensor k = with_repeated_tail({3, 10, 2, 16}, tail.distinct, 12);
  const Tensor v = with_repeated_tail({3, 10, 2, 16}, tail.distinct, 13);
  const DenseWithLse flash = [](const Tensor& qb, const Tensor& kb, const Tensor& vb, float s,
                                Tensor* lse) { return flash::flash_attention(qb, kb, vb, s, lse); };
  const Tensor counted = attend_repeated_tail(q, k, v, 0.25f, tail, flash);
  const Tensor expected =
      oracle(q, expand_repeated_tail(k, tail), expand_repeated_tail(v, tail), 0.25f, kAll);
  EXPECT_LT(testing::relative_error(counted, expected), 1e-6);
  for (int64_t b = 0; b < 3; ++b) {
    const auto one = [&](const Tensor& t) { return t.slice(0, b, b + 1).contiguous(); };
    const RepeatedTail alone{{tail.distinct[size_t(b)]}, tail.total};
    const int64_t rows = kept_rows(alone);
    const Tensor got =
        attend_repeated_tail(one(q), one(k).slice(1, 0, rows).contiguous(),
                             one(v).slice(1, 0, rows).contiguous(), 0.25f, alone, flash);
    EXPECT_EQ(testing::max_abs_diff(got, one(counted)), 0.0) << "element " << b;
  }
}

}  // namespace
}  // namespace mmgen::attention
