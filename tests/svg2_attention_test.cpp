// Sparse VideoGen 2 on the CPU: the cluster-pair selection on hand-computed cases, the backend
// against dense attention under a token-level mask built straight from the definition (token i
// attends token j iff the pair (cluster of i, cluster of j) is selected), top-p 1 against plain
// dense attention, and the dense-step / dense-layer / warm-start rules across steps.
#include "attention/backends/sparse_video_gen_2_attn/svg2_attention.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "attention/backend.h"
#include "attention/backends/sparse_video_gen_2_attn/svg2_kmeans.h"
#include "attention/backends/sparse_video_gen_2_attn/svg2_plan.h"
#include "attention/kernels/dense_attention.h"
#include "attention/kernels/flash_kernel.h"
#include "core/error.h"
#include "core/file.h"
#include "core/random.h"
#include "core/safetensors.h"
#include "pipeline/attention_plan.h"
#include "pipeline/model_index.h"
#include "pipeline/wan/wan_pipeline.h"
#include "tests/test_support.h"

namespace mmgen::attention {
namespace {

using svg2::HeadPlan;
using svg2::LayerCentroids;
using svg2::Options;
using svg2::Svg2Attention;

struct Inputs {
  Tensor q, k, v;
};

Inputs random_inputs(uint64_t seed, int64_t batch, int64_t length, int64_t heads, int64_t dim) {
  TorchCpuGenerator generator(seed);
  return {generator.randn({batch, length, heads, dim}),
          generator.randn({batch, length, heads, dim}),
          generator.randn({batch, length, heads, dim})};
}

// Dense attention in double where query i of (b, h) sees key j only if the plan selects the pair
// of their clusters.
Tensor masked_oracle(const Inputs& in, float scale, const std::vector<HeadPlan>& plans) {
  const int64_t batch = in.q.size(0), length = in.q.size(1), heads = in.q.size(2),
                dim = in.q.size(3);
  Tensor out = Tensor::zeros(in.q.shape());
  auto at = [&](const Tensor& t, int64_t b, int64_t s, int64_t h) {
    return t.data<float>() + ((b * length + s) * heads + h) * dim;
  };
  auto out_at = [&](int64_t b, int64_t s, int64_t h) {
    return out.data<float>() + ((b * length + s) * heads + h) * dim;
  };
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const HeadPlan& plan = plans[size_t(b * heads + h)];
      for (int64_t i = 0; i < length; ++i) {
        std::vector<double> score(size_t(length), -INFINITY);
        double row_max = -INFINITY;
        for (int64_t j = 0; j < length; ++j) {
          if (!plan.selected[size_t(plan.q_labels[size_t(i)] * plan.k_clusters +
                                    plan.k_labels[size_t(j)])])
            continue;
          double dot = 0;
          for (int64_t d = 0; d < dim; ++d)
            dot += double(at(in.q, b, i, h)[d]) * at(in.k, b, j, h)[d];
          score[size_t(j)] = dot * scale;
          row_max = std::max(row_max, score[size_t(j)]);
        }
        double sum = 0;
        std::vector<double> acc(size_t(dim), 0.0);
        for (int64_t j = 0; j < length; ++j) {
          if (score[size_t(j)] == -INFINITY) continue;
          const double p = std::exp(score[size_t(j)] - row_max);
          sum += p;
          for (int64_t d = 0; d < dim; ++d) acc[size_t(d)] += p * at(in.v, b, j, h)[d];
        }
        for (int64_t d = 0; d < dim; ++d)
          out_at(b, i, h)[d] = sum > 0 ? float(acc[size_t(d)] / sum) : 0.0f;
      }
    }
  return out;
}

Options sparse_options(int64_t q_clusters, int64_t k_clusters, double top_p) {
  Options o;
  o.num_q_centroids = q_clusters;
  o.num_k_centroids = k_clusters;
  o.top_p_kmeans = top_p;
  o.min_kc_ratio = 0.1;
  o.kmeans_iter_init = 10;
  o.kmeans_iter_step = 2;
  o.first_layers_fp = 0;
  o.first_times_fp = 0;
  return o;
}

TEST(Svg2Selection, KeepsTheTopPMassOfTheSizeWeightedCentroidSoftmax) {
  // One query centroid [1], key centroids [0, ln 2, ln 3, ln 4], scale 1, sizes 1: the masses
  // are 0.1, 0.2, 0.3, 0.4. Sorted: 3 (0.4), 2 (0.3), 1 (0.2), 0 (0.1).
  const float q[] = {1.0f};
  const float k[] = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  const int64_t ones[] = {1, 1, 1, 1};
  auto select = [&](const int64_t* sizes, double top_p, double min_ratio) {
    return svg2::select_cluster_pairs(q, 1, k, sizes, 4, 1, 1.0f, top_p, min_ratio);
  };
  // 0.4 < 0.5, so cluster 2 (which crosses 0.5) is kept; 0.7 > 0.5 drops the rest.
  EXPECT_EQ(select(ones, 0.5, 0), (std::vector<uint8_t>{0, 0, 1, 1}));
  EXPECT_EQ(select(ones, 0.75, 0), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(select(ones, 0.05, 0), (std::vector<uint8_t>{0, 0, 0, 1}));    // the first always
  EXPECT_EQ(select(ones, 0.05, 0.5), (std::vector<uint8_t>{0, 0, 1, 1}));  // floor(0.5 * 4) = 2
  EXPECT_EQ(select(ones, 1.0, 0), (std::vector<uint8_t>{1, 1, 1, 1}));
  // Sizes weight the softmax: a big cluster with a low score can hold most of the mass.
  const float k_flat[] = {0, 0, 0, 0};
  const int64_t sizes[] = {7, 1, 1, 1};
  EXPECT_EQ(svg2::select_cluster_pairs(q, 1, k_flat, sizes, 4, 1, 1.0f, 0.6, 0),
            (std::vector<uint8_t>{1, 0, 0, 0}));
}

TEST(Svg2Plan, PerHeadPermutationRoundTrips) {
  const Inputs in = random_inputs(1, 2, 7, 3, 4);
  std::vector<std::vector<int64_t>> orders;
  for (int64_t bh = 0; bh < 6; ++bh) {
    std::vector<int32_t> labels;
    for (int64_t i = 0; i < 7; ++i) labels.push_back(int32_t((i * (bh + 2)) % 3));
    orders.push_back(svg2::order_by_label(labels, 3).order);
  }
  const Tensor permuted = svg2::permute_heads(in.q, orders);
  EXPECT_EQ(permuted.item_f32({1, 0, 2, 1}), in.q.item_f32({1, orders[5][0], 2, 1}));
  EXPECT_EQ(testing::max_abs_diff(svg2::unpermute_heads(permuted, orders), in.q), 0.0);
}

// Lloyd's k-means written straight from the definition, in double: nearest centroid by squared
// distance (ties to the lower index), then means (empty clusters keep theirs), stop when no
// centroid moved by more than the tolerance.
svg2::KMeansResult naive_kmeans(const std::vector<float>& x, int64_t points, int64_t dim,
                                std::vector<float> centroids, int64_t max_iterations) {
  const int64_t clusters = int64_t(centroids.size()) / dim;
  svg2::KMeansResult r;
  r.labels.assign(size_t(points), 0);
  for (int64_t iteration = 0;; ++iteration) {
    r.sizes.assign(size_t(clusters), 0);
    for (int64_t p = 0; p < points; ++p) {
      double best = INFINITY;
      for (int64_t c = 0; c < clusters; ++c) {
        double d2 = 0;
        for (int64_t d = 0; d < dim; ++d) {
          const double diff = double(x[size_t(p * dim + d)]) - centroids[size_t(c * dim + d)];
          d2 += diff * diff;
        }
        if (d2 < best) {
          best = d2;
          r.labels[size_t(p)] = int32_t(c);
        }
      }
      ++r.sizes[size_t(r.labels[size_t(p)])];
    }
    if (iteration == max_iterations) break;
    double shift = 0;
    for (int64_t c = 0; c < clusters; ++c) {
      if (r.sizes[size_t(c)] == 0) continue;
      double moved = 0;
      for (int64_t d = 0; d < dim; ++d) {
        double sum = 0;
        for (int64_t p = 0; p < points; ++p)
          if (r.labels[size_t(p)] == c) sum += x[size_t(p * dim + d)];
        const float mean = float(sum / double(r.sizes[size_t(c)]));
        moved += (mean - centroids[size_t(c * dim + d)]) * (mean - centroids[size_t(c * dim + d)]);
        centroids[size_t(c * dim + d)] = mean;
      }
      shift = std::max(shift, std::sqrt(moved));
    }
    r.iterations = iteration + 1;
    if (shift < 1e-4 || r.iterations == max_iterations) break;
  }
  r.centroids = std::move(centroids);
  return r;
}

TEST(Svg2KMeans, MatchesLloydsAlgorithmWrittenFromTheDefinition) {
  // Well-separated blobs (so no point sits near a tie that float rounding could flip) with a few
  // far outliers; sizes that exercise the parallel chunks (600 points, 40 clusters) and the serial
  // path; warm (2 iterations) and longer runs, and assign-only (0 iterations).
  for (const auto& [points, dim, clusters, iterations] : std::vector<std::array<int64_t, 4>>{
           {600, 16, 40, 2}, {600, 16, 40, 20}, {90, 8, 7, 5}, {300, 64, 30, 0}}) {
    TorchCpuGenerator generator(uint64_t(points + clusters + iterations));
    const Tensor centres = generator.randn({clusters, dim});
    const Tensor noise = generator.randn({points, dim});
    std::vector<float> x(size_t(points * dim));
    for (int64_t p = 0; p < points; ++p)
      for (int64_t d = 0; d < dim; ++d)
        x[size_t(p * dim + d)] = 8.0f * centres.data<float>()[(p % clusters) * dim + d] +
                                 0.3f * noise.data<float>()[p * dim + d];
    const std::vector<float> initial =
        svg2::seeded_initial_centroids(x.data(), points, dim, clusters, 5);
    const svg2::KMeansResult got = svg2::kmeans(x.data(), points, dim, initial, iterations);
    const svg2::KMeansResult want = naive_kmeans(x, points, dim, initial, iterations);
    EXPECT_EQ(got.labels, want.labels) << points << " points, " << iterations << " iterations";
    EXPECT_EQ(got.sizes, want.sizes);
    EXPECT_EQ(got.iterations, want.iterations);
    ASSERT_EQ(got.centroids.size(), want.centroids.size());
    double worst = 0;
    for (size_t i = 0; i < got.centroids.size(); ++i)
      worst = std::max(worst, double(std::fabs(got.centroids[i] - want.centroids[i])));
    EXPECT_LT(worst, 1e-5);
  }
}

TEST(Svg2Plan, DensityCountsTokenPairs) {
  // Query clusters of 3 and 1 tokens, key clusters of 2, 0 and 5 tokens; cluster 0 attends key
  // clusters 0 and 1 (empty), cluster 1 attends key cluster 2: 3·2 + 1·5 = 11 of 4·7 token pairs.
  HeadPlan plan;
  plan.q_clusters = 2;
  plan.k_clusters = 3;
  plan.q_labels = {0, 1, 0, 0};
  plan.k_labels = {2, 0, 2, 2, 0, 2, 2};
  plan.selected = {1, 1, 0, 0, 0, 1};
  int64_t visited = 0, total = 0;
  const BlockSparsePattern pattern =
      svg2::make_pattern(plan, svg2::order_by_label(plan.q_labels, 2),
                         svg2::order_by_label(plan.k_labels, 3), &visited, &total);
  EXPECT_EQ(visited, 11);
  EXPECT_EQ(total, 28);
  EXPECT_EQ(pattern.indices, (std::vector<int32_t>{0, 2}));
}

// The gathered kernel against the composition it replaces (gather, block-sparse, scatter per
// head) and a double-precision oracle, with many small blocks, blocks longer than a gathered
// chunk, empty lists and LSE.
TEST(GatheredBlockSparse, EqualsPermuteBlockSparseUnpermute) {
  const int64_t batch = 1, length = 1300, heads = 2, dim = 24;
  const Inputs in = random_inputs(23, batch, length, heads, dim);
  std::mt19937 rng(4);
  std::vector<BlockSparsePattern> patterns;
  std::vector<std::vector<int64_t>> q_orders, k_orders;
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<int64_t> qo(static_cast<size_t>(length)), ko(static_cast<size_t>(length));
    std::iota(qo.begin(), qo.end(), int64_t(0));
    std::iota(ko.begin(), ko.end(), int64_t(0));
    std::shuffle(qo.begin(), qo.end(), rng);
    std::shuffle(ko.begin(), ko.end(), rng);
    q_orders.push_back(qo);
    k_orders.push_back(ko);
    BlockSparsePattern p;
    // Query blocks of 1..150 tokens (the same count for every head, as block_sparse_attention
    // wants); key blocks of 1..40 tokens and one of 700.
    std::mt19937 layout_rng(9);
    for (int64_t s = 0; s < length;) {
      const int64_t n = std::min<int64_t>(length - s, 1 + int64_t(layout_rng() % 150));
      p.q_blocks.start.push_back(s);
      p.q_blocks.length.push_back(n);
      s += n;
    }
    p.kv_blocks.start.push_back(0);
    p.kv_blocks.length.push_back(700);
    for (int64_t s = 700; s < length;) {
      const int64_t n = std::min<int64_t>(length - s, 1 + int64_t(rng() % 40));
      p.kv_blocks.start.push_back(s);
      p.kv_blocks.length.push_back(n);
      s += n;
    }
    p.indptr.push_back(0);
    for (int64_t i = 0; i < p.q_blocks.size(); ++i) {
      if (i % 7 != 3)  // every 7th list empty
        for (int64_t j = 0; j < p.kv_blocks.size(); ++j)
          if (rng() % 4 == 0 || (j == 0 && i % 2 == 0)) p.indices.push_back(int32_t(j));
      p.indptr.push_back(int64_t(p.indices.size()));
    }
    patterns.push_back(std::move(p));
  }
  Tensor lse, lse_ref;
  const Tensor got =
      gathered_block_sparse_attention(in.q, in.k, in.v, 0.2f, patterns, &q_orders, &k_orders, &lse);
  const Tensor composed = svg2::unpermute_heads(
      block_sparse_attention(svg2::permute_heads(in.q, q_orders),
                             svg2::permute_heads(in.k, k_orders),
                             svg2::permute_heads(in.v, k_orders), 0.2f, patterns, &lse_ref),
      q_orders);
  EXPECT_LT(testing::max_abs_diff(got, composed), 2e-6);
  // Token-level oracle: query token q_orders[h][a] sees key token k_orders[h][c] iff a's block
  // lists c's block.
  std::vector<HeadPlan> plans(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) {
    const BlockSparsePattern& p = patterns[size_t(h)];
    HeadPlan& plan = plans[size_t(h)];
    plan.q_clusters = p.q_blocks.size();
    plan.k_clusters = p.kv_blocks.size();
    plan.q_labels.resize(size_t(length));
    plan.k_labels.resize(size_t(length));
    for (int64_t i = 0; i < plan.q_clusters; ++i)
      for (int64_t t = 0; t < p.q_blocks.length[size_t(i)]; ++t)
        plan.q_labels[size_t(q_orders[size_t(h)][size_t(p.q_blocks.start[size_t(i)] + t)])] =
            int32_t(i);
    for (int64_t j = 0; j < plan.k_clusters; ++j)
      for (int64_t t = 0; t < p.kv_blocks.length[size_t(j)]; ++t)
        plan.k_labels[size_t(k_orders[size_t(h)][size_t(p.kv_blocks.start[size_t(j)] + t)])] =
            int32_t(j);
    plan.selected.assign(size_t(plan.q_clusters * plan.k_clusters), 0);
    for (int64_t i = 0; i < plan.q_clusters; ++i)
      for (int64_t e = p.indptr[size_t(i)]; e < p.indptr[size_t(i) + 1]; ++e)
        plan.selected[size_t(i * plan.k_clusters + p.indices[size_t(e)])] = 1;
  }
  EXPECT_LT(testing::max_abs_diff(got, masked_oracle(in, 0.2f, plans)), 2e-6);
  // LSE: the composed call's, moved back to the original token order.
  int64_t empty_rows = 0;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < length; ++i) {
      const float want = lse_ref.data<float>()[h * length + i];
      const float have = lse.data<float>()[h * length + q_orders[size_t(h)][size_t(i)]];
      if (std::isinf(want)) {
        EXPECT_TRUE(std::isinf(have) && have < 0);
        ++empty_rows;
      } else {
        EXPECT_NEAR(have, want, 1e-5);
      }
    }
  EXPECT_GT(empty_rows, 0);

  // The other micro-kernel paths of the gathered driver (the AVX-512 one packs keys by a 16 x 16
  // transpose in registers, the others element by element) give the same outputs and LSEs.
  std::vector<const int64_t*> qo, ko;
  for (int64_t h = 0; h < heads; ++h) {
    qo.push_back(q_orders[size_t(h)].data());
    ko.push_back(k_orders[size_t(h)].data());
  }
  std::vector<flash::KernelPath> paths = {flash::KernelPath::Portable};
  if (flash::simd_available()) paths.push_back(flash::KernelPath::Avx2);
  for (flash::KernelPath path : paths) {
    Tensor out = Tensor::zeros({batch, length, heads, dim});
    Tensor path_lse = Tensor::full({batch, heads, length}, -std::numeric_limits<float>::infinity());
    flash::run_gathered(in.q.data<float>(), in.k.data<float>(), in.v.data<float>(), batch, length,
                        length, heads, dim, 0.2f, patterns, qo, ko, out.data<float>(),
                        path_lse.data<float>(), path);
    SCOPED_TRACE(::testing::Message() << "path " << int(path));
    EXPECT_LT(testing::max_abs_diff(out, composed), 2e-6);
    for (int64_t i = 0; i < heads * length; ++i) {
      const float want = lse.data<float>()[i], have = path_lse.data<float>()[i];
      if (std::isinf(want))
        EXPECT_EQ(have, want);
      else
        EXPECT_NEAR(have, want, 1e-5);
    }
  }
}

struct Shape {
  int64_t batch, length, heads, dim, text;
  std::array<int64_t, 3> grid;
};

TEST(Svg2Attention, MatchesDenseAttentionUnderTheClusterPairMask) {
  const std::vector<Shape> shapes = {{1, 200, 2, 32, 0, {0, 0, 0}},
                                     {2, 150, 3, 16, 0, {3, 5, 10}},
                                     {1, 130, 2, 64, 10, {2, 6, 10}},
                                     {1, 37, 1, 8, 0, {1, 1, 37}}};
  for (const Shape& shape : shapes) {
    const Inputs in =
        random_inputs(uint64_t(shape.length), shape.batch, shape.length, shape.heads, shape.dim);
    Svg2Attention backend(sparse_options(10, 20, 0.6));
    const float scale = 1.0f / std::sqrt(float(shape.dim));
    AttentionContext context;
    context.grid = shape.grid;
    context.text_length = shape.text;
    AttentionStats stats;
    const Tensor out = backend.forward(in.q, in.k, in.v, scale, context, &stats);
    ASSERT_FALSE(backend.last_was_dense());
    const auto& plans = backend.last_plans();
    ASSERT_EQ(int64_t(plans.size()), shape.batch * shape.heads);
    int64_t unselected = 0;
    for (const auto& plan : plans)
      for (uint8_t s : plan.selected) unselected += s == 0;
    EXPECT_GT(unselected, 0) << "the case should be sparse";
    EXPECT_LT(stats.visited_blocks, stats.total_blocks);
    const double error = testing::max_abs_diff(out, masked_oracle(in, scale, plans));
    EXPECT_LT(error, 2e-6) << "length " << shape.length;
    std::printf("svg2 B=%lld S=%lld H=%lld D=%lld text=%lld: density %.3f, max |diff| %.2e\n",
                (long long)shape.batch, (long long)shape.length, (long long)shape.heads,
                (long long)shape.dim, (long long)shape.text, stats.density(), error);
    // Text tokens form the last cluster on both sides and attend / are attended by everything.
    if (shape.text > 0) {
      const HeadPlan& plan = plans[0];
      EXPECT_EQ(plan.q_labels.back(), plan.q_clusters - 1);
      for (int64_t j = 0; j < plan.k_clusters; ++j)
        EXPECT_EQ(plan.selected[size_t((plan.q_clusters - 1) * plan.k_clusters + j)], 1);
    }
  }
}

TEST(Svg2Attention, TopPOneIsDenseAttention) {
  const Inputs in = random_inputs(7, 1, 180, 2, 32);
  auto backend = make_dit_backend("sparse_video_gen_2_attn", {{"num_q_centroids", 12},
                                                              {"num_k_centroids", 25},
                                                              {"top_p_kmeans", 1.0},
                                                              {"min_kc_ratio", 0.0},
                                                              {"kmeans_iter_init", 5},
                                                              {"first_layers_fp", 0.0},
                                                              {"first_times_fp", 0.0}});
  const float scale = 1.0f / std::sqrt(32.0f);
  AttentionStats stats;
  const Tensor out = backend->forward(in.q, in.k, in.v, scale, {}, &stats);
  EXPECT_FALSE(static_cast<Svg2Attention&>(*backend).last_was_dense());
  EXPECT_EQ(stats.visited_blocks, stats.total_blocks);
  const Tensor expected = dense_attention(
      {.q = in.q, .k = in.k, .v = in.v, .scale = scale, .bias = {}, .key_mask = {}});
  EXPECT_LT(testing::max_abs_diff(out, expected), 2e-6);
}

TEST(Svg2Attention, WarmStartsFromTheLayersCentroidsAndResetsAtStepZero) {
  const Inputs step0 = random_inputs(11, 1, 240, 2, 16);
  // Step 1's queries and keys move a little, as they do between denoising steps.
  Inputs step1 = step0;
  const Tensor noise = TorchCpuGenerator(12).randn(step0.q.shape());
  step1.q = step0.q.clone();
  step1.k = step0.k.clone();
  for (int64_t i = 0; i < noise.numel(); ++i) {
    step1.q.data<float>()[i] += 0.02f * noise.data<float>()[i];
    step1.k.data<float>()[i] -= 0.02f * noise.data<float>()[i];
  }
  Options options = sparse_options(8, 16, 0.8);
  options.kmeans_iter_init = 30;
  Svg2Attention backend(options);
  LayerState state;
  AttentionContext context;
  context.num_steps = 10;
  context.state = &state;

  context.step_index = 0;
  backend.forward(step0.q, step0.k, step0.v, 0.25f, context);
  const auto* centroids = std::any_cast<LayerCentroids>(&state.value);
  ASSERT_NE(centroids, nullptr);
  EXPECT_EQ(centroids->clusterings, 1);
  EXPECT_FALSE(centroids->last_warm_start);
  const std::vector<float> q_centroids_step0 = centroids->q_centroids[0];
  const std::vector<int32_t> labels_step0 = backend.last_plans()[0].q_labels;

  context.step_index = 1;
  backend.forward(step1.q, step1.k, step1.v, 0.25f, context);
  centroids = std::any_cast<LayerCentroids>(&state.value);
  EXPECT_EQ(centroids->clusterings, 2);
  EXPECT_TRUE(centroids->last_warm_start);
  EXPECT_LE(centroids->last_iterations, options.kmeans_iter_step);
  // Warm-started clusters are the step-0 clusters, moved a little.
  double moved = 0, spread = 0;
  for (size_t i = 0; i < q_centroids_step0.size(); ++i) {
    moved += std::fabs(centroids->q_centroids[0][i] - q_centroids_step0[i]);
    spread += std::fabs(q_centroids_step0[i]);
  }
  EXPECT_LT(moved / spread, 0.05);
  int64_t same = 0;
  const auto& labels_step1 = backend.last_plans()[0].q_labels;
  for (size_t i = 0; i < labels_step0.size(); ++i) same += labels_step0[i] == labels_step1[i];
  EXPECT_GT(double(same) / double(labels_step0.size()), 0.9);

  // A new run (step 0 again) starts cold.
  context.step_index = 0;
  backend.forward(step1.q, step1.k, step1.v, 0.25f, context);
  centroids = std::any_cast<LayerCentroids>(&state.value);
  EXPECT_EQ(centroids->clusterings, 1);
  EXPECT_FALSE(centroids->last_warm_start);
}

TEST(Svg2Attention, FirstStepsAndLayersRunDense) {
  const Inputs in = random_inputs(13, 1, 64, 2, 16);
  Options options = sparse_options(4, 8, 0.5);
  options.first_times_fp = 0.5;   // of 4 steps: steps 0 and 1 dense
  options.first_layers_fp = 0.5;  // of 4 layers: layers 0 and 1 dense
  Svg2Attention backend(options);
  const Tensor expected = dense_attention(
      {.q = in.q, .k = in.k, .v = in.v, .scale = 0.25f, .bias = {}, .key_mask = {}});
  LayerState state;
  AttentionContext context;
  context.num_steps = 4;
  context.num_layers = 4;
  context.layer_index = 2;
  context.state = &state;
  for (int64_t step = 0; step < 4; ++step) {
    context.step_index = step;
    AttentionStats stats;
    const Tensor out = backend.forward(in.q, in.k, in.v, 0.25f, context, &stats);
    EXPECT_EQ(backend.last_was_dense(), step < 2) << "step " << step;
    if (step < 2) {
      EXPECT_LT(testing::max_abs_diff(out, expected), 2e-6);
      EXPECT_EQ(stats.density(), 1.0);
      EXPECT_FALSE(state.value.has_value() &&
                   std::any_cast<LayerCentroids>(&state.value)->clusterings > 0);
    } else {
      const auto* centroids = std::any_cast<LayerCentroids>(&state.value);
      EXPECT_EQ(centroids->last_warm_start, step == 3);  // the first sparse step is cold
    }
  }
  context.step_index = 3;
  context.layer_index = 1;
  backend.forward(in.q, in.k, in.v, 0.25f, context);
  EXPECT_TRUE(backend.last_was_dense());

  // zero_step_kmeans_init clusters during dense steps too, so the first sparse step is warm.
  options.zero_step_kmeans_init = true;
  Svg2Attention warming(options);
  LayerState warm_state;
  context.state = &warm_state;
  context.layer_index = 2;
  for (int64_t step = 0; step < 3; ++step) {
    context.step_index = step;
    warming.forward(in.q, in.k, in.v, 0.25f, context);
  }
  EXPECT_TRUE(std::any_cast<LayerCentroids>(&warm_state.value)->last_warm_start);
  EXPECT_EQ(std::any_cast<LayerCentroids>(&warm_state.value)->clusterings, 3);
}

// Timing at a realistic size (run with --gtest_also_run_disabled_tests): 4096 tokens, 2 heads of
// 64, 100 query and 300 key clusters; the dense reference and the first (cold, 10 iterations) and a
// warm sparse call.

TEST(Svg2Attention, IsDeterministicAndRejectsAGridThatDoesNotFit) {
  const Inputs in = random_inputs(17, 1, 96, 2, 16);
  Svg2Attention a(sparse_options(6, 12, 0.7)), b(sparse_options(6, 12, 0.7));
  EXPECT_EQ(testing::max_abs_diff(a.forward(in.q, in.k, in.v, 0.25f, {}),
                                  b.forward(in.q, in.k, in.v, 0.25f, {})),
            0.0);
  AttentionContext context;
  context.grid = {2, 4, 4};  // 32 tokens, not 96
  EXPECT_THROW(a.forward(in.q, in.k, in.v, 0.25f, context), Error);
}

}  // namespace
}  // namespace mmgen::attention

// ---- The wan-tiny fixture run through the pipeline with sparse_video_gen_2_attn ----

namespace mmgen {
namespace {

fs::path wan_fixture() {
  return testing::shared_dir() / "fixtures/wan-tiny";
}

// Runs the fixture's pipeline settings (with its noise) on `backend` with `config`; returns the
// latents after every step.
std::vector<Tensor> run_wan_fixture(const std::string& backend, const nlohmann::json& config,
                                    const SafetensorsFile& reference) {
  const auto settings =
      nlohmann::json::parse(read_text_file(wan_fixture() / "reference/reference.json"));
  const auto& p = settings["pipeline"];
  Request request;
  request.attention_backend = backend;
  request.attention_backend_config = config;
  request.num_inference_steps = p["num_inference_steps"];
  const ModelIndex index = load_model_index(wan_fixture() / "model");
  const WanPipeline pipeline(index, plan_attention(index, request));
  EXPECT_EQ(pipeline.attention_plan().main_backend, backend);
  WanGenerationInput input = testing::wan_fixture_input(p);
  input.initial_latents = reference.tensor("pipeline.noise").clone();
  WanGenerationOutput output = pipeline.generate(input, /*keep_step_latents=*/true);
  return output.latents_after_step;
}

TEST(Svg2WanFixture, TopPOneMatchesDiffusersAndTheSparseRunCompletes) {
  MMGEN_REQUIRE_SHARED();
  const SafetensorsFile reference =
      SafetensorsFile::open(wan_fixture() / "reference/reference.safetensors");
  // top_p 1, no dense steps or layers: every step clusters (12 latent tokens, so the cluster
  // counts clamp to 12) and attends every pair, which is dense attention.
  const nlohmann::json exact = {{"top_p_kmeans", 1.0},
                                {"first_times_fp", 0.0},
                                {"first_layers_fp", 0.0},
                                {"num_q_centroids", 4},
                                {"num_k_centroids", 6}};
  const std::vector<Tensor> latents = run_wan_fixture("sparse_video_gen_2_attn", exact, reference);
  ASSERT_EQ(latents.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    const double error = testing::relative_error(
        latents[size_t(k)], reference.tensor("pipeline.latents_after_step" + std::to_string(k)));
    EXPECT_LT(error, 1e-4) << "step " << k;
    std::printf("svg2 top-p 1, step %d: relative error vs diffusers %.2e\n", k, error);
  }
  const std::vector<Tensor> dense_latents = run_wan_fixture("torch_sdpa", nullptr, reference);
  ASSERT_EQ(dense_latents.size(), 4u);
  const double versus_dense = testing::relative_error(latents[3], dense_latents[3]);
  std::printf("svg2 top-p 1 vs the torch_sdpa run after 4 steps: relative error %.2e\n",
              versus_dense);
  EXPECT_LT(versus_dense, 1e-5);
  // The sparse setting (top_p 0.5, a few clusters) completes; how far it moves is reported.
  const nlohmann::json sparse = {{"top_p_kmeans", 0.5},   {"min_kc_ratio", 0.0},
                                 {"first_times_fp", 0.0}, {"first_layers_fp", 0.0},
                                 {"num_q_centroids", 4},  {"num_k_centroids", 6}};
  const std::vector<Tensor> sparse_latents =
      run_wan_fixture("sparse_video_gen_2_attn", sparse, reference);
  ASSERT_EQ(sparse_latents.size(), 4u);
  std::printf(
      "svg2 top-p 0.5: final relative difference vs diffusers %.2e\n",
      testing::relative_error(sparse_latents[3], reference.tensor("pipeline.latents_after_step3")));
}

}  // namespace
}  // namespace mmgen
