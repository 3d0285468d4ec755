// video_sparse_attn against an oracle written here from VSA's definition (cube means, coarse
// softmax, top-k cubes by coarse score, token-masked fine attention, gated sum), all in double,
// on random inputs over grids that do not divide the 4x4x4 cube, with and without text tokens;
// sparsity 0 with no gate equals dense attention; the gate path and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/backends/video_sparse_attn/vsa_coarse.h"
#include "attention/backends/video_sparse_attn/vsa_gate.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/random.h"
#include "pipeline/attention_plan.h"
#include "pipeline/model_index.h"
#include "pipeline/wan/wan_pipeline.h"
#include "tests/test_support.h"

namespace mmgen::attention {
namespace {

using json = nlohmann::json;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
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

// x[b, i, h, d] of a contiguous float32 [B, S, H, D] tensor.
double at(const Tensor& x, int64_t b, int64_t i, int64_t h, int64_t d) {
  return double(x.data<float>()[((b * x.size(1) + i) * x.size(2) + h) * x.size(3) + d]);
}

// The VSA oracle. Cube of a video token = (t/4, h/4, w/4) in row-major cube order. Optional gate
// [B, S, H, D] (undefined = zero).
Tensor vsa_oracle(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& gate_in,
                  double scale, std::array<int64_t, 3> grid, int64_t text, double sparsity) {
  const Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const Tensor gate = gate_in.defined() ? gate_in.contiguous().reshape(q.shape()) : Tensor();
  const int64_t batch = q.size(0), length = q.size(1), heads = q.size(2), dim = q.size(3);
  const int64_t video = grid[0] * grid[1] * grid[2];
  const int64_t ct = (grid[0] + 3) / 4, ch = (grid[1] + 3) / 4, cw = (grid[2] + 3) / 4;
  const int64_t cubes = ct * ch * cw;
  std::vector<int64_t> cube_of(static_cast<size_t>(video));
  std::vector<int64_t> members(static_cast<size_t>(cubes), 0);
  for (int64_t i = 0; i < video; ++i) {
    const int64_t t = i / (grid[1] * grid[2]), y = (i / grid[2]) % grid[1], x = i % grid[2];
    cube_of[size_t(i)] = ((t / 4) * ch + y / 4) * cw + x / 4;
    ++members[size_t(cube_of[size_t(i)])];
  }
  int64_t topk = int64_t(std::ceil((1.0 - sparsity) * double(cubes)));
  topk = std::min(std::max<int64_t>(topk, 1), cubes);

  Tensor out = Tensor::zeros(q.shape());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      // Cube means.
      std::vector<std::vector<double>> qc(static_cast<size_t>(cubes),
                                          std::vector<double>(static_cast<size_t>(dim), 0.0)),
          kc = qc, vc = qc;
      for (int64_t i = 0; i < video; ++i)
        for (int64_t d = 0; d < dim; ++d) {
          const size_t c = size_t(cube_of[size_t(i)]);
          qc[c][size_t(d)] += at(q, b, i, h, d) / double(members[c]);
          kc[c][size_t(d)] += at(k, b, i, h, d) / double(members[c]);
          vc[c][size_t(d)] += at(v, b, i, h, d) / double(members[c]);
        }
      // Coarse scores, coarse output and top-k per query cube.
      std::vector<std::vector<double>> coarse(static_cast<size_t>(cubes),
                                              std::vector<double>(static_cast<size_t>(dim), 0.0));
      std::vector<std::vector<bool>> selected(static_cast<size_t>(cubes),
                                              std::vector<bool>(static_cast<size_t>(cubes)));
      for (int64_t i = 0; i < cubes; ++i) {
        std::vector<double> score(static_cast<size_t>(cubes));
        for (int64_t j = 0; j < cubes; ++j) {
          double s = 0;
          for (int64_t d = 0; d < dim; ++d)
            s += qc[size_t(i)][size_t(d)] * kc[size_t(j)][size_t(d)];
          score[size_t(j)] = s * scale;
        }
        const double top = *std::max_element(score.begin(), score.end());
        double total = 0;
        for (double s : score) total += std::exp(s - top);
        for (int64_t j = 0; j < cubes; ++j)
          for (int64_t d = 0; d < dim; ++d)
            coarse[size_t(i)][size_t(d)] +=
                std::exp(score[size_t(j)] - top) / total * vc[size_t(j)][size_t(d)];
        std::vector<int64_t> ranked(static_cast<size_t>(cubes));
        std::iota(ranked.begin(), ranked.end(), 0);
        std::stable_sort(ranked.begin(), ranked.end(),
                         [&](int64_t a, int64_t c) { return score[size_t(a)] > score[size_t(c)]; });
        for (int64_t r = 0; r < topk; ++r) selected[size_t(i)][size_t(ranked[size_t(r)])] = true;
      }
      // Fine branch with the token-level mask, plus the gated coarse output.
      for (int64_t i = 0; i < length; ++i) {
        std::vector<double> weight(static_cast<size_t>(length), -INFINITY);
        double top = -INFINITY;
        for (int64_t j = 0; j < length; ++j) {
          const bool visible = i >= video || j >= video ||
                               selected[size_t(cube_of[size_t(i)])][size_t(cube_of[size_t(j)])];
          if (!visible) continue;
          double s = 0;
          for (int64_t d = 0; d < dim; ++d) s += at(q, b, i, h, d) * at(k, b, j, h, d);
          weight[size_t(j)] = s * scale;
          top = std::max(top, weight[size_t(j)]);
        }
        double total = 0;
        std::vector<double> acc(static_cast<size_t>(dim), 0.0);
        for (int64_t j = 0; j < length; ++j) {
          if (weight[size_t(j)] == -INFINITY) continue;
          const double p = std::exp(weight[size_t(j)] - top);
          total += p;
          for (int64_t d = 0; d < dim; ++d) acc[size_t(d)] += p * at(v, b, j, h, d);
        }
        float* o = out.data<float>() + ((b * length + i) * heads + h) * dim;
        for (int64_t d = 0; d < dim; ++d) {
          double value = acc[size_t(d)] / total;
          if (gate.defined() && i < video)
            value += coarse[size_t(cube_of[size_t(i)])][size_t(d)] * at(gate, b, i, h, d);
          o[d] = float(value);
        }
      }
    }
  return out;
}

std::unique_ptr<AttentionBackend> make_vsa(double sparsity) {
  return make_dit_backend("video_sparse_attn",
                          validate_backend_config({{"sparsity", sparsity}}, "video_sparse_attn"));
}

AttentionContext context_for(std::array<int64_t, 3> grid, int64_t text,
                             const LayerWeights* weights = nullptr) {
  AttentionContext context;
  context.grid = grid;
  context.text_length = text;
  context.weights = weights;
  return context;
}

struct Case {
  std::array<int64_t, 3> grid;
  int64_t text;
  double sparsity;
  bool gated;
};

void expect_matches_oracle(const Case& c, uint64_t seed) {
  const int64_t heads = 2, dim = 16, batch = 2;
  const int64_t length = c.grid[0] * c.grid[1] * c.grid[2] + c.text;
  const Inputs x = random_inputs(seed, batch, length, heads, dim);
  const float scale = 1.0f / std::sqrt(float(dim));
  LayerWeights weights;
  Tensor gate;
  if (c.gated) {
    gate = TorchCpuGenerator(seed + 100).randn({batch, length, heads, dim});
    weights[kVsaGateKey] = gate;
  }
  AttentionStats stats;
  const Tensor out =
      make_vsa(c.sparsity)
          ->forward(x.q, x.k, x.v, scale, context_for(c.grid, c.text, &weights), &stats);
  const Tensor expected = vsa_oracle(x.q, x.k, x.v, gate, scale, c.grid, c.text, c.sparsity);
  const double error = testing::relative_error(out, expected);
  EXPECT_LT(error, 1e-5);
  std::printf(
      "[ vsa ] grid %lldx%lldx%lld text %lld sparsity %.2f gate %d: rel err %.2e, "
      "density %.3f\n",
      (long long)c.grid[0], (long long)c.grid[1], (long long)c.grid[2], (long long)c.text,
      c.sparsity, int(c.gated), error, stats.density());
}

TEST(VsaTopk, FormulaAndClamp) {
  EXPECT_EQ(vsa_topk(0.0, 10), 10);
  EXPECT_EQ(vsa_topk(0.5, 10), 5);
  EXPECT_EQ(vsa_topk(0.9, 624), 63);  // ceil(62.4)
  EXPECT_EQ(vsa_topk(0.999, 10), 1);  // at least one cube
  EXPECT_EQ(vsa_topk(0.0, 1), 1);
}

TEST(VsaAttention, MatchesTheOracleOnRandomInputs) {
  uint64_t seed = 1;
  for (const Case& c : std::vector<Case>{{{4, 8, 8}, 0, 0.5, true},
                                         {{5, 6, 7}, 0, 0.7, true},
                                         {{5, 6, 7}, 9, 0.7, true},
                                         {{3, 9, 10}, 0, 0.9, false},
                                         {{2, 5, 13}, 4, 0.6, false},
                                         {{1, 6, 9}, 0, 0.8, true}})
    expect_matches_oracle(c, seed++);
}

TEST(VsaAttention, AllCubesAndNoGateIsDenseAttention) {
  for (int64_t text : {0, 6}) {
    const std::array<int64_t, 3> grid = {5, 6, 7};
    const int64_t length = 5 * 6 * 7 + text;
    const Inputs x = random_inputs(20 + uint64_t(text), 1, length, 2, 16);
    AttentionStats stats;
    const Tensor out =
        make_vsa(0.0)->forward(x.q, x.k, x.v, 0.25f, context_for(grid, text), &stats);
    // Dense, straight: no cubes, no gate.
    const Tensor dense = vsa_oracle(x.q, x.k, x.v, Tensor(), 0.25, {1, 1, length}, 0, 0.0);
    const double error = testing::relative_error(out, dense);
    EXPECT_LT(error, 1e-5);
    EXPECT_EQ(stats.density(), 1.0);
    std::printf("[ vsa ] sparsity 0, no gate, text %lld: rel err vs dense %.2e\n", (long long)text,
                error);
  }
}

TEST(VsaAttention, SparsityZeroWithAGateIsNotDense) {
  // The coarse branch is still added (as upstream): the output differs from dense attention.
  const std::array<int64_t, 3> grid = {4, 4, 8};
  const Inputs x = random_inputs(30, 1, 128, 1, 8);
  LayerWeights weights{{kVsaGateKey, Tensor::full({1, 128, 1, 8}, 1.0f)}};
  const Tensor gated = make_vsa(0.0)->forward(x.q, x.k, x.v, 0.3f, context_for(grid, 0, &weights));
  const Tensor plain = make_vsa(0.0)->forward(x.q, x.k, x.v, 0.3f, context_for(grid, 0));
  EXPECT_GT(testing::max_abs_diff(gated, plain), 1e-3);
  EXPECT_LT(testing::relative_error(
                gated, vsa_oracle(x.q, x.k, x.v, weights[kVsaGateKey], 0.3, grid, 0, 0.0)),
            1e-5);
}

TEST(VsaAttention, GateFromTheProjectionOfTheAttentionInput) {
  // vsa_gate applies to_gate_compress to the attention input; the backend uses it as given.
  const int64_t batch = 1, heads = 2, dim = 8, length = 3 * 5 * 6;
  const std::array<int64_t, 3> grid = {3, 5, 6};
  TorchCpuGenerator generator(40);
  const Tensor hidden = generator.randn({batch, length, heads * dim});
  LayerWeights layer{{kVsaGateWeightKey, generator.randn({heads * dim, heads * dim})},
                     {kVsaGateBiasKey, generator.randn({heads * dim})}};
  const Tensor gate = vsa_gate(layer, hidden, heads);
  ASSERT_EQ(gate.shape(), (Shape{batch, length, heads, dim}));
  const Tensor expected_gate =
      ops::linear(hidden, layer[kVsaGateWeightKey], layer[kVsaGateBiasKey]);
  EXPECT_EQ(testing::max_abs_diff(gate.reshape({batch, length, heads * dim}), expected_gate), 0.0);

  const Inputs x = random_inputs(41, batch, length, heads, dim);
  LayerWeights call{{kVsaGateKey, expected_gate}};  // the flat [B, S, H*D] form is accepted too
  const Tensor out = make_vsa(0.5)->forward(x.q, x.k, x.v, 0.35f, context_for(grid, 0, &call));
  const Tensor expected = vsa_oracle(x.q, x.k, x.v, gate, 0.35, grid, 0, 0.5);
  EXPECT_LT(testing::relative_error(out, expected), 1e-5);

  // Given the layer's projection and the attention input instead (what attention::Layer hands
  // it), the backend computes the same gate itself: the same output to the bit.
  AttentionContext from_input = context_for(grid, 0, &layer);
  from_input.attention_input = &hidden;
  const Tensor computed = make_vsa(0.5)->forward(x.q, x.k, x.v, 0.35f, from_input);
  EXPECT_EQ(testing::max_abs_diff(computed, out), 0.0);
  EXPECT_TRUE(make_vsa(0.5)->reads_attention_input(layer));
  EXPECT_FALSE(make_vsa(0.5)->reads_attention_input(LayerWeights{}));

  // A zero gate is the same as no gate.
  LayerWeights zero{{kVsaGateKey, Tensor::zeros({batch, length, heads, dim})}};
  const Tensor zero_out = make_vsa(0.5)->forward(x.q, x.k, x.v, 0.35f, context_for(grid, 0, &zero));
  const Tensor no_gate = make_vsa(0.5)->forward(x.q, x.k, x.v, 0.35f, context_for(grid, 0));
  EXPECT_EQ(testing::max_abs_diff(zero_out, no_gate), 0.0);

  // No projection in the layer: no gate.
  EXPECT_FALSE(vsa_gate(LayerWeights{}, hidden, heads).defined());
}

TEST(VsaAttention, StatsCountSelectedCubes) {
  // 2x2x2 cubes = 8; sparsity 0.5 keeps 4 per query cube.
  const Inputs x = random_inputs(50, 2, 512, 3, 4);
  AttentionStats stats;
  make_vsa(0.5)->forward(x.q, x.k, x.v, 0.5f, context_for({8, 8, 8}, 0), &stats);
  EXPECT_EQ(stats.visited_blocks, 2 * 3 * 8 * 4);
  EXPECT_EQ(stats.total_blocks, 2 * 3 * 8 * 8);
}

TEST(VsaErrors, ProjectionWithoutAComputedGateAndBadShapes) {
  const Inputs x = random_inputs(60, 1, 64, 1, 4);
  LayerWeights projection{{kVsaGateWeightKey, Tensor::zeros({4, 4})}};
  const std::string message = error_of([&] {
    make_vsa(0.5)->forward(x.q, x.k, x.v, 1.0f, context_for({4, 4, 4}, 0, &projection));
  });
  EXPECT_NE(message.find("vsa_gate"), std::string::npos) << message;
  LayerWeights wrong{{kVsaGateKey, Tensor::zeros({1, 63, 1, 4})}};
  EXPECT_NE(error_of([&] {
              make_vsa(0.5)->forward(x.q, x.k, x.v, 1.0f, context_for({4, 4, 4}, 0, &wrong));
            }).find("gate"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              make_vsa(0.5)->forward(x.q, x.k, x.v, 1.0f, context_for({4, 4, 5}, 0));
            }).find("grid"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_vsa(1.0); }), "");
}

// ------------------------------------------------------------------ the Wan pipeline

// examples/models/wan-tiny (2 layers, 2 heads, patch 1x2x2, no to_gate_compress weights) at
// 64x128, 9 frames: a 3x4x8 latent grid = 1x1x2 cubes; 2 steps with guidance.
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
  input.width = 128;
  input.num_frames = 9;
  input.num_inference_steps = 2;
  input.guidance_scale = 5.0;
  input.max_sequence_length = 16;
  input.seed = 7;
  return pipeline.generate(input, /*keep_step_latents=*/true).latents_after_step;
}

TEST(VsaWanPipeline, SparsityZeroMatchesTheDenseRunAndSparseCompletes) {
  const std::vector<Tensor> dense = run_wan_tiny("torch_sdpa", json());
  const std::vector<Tensor> vsa_full = run_wan_tiny("video_sparse_attn", {{"sparsity", 0.0}});
  ASSERT_EQ(vsa_full.size(), dense.size());
  for (size_t k = 0; k < dense.size(); ++k) {
    const double error = testing::relative_error(vsa_full[k], dense[k]);
    EXPECT_LT(error, 1e-5) << "step " << k;
    std::printf("[ vsa ] wan-tiny sparsity 0, step %zu: rel err vs dense %.2e\n", k, error);
  }
  const std::vector<Tensor> vsa_sparse = run_wan_tiny("video_sparse_attn", {{"sparsity", 0.5}});
  ASSERT_EQ(vsa_sparse.size(), dense.size());
  const double difference = testing::relative_error(vsa_sparse.back(), dense.back());
  EXPECT_GT(difference, 1e-4) << "one cube of two is not dense attention";
  EXPECT_TRUE(std::isfinite(difference));
  std::printf("[ vsa ] wan-tiny sparsity 0.5: rel diff vs dense %.2e\n", difference);
}

}  // namespace
}  // namespace mmgen::attention
