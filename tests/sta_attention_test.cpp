// sliding_tile_attn against a dense oracle with a token-level mask built here, straight from STA's
// definition (not from the backend's block lists): random inputs, grids that do not divide the
// tile, per-head windows, text tokens; full windows and the skipped steps equal dense attention;
// the even-window rule; mask-file errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/kernels/sta_tiling.h"
#include "core/error.h"
#include "core/random.h"
#include "pipeline/attention_plan.h"
#include "pipeline/model_index.h"
#include "pipeline/wan/wan_pipeline.h"
#include "tests/test_support.h"

namespace mmgen::attention {
namespace {

using json = nlohmann::json;
using Window = std::array<int32_t, 3>;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Dense softmax attention in double where query i sees key j only when visible(h, i, j).
using Visible = std::function<bool(int64_t head, int64_t query, int64_t key)>;
Tensor masked_dense(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                    const Visible& visible) {
  const int64_t batch = q.size(0), length = q.size(1), heads = q.size(2), dim = q.size(3);
  Tensor out = Tensor::zeros(q.shape());
  const Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const auto row = [&](const Tensor& x, int64_t b, int64_t i, int64_t h) {
    return x.data<float>() + ((b * length + i) * heads + h) * dim;
  };
  std::vector<double> weight(static_cast<size_t>(length));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < length; ++i) {
        double top = -INFINITY;
        for (int64_t j = 0; j < length; ++j) {
          weight[size_t(j)] = -INFINITY;
          if (!visible(h, i, j)) continue;
          const float *qi = row(qc, b, i, h), *kj = row(kc, b, j, h);
          double s = 0;
          for (int64_t d = 0; d < dim; ++d) s += double(qi[d]) * double(kj[d]);
          weight[size_t(j)] = s * scale;
          top = std::max(top, weight[size_t(j)]);
        }
        double total = 0;
        std::vector<double> acc(size_t(dim), 0.0);
        for (int64_t j = 0; j < length; ++j) {
          if (weight[size_t(j)] == -INFINITY) continue;
          const double p = std::exp(weight[size_t(j)] - top);
          total += p;
          const float* vj = row(vc, b, j, h);
          for (int64_t d = 0; d < dim; ++d) acc[size_t(d)] += p * double(vj[d]);
        }
        float* o = out.data<float>() + ((b * length + i) * heads + h) * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] = float(acc[size_t(d)] / total);
      }
  return out;
}

// The first tile of the window along one axis, from the definition: the window covers
// min(w, n) tiles, starts w/2 tiles before the query tile and is pushed back onto the canvas.
int64_t window_first(int64_t query_tile, int64_t w, int64_t n) {
  const int64_t covered = std::min(w, n);
  int64_t first = query_tile - w / 2;
  if (first + covered > n) first = n - covered;
  if (first < 0) first = 0;
  return first;
}

struct Case {
  std::array<int64_t, 3> grid;
  std::array<int64_t, 3> tile;
  int64_t text;
  std::vector<Window> windows;  // per head
};

// The STA token mask: video query -> video key when the key's tile lies in the query tile's
// window on all three axes; anything -> text, and text -> anything.
Visible sta_mask(const Case& c) {
  const int64_t video = c.grid[0] * c.grid[1] * c.grid[2];
  return [c, video](int64_t head, int64_t i, int64_t j) {
    if (i >= video || j >= video) return true;
    const int64_t qi[3] = {i / (c.grid[1] * c.grid[2]), (i / c.grid[2]) % c.grid[1], i % c.grid[2]};
    const int64_t kj[3] = {j / (c.grid[1] * c.grid[2]), (j / c.grid[2]) % c.grid[1], j % c.grid[2]};
    for (int a = 0; a < 3; ++a) {
      const int64_t n = (c.grid[a] + c.tile[a] - 1) / c.tile[a];
      const int64_t w = c.windows[size_t(head)][size_t(a)];
      const int64_t first = window_first(qi[a] / c.tile[a], w, n);
      const int64_t key_tile = kj[a] / c.tile[a];
      if (key_tile < first || key_tile >= first + std::min(w, n)) return false;
    }
    return true;
  };
}

fs::path write_mask(const std::string& name, const json& document) {
  const fs::path path = testing::scratch_dir("sta-" + name) / "mask.json";
  std::ofstream(path) << document.dump();
  return path;
}

// A mask file giving `windows` (per head) to every step in [0, steps) of layer `layer`.
fs::path mask_for(const std::string& name, const std::vector<Window>& windows, int64_t steps = 3,
                  int64_t layer = 1) {
  json document = json::object();
  for (int64_t t = 0; t < steps; ++t)
    for (size_t h = 0; h < windows.size(); ++h)
      document[fmt::format("{}_{}_{}", t, layer, h)] = {windows[h][0], windows[h][1],
                                                        windows[h][2]};
  return write_mask(name, document);
}

std::unique_ptr<AttentionBackend> make_sta(const fs::path& mask, int64_t skip,
                                           std::optional<std::array<int64_t, 3>> tile = {}) {
  json settings = {{"mask_strategy_file_path", mask.string()}, {"skip_time_steps", skip}};
  if (tile) settings["tile_size"] = {(*tile)[0], (*tile)[1], (*tile)[2]};
  return make_dit_backend("sliding_tile_attn",
                          validate_backend_config(settings, "sliding_tile_attn"));
}

struct Inputs {
  Tensor q, k, v;
};
Inputs random_inputs(uint64_t seed, int64_t batch, int64_t length, int64_t heads, int64_t dim) {
  TorchCpuGenerator generator(seed);
  return {generator.randn({batch, length, heads, dim}),
          generator.randn({batch, length, heads, dim}),
          generator.randn({batch, length, heads, dim})};
}

AttentionContext context_for(const Case& c, int64_t step = 2, int64_t layer = 1) {
  AttentionContext context;
  context.step_index = step;
  context.num_steps = 3;
  context.layer_index = layer;
  context.num_layers = 2;
  context.grid = c.grid;
  context.text_length = c.text;
  return context;
}

// ------------------------------------------------------------------ window rule

TEST(StaWindow, OddAndFullWindowsMatchTheReferenceSpan) {
  // The reference: centre = clamp(q, w/2, n-1-w/2) (lower bound wins when they cross), keys with
  // |centre - key| <= w/2, clipped to the canvas.
  for (int64_t n = 1; n <= 9; ++n)
    for (int64_t w = 1; w <= n + 2; ++w) {
      if (w % 2 == 0 && w < n) continue;  // even windows differ on purpose (next test)
      for (int64_t q = 0; q < n; ++q) {
        const int64_t half = w / 2;
        const int64_t centre = std::max(half, std::min(q, n - 1 - half));
        const int64_t first = std::max<int64_t>(0, centre - half);
        const int64_t last = std::min(n - 1, centre + half);
        const AxisSpan span = window_span(q, w, n);
        EXPECT_EQ(span.first, first) << "n=" << n << " w=" << w << " q=" << q;
        EXPECT_EQ(span.count, last - first + 1) << "n=" << n << " w=" << w << " q=" << q;
      }
    }
}

TEST(StaWindow, EvenWindowsCoverExactlyTheirTiles) {
  for (int64_t n = 3; n <= 9; ++n)
    for (int64_t w = 2; w < n; w += 2)
      for (int64_t q = 0; q < n; ++q) {
        const AxisSpan span = window_span(q, w, n);
        EXPECT_EQ(span.count, w) << "the reference would cover w + 1 tiles";
        EXPECT_GE(span.first, 0);
        EXPECT_LE(span.first + span.count, n);
        EXPECT_TRUE(q >= span.first && q < span.first + span.count) << "the query's own tile";
      }
}

TEST(StaTiling, RoundTripAndPartialEdgeTiles) {
  const BoxTiling tiling = tile_video({7, 10, 9}, {6, 8, 8}, 5);
  EXPECT_EQ(tiling.boxes, (Grid3{2, 2, 2}));
  EXPECT_EQ(tiling.video_blocks.length,
            (std::vector<int64_t>{384, 6 * 8 * 1, 6 * 2 * 8, 6 * 2 * 1, 1 * 8 * 8, 1 * 8 * 1,
                                  1 * 2 * 8, 1 * 2 * 1}));
  std::vector<int64_t> sorted = tiling.order;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], int64_t(i));
  const Inputs x = random_inputs(3, 2, 7 * 10 * 9 + 5, 2, 3);
  const Tensor back = scatter_tokens(gather_tokens(x.q, tiling.order), tiling.order, x.q.size(1));
  EXPECT_EQ(testing::max_abs_diff(back, x.q), 0.0);
}

// ------------------------------------------------------------------ against the oracle

void expect_matches_oracle(const Case& c, uint64_t seed, const std::string& name) {
  const int64_t heads = int64_t(c.windows.size()), dim = 16;
  const int64_t length = c.grid[0] * c.grid[1] * c.grid[2] + c.text;
  const Inputs x = random_inputs(seed, 2, length, heads, dim);
  const float scale = 1.0f / std::sqrt(float(dim));
  auto backend = make_sta(mask_for(name, c.windows), 1, c.tile);
  AttentionStats stats;
  const Tensor out = backend->forward(x.q, x.k, x.v, scale, context_for(c), &stats);
  const Tensor expected = masked_dense(x.q, x.k, x.v, scale, sta_mask(c));
  const double error = testing::relative_error(out, expected);
  EXPECT_LT(error, 1e-5) << name;
  std::printf(
      "[ sta ] %-28s grid %lldx%lldx%lld tile %lldx%lldx%lld text %lld: rel err %.2e, "
      "density %.3f\n",
      name.c_str(), (long long)c.grid[0], (long long)c.grid[1], (long long)c.grid[2],
      (long long)c.tile[0], (long long)c.tile[1], (long long)c.tile[2], (long long)c.text, error,
      stats.density());
  EXPECT_LT(stats.density(), 1.0) << name;
}

TEST(StaAttention, MatchesMaskedDenseOnRandomInputs) {
  // Small tiles so the windows have room to slide; grids that do not divide the tile.
  expect_matches_oracle({{5, 7, 9}, {2, 2, 2}, 0, {{1, 1, 1}, {3, 3, 3}, {2, 2, 4}}}, 1,
                        "small-tiles-per-head");
  expect_matches_oracle({{5, 7, 9}, {2, 2, 2}, 11, {{1, 3, 5}, {3, 1, 2}}}, 2, "small-tiles-text");
  expect_matches_oracle({{8, 12, 9}, {2, 3, 3}, 0, {{2, 2, 2}}}, 3, "dividing-even-windows");
  expect_matches_oracle({{3, 5, 7}, {1, 2, 3}, 4, {{2, 1, 3}, {9, 9, 1}}}, 4,
                        "oversized-axis-window");
}

TEST(StaAttention, DefaultTilesOnAGridThatDoesNotDivide) {
  // 6x8x8 tiles over 7x10x17: 2x2x3 tiles, every edge tile partial; 6 text tokens.
  expect_matches_oracle({{7, 10, 17}, {6, 8, 8}, 6, {{1, 1, 1}, {1, 2, 3}}}, 5, "default-tile");
}

TEST(StaAttention, FullWindowsEqualDenseAttention) {
  for (int64_t text : {0, 5}) {
    const Case c{{5, 6, 7}, {2, 2, 2}, text, {{3, 3, 4}, {7, 9, 9}}};  // exactly full, then larger
    const Inputs x = random_inputs(7, 1, 5 * 6 * 7 + text, 2, 8);
    AttentionStats stats;
    const Tensor out = make_sta(mask_for("full", c.windows), 0, c.tile)
                           ->forward(x.q, x.k, x.v, 0.3f, context_for(c), &stats);
    const Tensor dense =
        masked_dense(x.q, x.k, x.v, 0.3f, [](int64_t, int64_t, int64_t) { return true; });
    const double error = testing::relative_error(out, dense);
    EXPECT_LT(error, 1e-5);
    EXPECT_EQ(stats.density(), 1.0);
    std::printf("[ sta ] full windows, text %lld: rel err vs dense %.2e\n", (long long)text, error);
  }
}

TEST(StaAttention, SkippedStepsAreDenseAndLaterStepsAreNot) {
  const Case c{{4, 6, 6}, {2, 2, 2}, 0, {{1, 1, 1}}};
  const Inputs x = random_inputs(8, 1, 4 * 6 * 6, 1, 8);
  auto backend = make_sta(mask_for("skip", c.windows, 4), 2, c.tile);
  const Tensor dense =
      masked_dense(x.q, x.k, x.v, 0.5f, [](int64_t, int64_t, int64_t) { return true; });
  const Tensor sparse = masked_dense(x.q, x.k, x.v, 0.5f, sta_mask(c));
  for (int64_t step = 0; step < 4; ++step) {
    AttentionStats stats;
    const Tensor out = backend->forward(x.q, x.k, x.v, 0.5f, context_for(c, step), &stats);
    EXPECT_LT(testing::relative_error(out, step < 2 ? dense : sparse), 1e-5) << "step " << step;
    EXPECT_EQ(stats.density() == 1.0, step < 2) << "step " << step;
  }
}

TEST(StaAttention, StatsCountKeyTilesVisited) {
  // 3x3x3 tiles, window 1x1x1: each of 27 query tiles visits one key tile.
  const Case c{{6, 6, 6}, {2, 2, 2}, 0, {{1, 1, 1}}};
  const Inputs x = random_inputs(9, 2, 216, 1, 4);
  AttentionStats stats;
  make_sta(mask_for("stats", c.windows), 0, c.tile)
      ->forward(x.q, x.k, x.v, 1.0f, context_for(c), &stats);
  EXPECT_EQ(stats.visited_blocks, 2 * 27);
  EXPECT_EQ(stats.total_blocks, 2 * 27 * 27);
}

TEST(StaAttention, NonVideoCallsAreDense) {
  const Inputs x = random_inputs(10, 1, 50, 2, 8);
  AttentionContext context;  // grid {0, 0, 0}
  context.step_index = 2;
  const Tensor out = make_sta(mask_for("nonvideo", {{1, 1, 1}, {1, 1, 1}}), 0)
                         ->forward(x.q, x.k, x.v, 0.4f, context);
  const Tensor dense =
      masked_dense(x.q, x.k, x.v, 0.4f, [](int64_t, int64_t, int64_t) { return true; });
  EXPECT_LT(testing::relative_error(out, dense), 1e-5);
}

// ------------------------------------------------------------------ errors

TEST(StaErrors, MaskFileProblemsAreReported) {
  const auto load = [](const fs::path& path) { make_sta(path, 0); };
  EXPECT_NE(error_of([&] { load("/nonexistent/mask.json"); }).find("/nonexistent/mask.json"),
            std::string::npos);
  const fs::path bad_key = write_mask("bad-key", {{"0-1-2", {1, 1, 1}}});
  EXPECT_NE(error_of([&] { load(bad_key); }).find("step_layer_head"), std::string::npos);
  const fs::path bad_window = write_mask("bad-window", {{"0_0_0", {1, 0, 1}}});
  EXPECT_NE(error_of([&] { load(bad_window); }).find("window"), std::string::npos);
  const fs::path short_window = write_mask("short-window", {{"0_0_0", {1, 2}}});
  EXPECT_NE(error_of([&] { load(short_window); }).find("window"), std::string::npos);
  const fs::path empty = write_mask("empty", json::object());
  EXPECT_NE(error_of([&] { load(empty); }).find("no windows"), std::string::npos);
  const fs::path not_json = testing::scratch_dir("sta-not-json") / "mask.json";
  std::ofstream(not_json) << "{ not json";
  EXPECT_NE(error_of([&] { load(not_json); }), "");
}

TEST(StaErrors, MissingWindowAtCallTimeNamesTheEntry) {
  const Case c{{4, 4, 4}, {2, 2, 2}, 0, {{1, 1, 1}, {1, 1, 1}}};
  auto backend = make_sta(mask_for("missing-head", {{1, 1, 1}}), 0, c.tile);  // one head only
  const Inputs x = random_inputs(11, 1, 64, 2, 4);
  const std::string message =
      error_of([&] { backend->forward(x.q, x.k, x.v, 1.0f, context_for(c)); });
  EXPECT_NE(message.find("\"2_1_1\""), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST(StaErrors, GridThatDoesNotMatchTheSequenceAndUnsupportedModes) {
  const Case c{{4, 4, 4}, {2, 2, 2}, 3, {{1, 1, 1}}};
  auto backend = make_sta(mask_for("grid", c.windows), 0, c.tile);
  const Inputs x = random_inputs(12, 1, 66, 1, 4);  // 64 video tokens + 2: neither 64 nor 67
  EXPECT_NE(error_of([&] { backend->forward(x.q, x.k, x.v, 1.0f, context_for(c)); }).find("grid"),
            std::string::npos);
  // The video tokens alone (Wan reports its prompt length for self-attention too): no text.
  const Inputs video = random_inputs(13, 1, 64, 1, 4);
  Case without_text = c;
  without_text.text = 0;
  EXPECT_EQ(testing::max_abs_diff(
                backend->forward(video.q, video.k, video.v, 1.0f, context_for(c)),
                backend->forward(video.q, video.k, video.v, 1.0f, context_for(without_text))),
            0.0);
  const json searching =
      validate_backend_config({{"mask_strategy_file_path", mask_for("mode", c.windows).string()},
                               {"sta_mode", "STA_tuning"}},
                              "sliding_tile_attn");
  EXPECT_NE(
      error_of([&] { make_dit_backend("sliding_tile_attn", searching); }).find("STA_inference"),
      std::string::npos);
}

// ------------------------------------------------------------------ the Wan pipeline

// examples/models/wan-tiny (2 layers, 2 heads, patch 1x2x2) at 64x96, 9 frames: a 3x4x6 latent
// grid, 2 steps with guidance. Returns the latents after each step.
std::vector<Tensor> run_wan_tiny(const std::string& backend, const json& config) {
  Request request;
  request.attention_backend = backend;
  request.attention_backend_config = config;
  request.num_inference_steps = 2;
  const ModelIndex index = load_model_index(testing::source_dir() / "examples/models/wan-tiny");
  const WanPipeline pipeline(index, plan_attention(index, request));
  EXPECT_EQ(pipeline.attention_plan().main_backend, backend);
  WanGenerationInput input;
  input.prompt = "a red fox running through snow";
  input.negative_prompt = "blurry";
  input.height = 64;
  input.width = 96;
  input.num_frames = 9;
  input.num_inference_steps = 2;
  input.guidance_scale = 5.0;
  input.max_sequence_length = 16;
  input.seed = 7;
  return pipeline.generate(input, /*keep_step_latents=*/true).latents_after_step;
}

// Every (step, layer, head) of the run gets `window`.
fs::path wan_tiny_mask(const std::string& name, const Window& window) {
  json document = json::object();
  for (int t = 0; t < 2; ++t)
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h)
        document[fmt::format("{}_{}_{}", t, l, h)] = {window[0], window[1], window[2]};
  return write_mask(name, document);
}

TEST(StaWanPipeline, FullWindowsMatchTheDenseRunAndSparseWindowsComplete) {
  const std::vector<Tensor> dense = run_wan_tiny("torch_sdpa", json());
  // Tiles of 1x2x2 latent tokens: a 3x2x3 tile grid.
  const json full = {{"mask_strategy_file_path", wan_tiny_mask("wan-full", {3, 2, 3}).string()},
                     {"skip_time_steps", 0},
                     {"tile_size", {1, 2, 2}}};
  const std::vector<Tensor> sta_full = run_wan_tiny("sliding_tile_attn", full);
  ASSERT_EQ(sta_full.size(), dense.size());
  for (size_t k = 0; k < dense.size(); ++k) {
    const double error = testing::relative_error(sta_full[k], dense[k]);
    EXPECT_LT(error, 1e-5) << "step " << k;
    std::printf("[ sta ] wan-tiny full windows, step %zu: rel err vs dense %.2e\n", k, error);
  }
  json sparse = full;
  sparse["mask_strategy_file_path"] = wan_tiny_mask("wan-sparse", {1, 1, 3}).string();
  const std::vector<Tensor> sta_sparse = run_wan_tiny("sliding_tile_attn", sparse);
  ASSERT_EQ(sta_sparse.size(), dense.size());
  const double difference = testing::relative_error(sta_sparse.back(), dense.back());
  EXPECT_GT(difference, 1e-4) << "a 1x1x3 window is not dense attention";
  EXPECT_TRUE(std::isfinite(difference));
  std::printf("[ sta ] wan-tiny 1x1x3 windows: rel diff vs dense %.2e\n", difference);
}

}  // namespace
}  // namespace mmgen::attention
