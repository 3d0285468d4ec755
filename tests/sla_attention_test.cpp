// sla_attn and sage_sla_attn against an oracle written here from SLA's definition (SGLang's /
// TurboDiffusion's form): the block map from pooled q and pooled mean-centred k, expanded to a
// token-level mask for dense softmax attention, plus the linear branch over all keys computed
// token by token in double, through proj_l.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/kernels/sla_core.h"
#include "attention/kernels/sla_quant.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "models/dit/wan/wan_transformer.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

using attention::AttentionContext;
using attention::AttentionStats;
using attention::LayerWeights;

Tensor random_tensor(const Shape& shape, uint32_t seed, float sigma = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, sigma);
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = normal(rng);
  return t;
}

double at(const Tensor& x, int64_t b, int64_t s, int64_t h, int64_t d) {
  return x.data<float>()[((b * x.size(1) + s) * x.size(2) + h) * x.size(3) + d];
}

double cosine_similarity(const Tensor& a, const Tensor& b) {
  double dot = 0, na = 0, nb = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    dot += x * y;
    na += x * x;
    nb += y * y;
  }
  return dot / std::sqrt(na * nb);
}

// ---------------------------------------------------------------- the oracle

struct Oracle {
  double topk = 0.1;
  int64_t block_q = 128, block_k = 64;
  std::string feature_map = "softmax";
};

// keep[b·H + h][qb · nk + kb]
std::vector<std::vector<char>> oracle_block_map(const Tensor& q, const Tensor& k, const Oracle& o) {
  const int64_t B = q.size(0), Sq = q.size(1), H = q.size(2), D = q.size(3), Sk = k.size(1);
  const int64_t nq = (Sq + o.block_q - 1) / o.block_q, nk = (Sk + o.block_k - 1) / o.block_k;
  const int64_t kept = std::clamp<int64_t>(int64_t(o.topk * double(nk)), 1, nk);
  std::vector<std::vector<char>> keep(size_t(B * H), std::vector<char>(size_t(nq * nk), 0));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> kmean(size_t(D), 0.0);
      for (int64_t j = 0; j < Sk; ++j)
        for (int64_t d = 0; d < D; ++d) kmean[size_t(d)] += at(k, b, j, h, d) / double(Sk);
      auto pool = [&](const Tensor& x, int64_t block, int64_t len, int64_t i, bool centre) {
        std::vector<double> m(size_t(D), 0.0);
        const int64_t end = std::min(len, (i + 1) * block);
        for (int64_t s = i * block; s < end; ++s)
          for (int64_t d = 0; d < D; ++d) m[size_t(d)] += at(x, b, s, h, d);
        for (int64_t d = 0; d < D; ++d)
          m[size_t(d)] = m[size_t(d)] / double(end - i * block) - (centre ? kmean[size_t(d)] : 0);
        return m;
      };
      for (int64_t i = 0; i < nq; ++i) {
        const auto pq = pool(q, o.block_q, Sq, i, false);
        std::vector<std::pair<double, int64_t>> score;
        for (int64_t j = 0; j < nk; ++j) {
          const auto pk = pool(k, o.block_k, Sk, j, true);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += pq[size_t(d)] * pk[size_t(d)];
          score.push_back({-dot, j});  // ascending sort = descending score, ties lower index
        }
        std::sort(score.begin(), score.end());
        for (int64_t e = 0; e < kept; ++e)
          keep[size_t(b * H + h)][size_t(i * nk + score[size_t(e)].second)] = 1;
      }
    }
  return keep;
}

// Dense softmax attention over the block map, expanded to tokens, in double.
Tensor oracle_sparse(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                     const Oracle& o) {
  const auto keep = oracle_block_map(q, k, o);
  const int64_t B = q.size(0), Sq = q.size(1), H = q.size(2), D = q.size(3), Sk = k.size(1);
  const int64_t nk = (Sk + o.block_k - 1) / o.block_k;
  Tensor out = Tensor::zeros(q.shape());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        std::vector<double> score(size_t(Sk), -INFINITY);
        double max = -INFINITY;
        for (int64_t j = 0; j < Sk; ++j) {
          if (!keep[size_t(b * H + h)][size_t((i / o.block_q) * nk + j / o.block_k)]) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(q, b, i, h, d) * at(k, b, j, h, d);
          score[size_t(j)] = dot * scale;
          max = std::max(max, score[size_t(j)]);
        }
        double sum = 0;
        std::vector<double> acc(size_t(D), 0.0);
        for (int64_t j = 0; j < Sk; ++j)
          if (score[size_t(j)] != -INFINITY) {
            const double p = std::exp(score[size_t(j)] - max);
            sum += p;
            for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += p * at(v, b, j, h, d);
          }
        for (int64_t d = 0; d < D; ++d)
          out.data<float>()[((b * Sq + i) * H + h) * D + d] = float(acc[size_t(d)] / sum);
      }
  return out;
}

std::vector<double> phi(const Tensor& x, int64_t b, int64_t s, int64_t h, const std::string& map) {
  const int64_t D = x.size(3);
  std::vector<double> y(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) y[size_t(d)] = at(x, b, s, h, d);
  if (map == "softmax") {
    const double m = *std::max_element(y.begin(), y.end());
    double sum = 0;
    for (auto& e : y) sum += (e = std::exp(e - m));
    for (auto& e : y) e /= sum;
  } else if (map == "elu") {
    for (auto& e : y) e = e > 0 ? e + 1 : std::exp(e);
  } else {
    for (auto& e : y) e = std::max(e, 0.0);
  }
  return y;
}

// o_l[i] = Σ_j (φ(q_i)·φ(k_j)) v_j / (1e-5 + Σ_j φ(q_i)·φ(k_j)), token by token.
Tensor oracle_linear(const Tensor& q, const Tensor& k, const Tensor& v, const std::string& map) {
  const int64_t B = q.size(0), Sq = q.size(1), H = q.size(2), D = q.size(3), Sk = k.size(1);
  Tensor out = Tensor::zeros(q.shape());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<std::vector<double>> pk;
      for (int64_t j = 0; j < Sk; ++j) pk.push_back(phi(k, b, j, h, map));
      for (int64_t i = 0; i < Sq; ++i) {
        const auto pq = phi(q, b, i, h, map);
        double den = 0;
        std::vector<double> num(size_t(D), 0.0);
        for (int64_t j = 0; j < Sk; ++j) {
          const double w = std::inner_product(pq.begin(), pq.end(), pk[size_t(j)].begin(), 0.0);
          den += w;
          for (int64_t d = 0; d < D; ++d) num[size_t(d)] += w * at(v, b, j, h, d);
        }
        for (int64_t d = 0; d < D; ++d)
          out.data<float>()[((b * Sq + i) * H + h) * D + d] = float(num[size_t(d)] / (1e-5 + den));
      }
    }
  return out;
}

// expected = o_s + o_l · Wᵀ + bias (all in double, then float).
Tensor oracle_sla(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const Oracle& o,
                  const Tensor& weight, const Tensor& bias) {
  Tensor out = oracle_sparse(q, k, v, scale, o);
  if (!weight.defined()) return out;
  const Tensor lin = oracle_linear(q, k, v, o.feature_map);
  const int64_t D = q.size(3), rows = q.numel() / D;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < D; ++e) {
      double y = bias.data<float>()[e];
      for (int64_t d = 0; d < D; ++d)
        y += double(lin.data<float>()[r * D + d]) * weight.data<float>()[e * D + d];
      out.data<float>()[r * D + e] += float(y);
    }
  return out;
}

// ---------------------------------------------------------------- running the backends

nlohmann::json config_for(const Oracle& o, const char* backend = "sla_attn") {
  return attention::validate_backend_config({{"topk", o.topk},
                                             {"block_q", o.block_q},
                                             {"block_k", o.block_k},
                                             {"feature_map", o.feature_map}},
                                            backend);
}

Tensor run(const char* backend_name, const Oracle& o, const Tensor& q, const Tensor& k,
           const Tensor& v, float scale, const LayerWeights* weights,
           AttentionStats* stats = nullptr) {
  auto backend = attention::make_dit_backend(backend_name, config_for(o, backend_name));
  AttentionContext context;
  context.weights = weights;
  return backend->forward(q, k, v, scale, context, stats);
}

struct Shape4 {
  int64_t batch, q_len, kv_len, heads, dim;
};

const std::vector<Shape4> kShapes = {
    {2, 100, 100, 2, 16},  // neither block size divides the sequence
    {1, 128, 128, 3, 8},   // both divide it
    {1, 37, 90, 2, 16},    // q and kv lengths differ
};

TEST(SlaAttention, KeptBlocksNeverZero) {
  EXPECT_EQ(attention::sla::kept_blocks(0.1, 5), 1);  // floor(0.5) = 0 upstream
  EXPECT_EQ(attention::sla::kept_blocks(0.1, 30), 3);
  EXPECT_EQ(attention::sla::kept_blocks(1.0, 7), 7);
  EXPECT_EQ(attention::sla::kept_blocks(0.5, 1), 1);
}

TEST(SlaAttention, SparseAndLinearBranchesMatchTheOracle) {
  uint32_t seed = 1;
  double max_error = 0;
  for (const std::string map : {"softmax", "elu", "relu"})
    for (const Shape4& s : kShapes)
      for (double ratio : {0.01, 0.3, 0.6}) {
        Oracle o{.topk = ratio, .block_q = 16, .block_k = 8, .feature_map = map};
        const Tensor q = random_tensor({s.batch, s.q_len, s.heads, s.dim}, seed++);
        const Tensor k = random_tensor({s.batch, s.kv_len, s.heads, s.dim}, seed++);
        const Tensor v = random_tensor({s.batch, s.kv_len, s.heads, s.dim}, seed++);
        LayerWeights weights;
        weights["proj_l.weight"] = random_tensor({s.dim, s.dim}, seed++, 0.3f);
        weights["proj_l.bias"] = random_tensor({s.dim}, seed++, 0.3f);
        const float scale = 1.0f / std::sqrt(float(s.dim));
        AttentionStats stats;
        const Tensor actual = run("sla_attn", o, q, k, v, scale, &weights, &stats);
        const Tensor expected =
            oracle_sla(q, k, v, scale, o, weights["proj_l.weight"], weights["proj_l.bias"]);
        const double error = testing::relative_error(actual, expected);
        EXPECT_LT(error, 1e-5) << map << " ratio " << ratio << " q_len " << s.q_len;
        max_error = std::max(max_error, error);
        const int64_t nk = (s.kv_len + 7) / 8, nq = (s.q_len + 15) / 16;
        EXPECT_EQ(stats.visited_blocks,
                  s.batch * s.heads * nq * attention::sla::kept_blocks(ratio, nk));
        EXPECT_EQ(stats.total_blocks, s.batch * s.heads * nq * nk);
      }
  std::printf("  sla vs oracle: max relative error %.3g\n", max_error);
}

TEST(SlaAttention, DefaultBlocksWithoutProjectionAreTheSparseBranchOnly) {
  const Oracle o{.topk = 0.2};  // block_q 128, block_k 64 as SGLang
  const Tensor q = random_tensor({1, 700, 2, 32}, 3);
  const Tensor k = random_tensor({1, 700, 2, 32}, 4);
  const Tensor v = random_tensor({1, 700, 2, 32}, 5);
  const Tensor expected = oracle_sparse(q, k, v, 0.2f, o);
  const double without =
      testing::relative_error(run("sla_attn", o, q, k, v, 0.2f, nullptr), expected);
  LayerWeights zero;
  zero["proj_l.weight"] = Tensor::zeros({32, 32});
  zero["proj_l.bias"] = Tensor::zeros({32});
  const double with_zero =
      testing::relative_error(run("sla_attn", o, q, k, v, 0.2f, &zero), expected);
  EXPECT_LT(without, 1e-5);
  EXPECT_LT(with_zero, 1e-5);
  std::printf("  no proj_l %.3g, zero proj_l %.3g\n", without, with_zero);
}

TEST(SlaAttention, RatioOneIsDenseAttention) {
  const Oracle o{.topk = 1.0, .block_q = 16, .block_k = 8};
  Oracle all = o;
  all.block_q = 1 << 20;  // one block each: plain dense attention
  all.block_k = 1 << 20;
  for (const Shape4& s : kShapes) {
    const Tensor q = random_tensor({s.batch, s.q_len, s.heads, s.dim}, 11);
    const Tensor k = random_tensor({s.batch, s.kv_len, s.heads, s.dim}, 12);
    const Tensor v = random_tensor({s.batch, s.kv_len, s.heads, s.dim}, 13);
    AttentionStats stats;
    const double error = testing::relative_error(run("sla_attn", o, q, k, v, 0.3f, nullptr, &stats),
                                                 oracle_sparse(q, k, v, 0.3f, all));
    EXPECT_LT(error, 1e-5);
    EXPECT_EQ(stats.density(), 1.0);
  }
}

TEST(SlaAttention, LinearBranchMatchesTheDirectFormula) {
  for (const std::string map : {"softmax", "elu", "relu"}) {
    const Tensor q = random_tensor({2, 33, 3, 16}, 21);
    const Tensor k = random_tensor({2, 50, 3, 16}, 22);
    const Tensor v = random_tensor({2, 50, 3, 16}, 23);
    const auto feature = map == "softmax" ? attention::sla::FeatureMap::Softmax
                         : map == "elu"   ? attention::sla::FeatureMap::Elu
                                          : attention::sla::FeatureMap::Relu;
    const double error = testing::relative_error(attention::sla::linear_attention(q, k, v, feature),
                                                 oracle_linear(q, k, v, map));
    EXPECT_LT(error, 1e-5) << map;
    std::printf("  linear branch (%s): %.3g\n", map.c_str(), error);
  }
}

TEST(SlaAttention, StridedInputs) {
  const Oracle o{.topk = 0.4, .block_q = 16, .block_k = 8};
  const Tensor q = random_tensor({1, 2, 60, 16}, 31).permute({0, 2, 1, 3});
  const Tensor k = random_tensor({1, 60, 2, 16}, 32);
  const Tensor v = random_tensor({1, 2, 60, 16}, 33).permute({0, 2, 1, 3});
  EXPECT_LT(testing::relative_error(run("sla_attn", o, q, k, v, 0.25f, nullptr),
                                    oracle_sparse(q.contiguous(), k, v.contiguous(), 0.25f, o)),
            1e-5);
}

TEST(SlaAttention, RejectsAProjectionOfTheWrongSize) {
  const Oracle o{.topk = 0.5, .block_q = 16, .block_k = 8};
  const Tensor q = random_tensor({1, 32, 1, 16}, 41);
  LayerWeights bad;
  bad["proj_l.weight"] = Tensor::zeros({8, 8});
  const std::string message =
      testing::error_message([&] { run("sla_attn", o, q, q, q, 0.25f, &bad); });
  EXPECT_NE(message.find("proj_l.weight"), std::string::npos) << message;
}

TEST(SageSlaAttention, Int8RoundTripStaysWithinHalfAStep) {
  const Tensor x = random_tensor({1, 70, 2, 16}, 51, 2.0f);
  const auto blocks = attention::BlockLayout::uniform(70, 64);
  const Tensor y = attention::sla::int8_round_trip(x, blocks, 32, 0.5f);
  // Per (head, slice) the step is max|0.5 x| / 127.
  for (int64_t h = 0; h < 2; ++h)
    for (auto [start, end] : {std::pair<int64_t, int64_t>{0, 32}, {32, 64}, {64, 70}}) {
      double max_abs = 0;
      for (int64_t s = start; s < end; ++s)
        for (int64_t d = 0; d < 16; ++d)
          max_abs = std::max(max_abs, std::abs(0.5 * at(x, 0, s, h, d)));
      const double step = max_abs / 127;
      for (int64_t s = start; s < end; ++s)
        for (int64_t d = 0; d < 16; ++d) {
          const double level = at(y, 0, s, h, d) / step;
          EXPECT_NEAR(level, std::round(level), 1e-3);  // on the INT8 grid
          EXPECT_LE(std::abs(at(y, 0, s, h, d) - 0.5 * at(x, 0, s, h, d)), step / 2 + 1e-6);
        }
    }
}

TEST(SageSlaAttention, Int8RoundTripRoundsHalvesAwayFromZero) {
  // One slice whose largest magnitude is 127, so the step is exactly 1 and the levels are the
  // rounded inputs; expected values follow std::round (halves away from zero, signed zero kept).
  const std::vector<float> in = {127.0f, 2.5f,  -2.5f,  0.5f,
                                 -0.5f,  -0.3f, 126.5f, std::nextafter(1.5f, 0.0f)};
  const std::vector<float> expected = {127.0f, 3.0f, -3.0f, 1.0f, -1.0f, -0.0f, 127.0f, 1.0f};
  Tensor x = Tensor::zeros({1, int64_t(in.size()), 1, 1});
  std::copy(in.begin(), in.end(), x.data<float>());
  const Tensor y = attention::sla::int8_round_trip(
      x, attention::BlockLayout::uniform(int64_t(in.size()), 64), 32, 1.0f);
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(y.data<float>()[i], expected[i]) << "input " << in[i];
    EXPECT_EQ(std::signbit(y.data<float>()[i]), std::signbit(expected[i])) << "input " << in[i];
  }
}

TEST(SageSlaAttention, CloseToSla) {
  struct Case {
    Shape4 shape;
    double ratio;
    bool projection;
  };
  const std::vector<Case> cases = {
      {{1, 1024, 1024, 2, 64}, 0.5, false},
      {{1, 1000, 1000, 2, 128}, 0.3, true},
      {{2, 300, 300, 2, 64}, 0.1, true},
  };
  uint32_t seed = 60;
  for (const Case& c : cases) {
    const Shape4& s = c.shape;
    const Oracle o{.topk = c.ratio};  // SGLang's 128 x 64 blocks
    // Keys with a shared offset per channel, as real keys have; Sage's smoothing removes it.
    const Tensor q = random_tensor({s.batch, s.q_len, s.heads, s.dim}, seed++);
    const Tensor k = random_tensor({s.batch, s.kv_len, s.heads, s.dim}, seed++, 1.0f, 3.0f);
    const Tensor v = random_tensor({s.batch, s.kv_len, s.heads, s.dim}, seed++);
    LayerWeights weights;
    if (c.projection) {
      weights["proj_l.weight"] = random_tensor({s.dim, s.dim}, seed++, 0.1f);
      weights["proj_l.bias"] = random_tensor({s.dim}, seed++, 0.1f);
    }
    const float scale = 1.0f / std::sqrt(float(s.dim));
    AttentionStats sla_stats, sage_stats;
    const Tensor reference = run("sla_attn", o, q, k, v, scale, &weights, &sla_stats);
    const Tensor sage = run("sage_sla_attn", o, q, k, v, scale, &weights, &sage_stats);
    const double cosine = cosine_similarity(sage, reference);
    EXPECT_GT(cosine, 0.999);
    EXPECT_EQ(sage_stats.visited_blocks, sla_stats.visited_blocks);  // same block map
    std::printf("  sage_sla vs sla (D=%lld, ratio %.1f): cosine %.6f, relative error %.3g\n",
                (long long)s.dim, c.ratio, cosine, testing::relative_error(sage, reference));
  }
}

// The wan-tiny transformer (12 video tokens, 2 layers, head size 24) with sla_attn and
// sage_sla_attn in every self-attention. At ratio 1 without proj_l, sla_attn is the dense run and
// matches diffusers; sparse settings, with and without proj_l weights, complete.
TEST(SlaAttention, WanFixtureRunsAndMatchesDenseAtFullDensity) {
  MMGEN_REQUIRE_SHARED();
  const fs::path tiny = testing::shared_dir() / "fixtures" / "wan-tiny";
  const WeightStore reference =
      WeightStore::open_file(tiny / "reference" / "reference.safetensors");
  const dit::WanTransformer model = dit::WanTransformer::load(tiny / "model" / "transformer");
  const Tensor latents = reference.get_f32("transformer.hidden_states");
  const Tensor text = reference.get_f32("transformer.encoder_hidden_states");
  const Tensor expected = reference.get_f32("transformer.out_t999");
  const Tensor dense_run = model.forward(latents, 999.0f, text);
  const int64_t head_dim = model.config().attention_head_dim;
  auto run_model = [&](const char* backend, const Oracle& o, bool projection,
                       AttentionStats* stats) {
    uint32_t seed = 90;
    attention::Layers attention = attention::layers_from(
        model.attention_stacks(), [&](const attention::StackTraits& stack, int64_t) {
          if (stack.name != dit::kWanSelfStack) return attention::Layer();  // dense reference
          attention::LayerWeights weights;
          if (projection) {
            weights["proj_l.weight"] = random_tensor({head_dim, head_dim}, seed++, 0.1f);
            weights["proj_l.bias"] = random_tensor({head_dim}, seed++, 0.1f);
          }
          return attention::Layer(attention::make_dit_backend(backend, config_for(o, backend)),
                                  std::move(weights));
        });
    const Tensor out =
        model.forward(latents, 999.0f, text, dit::WanStep{.index = 3, .count = 10}, &attention);
    *stats = attention.stats(dit::kWanSelfStack);
    return out;
  };
  AttentionStats stats;
  const Tensor out =
      run_model("sla_attn", Oracle{.topk = 1.0, .block_q = 4, .block_k = 2}, false, &stats);
  EXPECT_EQ(stats.density(), 1.0);
  const double vs_dense = testing::relative_error(out, dense_run);
  const double vs_diffusers = testing::relative_error(out, expected);
  EXPECT_LT(vs_dense, 1e-5);
  EXPECT_LT(vs_diffusers, 1e-5);
  std::printf("  wan-tiny, sla_attn ratio 1: %.3g vs the dense run, %.3g vs diffusers\n", vs_dense,
              vs_diffusers);
  for (const char* backend : {"sla_attn", "sage_sla_attn"})
    for (bool projection : {false, true}) {
      AttentionStats sparse_stats;
      const Tensor result = run_model(backend, Oracle{.topk = 0.3, .block_q = 4, .block_k = 2},
                                      projection, &sparse_stats);
      bool finite = true;
      for (int64_t i = 0; i < result.numel(); ++i) finite &= std::isfinite(result.data<float>()[i]);
      EXPECT_TRUE(finite);
      EXPECT_LT(sparse_stats.density(), 1.0);
      std::printf("  wan-tiny, %s ratio 0.3%s: density %.3f, %.3g from the dense run\n", backend,
                  projection ? " with proj_l" : "", sparse_stats.density(),
                  testing::relative_error(result, dense_run));
    }
}

}  // namespace
}  // namespace mmgen
