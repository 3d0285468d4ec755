// vmoba_attn against dense attention with an explicit token-level mask built here, straight from
// V-MoBA's definition (chunk of every token from its (t, h, w) coordinates, mean keys, the
// selection rule with full sorts in double), independently of the backend's reorder and its
// expert-form kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/backends/vmoba_attn/vmoba_layout.h"
#include "attention/kernels/dense_attention.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "models/dit/wan/wan_transformer.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

using attention::AttentionContext;
using attention::AttentionStats;
using Grid = std::array<int64_t, 3>;

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = normal(rng);
  return t;
}

double at(const Tensor& x, int64_t b, int64_t s, int64_t h, int64_t d) {
  return x.data<float>()[((b * x.size(1) + s) * x.size(2) + h) * x.size(3) + d];
}

// softmax(scale · q kᵀ) v over the keys `allowed(b, h, i, j)` lets through, in double.
template <typename Mask>
Tensor masked_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                        Mask allowed) {
  const int64_t B = q.size(0), S = q.size(1), H = q.size(2), D = q.size(3), Sk = k.size(1);
  Tensor out = Tensor::zeros(q.shape());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> score(size_t(Sk), -INFINITY);
        double max = -INFINITY;
        for (int64_t j = 0; j < Sk; ++j) {
          if (!allowed(b, h, i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(q, b, i, h, d) * at(k, b, j, h, d);
          score[size_t(j)] = dot * scale;
          max = std::max(max, score[size_t(j)]);
        }
        double sum = 0;
        std::vector<double> acc(size_t(D), 0.0);
        for (int64_t j = 0; j < Sk; ++j) {
          if (score[size_t(j)] == -INFINITY) continue;
          const double p = std::exp(score[size_t(j)] - max);
          sum += p;
          for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += p * at(v, b, j, h, d);
        }
        for (int64_t d = 0; d < D; ++d)
          out.data<float>()[((b * S + i) * H + h) * D + d] = float(acc[size_t(d)] / sum);
      }
  return out;
}

Tensor dense(const Tensor& q, const Tensor& k, const Tensor& v, float scale) {
  return masked_attention(q, k, v, scale, [](int64_t, int64_t, int64_t, int64_t) { return true; });
}

// ---------------------------------------------------------------- the oracle's selection

struct OracleConfig {
  Grid chunk;  // chunk shape (t, h, w) in tokens, already clamped to the grid
  bool topk_mode = false;
  std::string group = "query_head";
  double threshold = 0.25;
  int64_t topk = 3;
};

// allowed[b][h][i][c]: query i (original order) of (b, h) attends chunk c.
struct OracleMask {
  Grid grid;
  Grid chunk;
  int64_t chunks_t, chunks_h, chunks_w, video, text;
  std::vector<int64_t> chunk_of;            // per video token
  std::vector<std::vector<char>> selected;  // [b·H + h][i · C + c]
  int64_t count() const { return chunks_t * chunks_h * chunks_w; }
  bool operator()(int64_t b, int64_t h, int64_t H, int64_t i, int64_t j) const {
    if (i >= video || j >= video) return true;  // text attends and is attended by everything
    return selected[size_t(b * H + h)][size_t(i * count() + chunk_of[size_t(j)])] != 0;
  }
};

struct Scored {
  double value;
  int64_t id;  // encodes what the group needs
};

// Entries sorted best first (ties: lower id); returns how many the rule keeps.
int64_t threshold_keep(std::vector<Scored>& others, double total, double own, double threshold) {
  std::stable_sort(others.begin(), others.end(), [](const Scored& a, const Scored& b) {
    return a.value > b.value || (a.value == b.value && a.id < b.id);
  });
  const double eps = 1e-6;
  const double need = std::max(0.0, threshold - own / (total + eps));
  double cum = 0;
  for (size_t e = 0; e < others.size(); ++e) {
    cum += others[e].value;
    if (cum / (total + eps) >= need) return int64_t(e) + 1;
  }
  return int64_t(others.size());
}

OracleMask build_oracle(const Tensor& q, const Tensor& k, const Grid& grid, int64_t text,
                        const OracleConfig& cfg) {
  OracleMask mask;
  mask.grid = grid;
  mask.chunk = cfg.chunk;
  mask.text = text;
  mask.chunks_t = (grid[0] + cfg.chunk[0] - 1) / cfg.chunk[0];
  mask.chunks_h = (grid[1] + cfg.chunk[1] - 1) / cfg.chunk[1];
  mask.chunks_w = (grid[2] + cfg.chunk[2] - 1) / cfg.chunk[2];
  mask.video = grid[0] * grid[1] * grid[2];
  const int64_t C = mask.count(), N = mask.video, B = q.size(0), H = q.size(2), D = q.size(3);
  for (int64_t t = 0; t < grid[0]; ++t)
    for (int64_t y = 0; y < grid[1]; ++y)
      for (int64_t x = 0; x < grid[2]; ++x)
        mask.chunk_of.push_back(((t / cfg.chunk[0]) * mask.chunks_h + y / cfg.chunk[1]) *
                                    mask.chunks_w +
                                x / cfg.chunk[2]);
  // gate[b][h][i][c] = q_i · mean key of chunk c
  std::vector<std::vector<double>> gate(size_t(B * H), std::vector<double>(size_t(N * C)));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> mean(size_t(C * D), 0.0);
      std::vector<int64_t> size(size_t(C), 0);
      for (int64_t j = 0; j < N; ++j) {
        const int64_t c = mask.chunk_of[size_t(j)];
        size[size_t(c)]++;
        for (int64_t d = 0; d < D; ++d) mean[size_t(c * D + d)] += at(k, b, j, h, d);
      }
      for (int64_t c = 0; c < C; ++c)
        for (int64_t d = 0; d < D; ++d) mean[size_t(c * D + d)] /= double(size[size_t(c)]);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < C; ++c) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(q, b, i, h, d) * mean[size_t(c * D + d)];
          gate[size_t(b * H + h)][size_t(i * C + c)] = dot;
        }
    }
  mask.selected.assign(size_t(B * H), std::vector<char>(size_t(N * C), 0));
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < N; ++i)
      mask.selected[size_t(bh)][size_t(i * C + mask.chunk_of[size_t(i)])] = 1;

  const int64_t topk = std::min(cfg.topk, C);
  // A group: the (bh, i, c) entries it spans.
  struct Member {
    int64_t bh, i, c;
  };
  auto run_group = [&](const std::vector<Member>& members, int64_t queries) {
    std::vector<Scored> others;
    if (cfg.topk_mode) {
      for (size_t m = 0; m < members.size(); ++m) {
        const auto& e = members[m];
        if (e.c != mask.chunk_of[size_t(e.i)])
          others.push_back({gate[size_t(e.bh)][size_t(e.i * C + e.c)], int64_t(m)});
      }
      std::stable_sort(others.begin(), others.end(), [](const Scored& a, const Scored& b) {
        return a.value > b.value || (a.value == b.value && a.id < b.id);
      });
      const int64_t keep = std::min<int64_t>(int64_t(others.size()), (topk - 1) * queries);
      for (int64_t e = 0; e < keep; ++e) {
        const auto& m = members[size_t(others[size_t(e)].id)];
        mask.selected[size_t(m.bh)][size_t(m.i * C + m.c)] = 1;
      }
      return;
    }
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& e : members) {
      lo = std::min(lo, gate[size_t(e.bh)][size_t(e.i * C + e.c)]);
      hi = std::max(hi, gate[size_t(e.bh)][size_t(e.i * C + e.c)]);
    }
    const double range = hi - lo <= 1e-6 ? 1.0 : hi - lo;
    double total = 0, own = 0;
    for (size_t m = 0; m < members.size(); ++m) {
      const auto& e = members[m];
      const double value = (gate[size_t(e.bh)][size_t(e.i * C + e.c)] - lo) / range;
      total += value;
      if (e.c == mask.chunk_of[size_t(e.i)])
        own += value;
      else
        others.push_back({value, int64_t(m)});
    }
    const int64_t keep = threshold_keep(others, total, own, cfg.threshold);
    for (int64_t e = 0; e < keep; ++e) {
      const auto& m = members[size_t(others[size_t(e)].id)];
      mask.selected[size_t(m.bh)][size_t(m.i * C + m.c)] = 1;
    }
  };
  if (cfg.group == "query_head") {
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t i = 0; i < N; ++i) {
        std::vector<Member> members;
        for (int64_t c = 0; c < C; ++c) members.push_back({bh, i, c});
        run_group(members, 1);
      }
  } else if (cfg.group == "head_global") {
    for (int64_t bh = 0; bh < B * H; ++bh) {
      std::vector<Member> members;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < C; ++c) members.push_back({bh, i, c});
      run_group(members, N);
    }
  } else {
    for (int64_t b = 0; b < B; ++b) {
      std::vector<Member> members;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < N; ++i)
          for (int64_t c = 0; c < C; ++c) members.push_back({b * H + h, i, c});
      run_group(members, N * H);
    }
  }
  return mask;
}

// ---------------------------------------------------------------- running the backend

nlohmann::json settings(nlohmann::json overrides) {
  nlohmann::json base = {{"temporal_chunk_size", 1},
                         {"spatial_chunk_size", {2, 3}},
                         {"st_chunk_size", {2, 2, 3}},
                         {"first_full_step", 0},
                         {"temporal_topk", 2},
                         {"spatial_topk", 3},
                         {"st_topk", 4}};
  for (auto& [key, value] : overrides.items()) base[key] = value;
  return attention::validate_backend_config(base, "vmoba_attn");
}

Tensor run(const nlohmann::json& config, const Tensor& q, const Tensor& k, const Tensor& v,
           float scale, const Grid& grid, int64_t layer, int64_t step = 20, int64_t text = 0,
           AttentionStats* stats = nullptr) {
  auto backend = attention::make_dit_backend("vmoba_attn", config);
  AttentionContext context;
  context.grid = grid;
  context.layer_index = layer;
  context.step_index = step;
  context.num_steps = 50;
  context.text_length = text;
  return backend->forward(q, k, v, scale, context, stats);
}

// The chunk shape of a layer by the definition (cycle temporal, spatial, spatio-temporal).
Grid chunk_for_layer(const nlohmann::json& cfg, const Grid& grid, int64_t layer) {
  const int64_t r = (layer - cfg["first_full_layer"].get<int64_t>()) %
                    (cfg["temporal_layer"].get<int64_t>() + cfg["spatial_layer"].get<int64_t>() +
                     cfg["st_layer"].get<int64_t>());
  Grid c;
  if (r < cfg["temporal_layer"].get<int64_t>())
    c = {cfg["temporal_chunk_size"].get<int64_t>(), grid[1], grid[2]};
  else if (r < cfg["temporal_layer"].get<int64_t>() + cfg["spatial_layer"].get<int64_t>())
    c = {grid[0], cfg["spatial_chunk_size"][0].get<int64_t>(),
         cfg["spatial_chunk_size"][1].get<int64_t>()};
  else
    c = {cfg["st_chunk_size"][0].get<int64_t>(), cfg["st_chunk_size"][1].get<int64_t>(),
         cfg["st_chunk_size"][2].get<int64_t>()};
  for (int d = 0; d < 3; ++d) c[size_t(d)] = std::min(c[size_t(d)], grid[size_t(d)]);
  return c;
}

int64_t topk_for_layer(const nlohmann::json& cfg, int64_t layer) {
  const char* names[] = {"temporal_topk", "spatial_topk", "st_topk"};
  return cfg[names[layer % 3]].get<int64_t>();
}

struct Case {
  Grid grid;
  int64_t batch, heads, dim, text;
};

const std::vector<Case> kCases = {
    {{5, 6, 7}, 2, 2, 16, 0},  // no chunk size divides the grid
    {{4, 4, 6}, 1, 3, 8, 0},   // every chunk size divides it
    {{1, 5, 7}, 1, 2, 16, 0},  // a single frame
    {{3, 4, 5}, 1, 2, 16, 6},  // with text tokens after the video
    // Frames of 64 and 72 tokens: query blocks of a full 64 rows in both passes, and experts
    // with hundreds of queries per chunk.
    {{5, 8, 8}, 1, 2, 16, 5},
    {{4, 8, 9}, 2, 1, 8, 0},
};

void expect_matches_oracle(const nlohmann::json& overrides, bool expect_sparse) {
  const nlohmann::json cfg = settings(overrides);
  uint32_t seed = 1;
  double max_error = 0, min_density = 1;
  for (const Case& c : kCases)
    for (int64_t layer = 0; layer < 3; ++layer) {
      const int64_t S = c.grid[0] * c.grid[1] * c.grid[2] + c.text;
      const Tensor q = random_tensor({c.batch, S, c.heads, c.dim}, seed++);
      const Tensor k = random_tensor({c.batch, S, c.heads, c.dim}, seed++);
      const Tensor v = random_tensor({c.batch, S, c.heads, c.dim}, seed++);
      const float scale = 1.0f / std::sqrt(float(c.dim));
      OracleConfig oc;
      oc.chunk = chunk_for_layer(cfg, c.grid, layer);
      oc.topk_mode = cfg["moba_select_mode"] == "topk";
      oc.group = cfg["moba_threshold_type"].get<std::string>();
      oc.threshold = cfg["moba_threshold"].get<double>();
      oc.topk = topk_for_layer(cfg, layer);
      const OracleMask mask = build_oracle(q, k, c.grid, c.text, oc);
      const Tensor expected = masked_attention(
          q, k, v, scale,
          [&](int64_t b, int64_t h, int64_t i, int64_t j) { return mask(b, h, c.heads, i, j); });
      AttentionStats stats;
      const Tensor actual = run(cfg, q, k, v, scale, c.grid, layer, 20, c.text, &stats);
      const double error = testing::relative_error(actual, expected);
      SCOPED_TRACE(::testing::Message()
                   << "grid " << c.grid[0] << "x" << c.grid[1] << "x" << c.grid[2] << " text "
                   << c.text << " layer " << layer << " config " << overrides.dump());
      EXPECT_LT(error, 1e-5);
      // The oracle's own density, in the backend's unit ((query, chunk) pairs).
      int64_t chosen = 0;
      for (const auto& sel : mask.selected) chosen += std::accumulate(sel.begin(), sel.end(), 0);
      const int64_t total = c.batch * c.heads * mask.video * mask.count();
      EXPECT_EQ(stats.visited_blocks, chosen);
      EXPECT_EQ(stats.total_blocks, total);
      if (expect_sparse && mask.count() > 3) {
        EXPECT_LT(stats.density(), 1.0);
      }
      min_density = std::min(min_density, stats.density());
      max_error = std::max(max_error, error);
    }
  std::printf("  %s: max relative error %.3g, lowest density %.3f\n", overrides.dump().c_str(),
              max_error, min_density);
}

TEST(VmobaAttention, ChunkLayoutIsAPermutationWithPartialEdgeChunks) {
  const auto layout = attention::vmoba::make_chunk_layout({5, 6, 7}, {2, 4, 3});
  std::vector<int64_t> sorted = layout.order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 5 * 6 * 7; ++i) EXPECT_EQ(sorted[size_t(i)], i);
  EXPECT_EQ(layout.chunks.size(), 3 * 2 * 3);
  EXPECT_EQ(layout.chunks.length.front(), 2 * 4 * 3);
  EXPECT_EQ(layout.chunks.length.back(), 1 * 2 * 1);  // the corner chunk
  // Temporal chunking keeps the native order.
  const auto temporal = attention::vmoba::make_chunk_layout({3, 2, 2}, {2, 2, 2});
  for (size_t i = 0; i < temporal.order.size(); ++i) EXPECT_EQ(temporal.order[i], int64_t(i));
  EXPECT_EQ(temporal.chunks.length, (std::vector<int64_t>{8, 4}));
}

TEST(VmobaAttention, ThresholdOneEqualsDense) {
  const nlohmann::json cfg = settings({{"moba_threshold", 1.0}});
  uint32_t seed = 100;
  for (const Case& c : kCases)
    for (int64_t layer = 0; layer < 3; ++layer) {
      const int64_t S = c.grid[0] * c.grid[1] * c.grid[2] + c.text;
      const Tensor q = random_tensor({c.batch, S, c.heads, c.dim}, seed++);
      const Tensor k = random_tensor({c.batch, S, c.heads, c.dim}, seed++);
      const Tensor v = random_tensor({c.batch, S, c.heads, c.dim}, seed++);
      AttentionStats stats;
      const Tensor actual = run(cfg, q, k, v, 0.25f, c.grid, layer, 20, c.text, &stats);
      const double error = testing::relative_error(actual, dense(q, k, v, 0.25f));
      EXPECT_LT(error, 1e-5) << "layer " << layer;
      EXPECT_EQ(stats.density(), 1.0);
    }
}

TEST(VmobaAttention, TopkOfAllChunksEqualsDense) {
  for (const char* group : {"query_head", "head_global", "overall"}) {
    const nlohmann::json cfg = settings({{"moba_select_mode", "topk"},
                                         {"moba_threshold_type", group},
                                         {"temporal_topk", 1000},
                                         {"spatial_topk", 1000},
                                         {"st_topk", 1000}});
    const Case c = kCases[0];
    const int64_t S = c.grid[0] * c.grid[1] * c.grid[2];
    const Tensor q = random_tensor({c.batch, S, c.heads, c.dim}, 7);
    const Tensor k = random_tensor({c.batch, S, c.heads, c.dim}, 8);
    const Tensor v = random_tensor({c.batch, S, c.heads, c.dim}, 9);
    for (int64_t layer = 0; layer < 3; ++layer)
      EXPECT_LT(
          testing::relative_error(run(cfg, q, k, v, 0.25f, c.grid, layer), dense(q, k, v, 0.25f)),
          1e-5)
          << group << " layer " << layer;
  }
}

TEST(VmobaAttention, ThresholdQueryHeadMatchesMaskedOracle) {
  expect_matches_oracle({{"moba_threshold", 0.25}}, true);
  expect_matches_oracle({{"moba_threshold", 0.6}}, false);
}

TEST(VmobaAttention, ThresholdHeadGlobalAndOverallMatchMaskedOracle) {
  expect_matches_oracle({{"moba_threshold_type", "head_global"}, {"moba_threshold", 0.3}}, true);
  expect_matches_oracle({{"moba_threshold_type", "overall"}, {"moba_threshold", 0.3}}, true);
}

TEST(VmobaAttention, TopkMatchesMaskedOracle) {
  for (const char* group : {"query_head", "head_global", "overall"})
    expect_matches_oracle({{"moba_select_mode", "topk"}, {"moba_threshold_type", group}}, true);
}

TEST(VmobaAttention, CycleCountsAndFirstFullLayerShiftTheChunkKinds) {
  expect_matches_oracle(
      {{"temporal_layer", 2}, {"spatial_layer", 0}, {"st_layer", 1}, {"first_full_layer", 0}},
      false);
}

TEST(VmobaAttention, DenseBeforeFirstFullStepAndFirstFullLayer) {
  const Grid grid = {5, 6, 7};
  const int64_t S = 5 * 6 * 7;
  const Tensor q = random_tensor({1, S, 2, 16}, 11);
  const Tensor k = random_tensor({1, S, 2, 16}, 12);
  const Tensor v = random_tensor({1, S, 2, 16}, 13);
  const Tensor reference = dense(q, k, v, 0.25f);
  const nlohmann::json cfg = settings({{"first_full_step", 3}, {"first_full_layer", 2}});
  AttentionStats stats;
  EXPECT_LT(testing::relative_error(run(cfg, q, k, v, 0.25f, grid, 5, 2, 0, &stats), reference),
            1e-5);  // step 2 < 3
  EXPECT_EQ(stats.density(), 1.0);
  EXPECT_LT(testing::relative_error(run(cfg, q, k, v, 0.25f, grid, 1, 3), reference),
            1e-5);  // layer 1 < 2
  // From step 3, layer 2 on it is sparse (and then differs from dense).
  AttentionStats sparse;
  const Tensor out = run(cfg, q, k, v, 0.25f, grid, 4, 3, 0, &sparse);
  EXPECT_LT(sparse.density(), 1.0);
  EXPECT_GT(testing::relative_error(out, reference), 1e-3);
}

TEST(VmobaAttention, StridedInputsAndCrossAttention) {
  const Grid grid = {3, 4, 5};
  const int64_t S = 60;
  // q as a permuted view: [B, H, S, D] storage seen as [B, S, H, D].
  const Tensor q = random_tensor({1, 2, S, 16}, 21).permute({0, 2, 1, 3});
  const Tensor k = random_tensor({1, S, 2, 16}, 22);
  const Tensor v = random_tensor({1, S, 2, 16}, 23);
  const nlohmann::json cfg = settings({{"moba_threshold", 1.0}});
  EXPECT_LT(testing::relative_error(run(cfg, q, k, v, 0.25f, grid, 2),
                                    dense(q.contiguous(), k, v, 0.25f)),
            1e-5);
  auto backend = attention::make_dit_backend("vmoba_attn", settings({}));
  AttentionContext cross;
  cross.is_cross = true;
  const Tensor kt = random_tensor({1, 7, 2, 16}, 24), vt = random_tensor({1, 7, 2, 16}, 25);
  EXPECT_LT(testing::relative_error(backend->forward(q, kt, vt, 0.25f, cross),
                                    dense(q.contiguous(), kt, vt, 0.25f)),
            1e-5);
}

TEST(VmobaAttention, RejectsAGridThatDoesNotMatchTheSequence) {
  auto backend = attention::make_dit_backend("vmoba_attn", settings({}));
  const Tensor q = random_tensor({1, 50, 1, 8}, 1);
  AttentionContext context;
  context.grid = {2, 4, 5};
  context.step_index = 30;
  const std::string message =
      testing::error_message([&] { backend->forward(q, q, q, 1.0f, context); });
  EXPECT_NE(message.find("latent grid 2x4x5"), std::string::npos) << message;
}

// The wan-tiny transformer (grid 2x2x3 after patchify, 2 layers: a temporal and a spatial one)
// with vmoba_attn in every self-attention: at full density (threshold 1) it is the dense run and
// matches diffusers; sparse settings complete with finite output.
TEST(VmobaAttention, WanFixtureRunsAndMatchesDenseAtFullDensity) {
  MMGEN_REQUIRE_SHARED();
  const fs::path tiny = testing::shared_dir() / "fixtures" / "wan-tiny";
  const WeightStore reference =
      WeightStore::open_file(tiny / "reference" / "reference.safetensors");
  const dit::WanTransformer model = dit::WanTransformer::load(tiny / "model" / "transformer");
  const Tensor latents = reference.get_f32("transformer.hidden_states");
  const Tensor text = reference.get_f32("transformer.encoder_hidden_states");
  const Tensor expected = reference.get_f32("transformer.out_t999");
  const Tensor dense_run = model.forward(latents, 999.0f, text);
  auto run_model = [&](const nlohmann::json& overrides, AttentionStats* stats) {
    const nlohmann::json cfg = settings(overrides);
    attention::Layers attention = attention::layers_from(
        model.attention_stacks(), [&](const attention::StackTraits& stack, int64_t) {
          if (stack.name != dit::kWanSelfStack) return attention::Layer();  // dense reference
          return attention::Layer(attention::make_dit_backend("vmoba_attn", cfg));
        });
    const Tensor out =
        model.forward(latents, 999.0f, text, dit::WanStep{.index = 5, .count = 10}, &attention);
    *stats = attention.stats(dit::kWanSelfStack);
    return out;
  };
  const nlohmann::json small_chunks = {{"spatial_chunk_size", {1, 2}},
                                       {"st_chunk_size", {1, 1, 2}}};
  nlohmann::json full = small_chunks;
  full["moba_threshold"] = 1.0;
  AttentionStats stats;
  const Tensor out = run_model(full, &stats);
  EXPECT_EQ(stats.density(), 1.0);
  EXPECT_GT(stats.total_blocks, 0);
  const double vs_dense = testing::relative_error(out, dense_run);
  const double vs_diffusers = testing::relative_error(out, expected);
  EXPECT_LT(vs_dense, 1e-5);
  EXPECT_LT(vs_diffusers, 1e-5);
  std::printf("  wan-tiny, threshold 1: %.3g vs the dense run, %.3g vs diffusers\n", vs_dense,
              vs_diffusers);
  for (nlohmann::json sparse :
       {nlohmann::json{{"moba_threshold", 0.25}},
        nlohmann::json{{"moba_select_mode", "topk"}, {"temporal_topk", 1}, {"spatial_topk", 1}}}) {
    sparse.update(small_chunks);
    AttentionStats sparse_stats;
    const Tensor result = run_model(sparse, &sparse_stats);
    bool finite = true;
    for (int64_t i = 0; i < result.numel(); ++i) finite &= std::isfinite(result.data<float>()[i]);
    EXPECT_TRUE(finite);
    EXPECT_LT(sparse_stats.density(), 1.0) << sparse.dump();
    std::printf("  wan-tiny, %s: density %.3f, %.3g from the dense run\n", sparse.dump().c_str(),
                sparse_stats.density(), testing::relative_error(result, dense_run));
  }
}

}  // namespace
}  // namespace mmgen
