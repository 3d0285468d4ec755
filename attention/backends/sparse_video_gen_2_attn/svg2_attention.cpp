#include "attention/backends/sparse_video_gen_2_attn/svg2_attention.h"

#include <algorithm>
#include <cmath>

#include "attention/backends/descriptor.h"
#include "attention/backends/sparse_video_gen_2_attn/svg2_kmeans.h"
#include "attention/kernels/block_sparse.h"
#include "attention/kernels/dense_attention.h"
#include "core/error.h"

namespace mmgen::attention::svg2 {

namespace {

// A leading fraction (<= 1) or count (> 1) of `total`.
int64_t leading_count(double setting, int64_t total) {
  if (setting <= 1.0) return int64_t(std::floor(setting * double(total)));
  return int64_t(setting);
}

// The first `length` tokens of head h of batch b of a contiguous [B, S, H, D] tensor as [length,
// D].
std::vector<float> head_rows(const Tensor& x, int64_t b, int64_t h, int64_t length) {
  const int64_t tokens = x.size(1), heads = x.size(2), dim = x.size(3);
  std::vector<float> rows(static_cast<size_t>(length * dim));
  const float* base = x.data<float>() + (b * tokens * heads + h) * dim;
  for (int64_t s = 0; s < length; ++s)
    std::copy(base + s * heads * dim, base + (s * heads + 1) * dim, rows.begin() + s * dim);
  return rows;
}

bool has_backend(std::string_view name) {
  const BackendDescriptor* backend = find_dit_descriptor(name);
  return backend && backend->cpu;
}

}  // namespace

Options Options::from_json(const nlohmann::json& config) {
  Options o;
  config.at("num_q_centroids").get_to(o.num_q_centroids);
  config.at("num_k_centroids").get_to(o.num_k_centroids);
  config.at("top_p_kmeans").get_to(o.top_p_kmeans);
  config.at("min_kc_ratio").get_to(o.min_kc_ratio);
  config.at("kmeans_iter_init").get_to(o.kmeans_iter_init);
  config.at("kmeans_iter_step").get_to(o.kmeans_iter_step);
  config.at("zero_step_kmeans_init").get_to(o.zero_step_kmeans_init);
  config.at("first_layers_fp").get_to(o.first_layers_fp);
  config.at("first_times_fp").get_to(o.first_times_fp);
  check(o.num_q_centroids >= 1 && o.num_k_centroids >= 1,
        "sparse_video_gen_2_attn: num_q_centroids and num_k_centroids must be at least 1");
  check(o.top_p_kmeans > 0 && o.top_p_kmeans <= 1,
        "sparse_video_gen_2_attn: top_p_kmeans must be in (0, 1], got {}", o.top_p_kmeans);
  return o;
}

int64_t Options::dense_layers(int64_t num_layers) const {
  return leading_count(first_layers_fp, num_layers);
}

int64_t Options::dense_steps(int64_t num_steps) const {
  return leading_count(first_times_fp, num_steps);
}

Svg2Attention::Svg2Attention(Options options) : options_(options) {
  // The dense steps and layers run on the fastest dense kernel this build has.
  if (has_backend("fa")) dense_backend_ = make_dit_backend("fa", nlohmann::json::object());
}

Tensor Svg2Attention::dense(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                            AttentionStats* stats) const {
  if (stats) {  // token pairs, as the sparse calls count them
    const int64_t pairs = q.size(0) * q.size(2) * q.size(1) * k.size(1);
    stats->visited_blocks += pairs;
    stats->total_blocks += pairs;
  }
  if (dense_backend_) return dense_backend_->forward(q, k, v, scale, {}, nullptr);
  return dense_attention({.q = q, .k = k, .v = v, .scale = scale, .bias = {}, .key_mask = {}});
}

void Svg2Attention::cluster(const Tensor& q, const Tensor& k, int64_t video_length, int64_t layer,
                            LayerCentroids& state, std::vector<std::vector<int32_t>>* q_labels,
                            std::vector<std::vector<int32_t>>* k_labels,
                            std::vector<std::vector<int64_t>>* k_sizes) const {
  const int64_t batch = q.size(0), heads = q.size(2), dim = q.size(3);
  const int64_t q_clusters = std::min(options_.num_q_centroids, video_length);
  const int64_t k_clusters = std::min(options_.num_k_centroids, video_length);
  const bool warm = state.clusterings > 0 && state.batch == batch && state.heads == heads &&
                    state.dim == dim && state.q_clusters == q_clusters &&
                    state.k_clusters == k_clusters;
  if (!warm) {
    state = LayerCentroids{};
    state.batch = batch;
    state.heads = heads;
    state.dim = dim;
    state.q_clusters = q_clusters;
    state.k_clusters = k_clusters;
    state.q_centroids.resize(size_t(batch * heads));
    state.k_centroids.resize(size_t(batch * heads));
  }
  state.video_length = video_length;
  const int64_t iterations = warm ? options_.kmeans_iter_step : options_.kmeans_iter_init;
  int64_t most_iterations = 0;
  if (q_labels) q_labels->resize(size_t(batch * heads));
  if (k_labels) k_labels->resize(size_t(batch * heads));
  if (k_sizes) k_sizes->resize(size_t(batch * heads));
  // Heads one after another; each k-means parallelises its assignment GEMMs over token chunks.
  for (int64_t bh = 0; bh < batch * heads; ++bh) {
    const int64_t b = bh / heads, h = bh % heads;
    for (int side = 0; side < 2; ++side) {
      const Tensor& x = side == 0 ? q : k;
      const int64_t clusters = side == 0 ? q_clusters : k_clusters;
      std::vector<float>& centroids =
          (side == 0 ? state.q_centroids : state.k_centroids)[size_t(bh)];
      const std::vector<float> rows = head_rows(x, b, h, video_length);
      std::vector<float> initial =
          warm ? centroids
               : seeded_initial_centroids(rows.data(), video_length, dim, clusters,
                                          cold_start_seed(layer, bh, side));
      KMeansResult result = kmeans(rows.data(), video_length, dim, std::move(initial), iterations);
      most_iterations = std::max(most_iterations, result.iterations);
      centroids = std::move(result.centroids);
      if (side == 0 && q_labels) (*q_labels)[size_t(bh)] = std::move(result.labels);
      if (side == 1 && k_labels) (*k_labels)[size_t(bh)] = std::move(result.labels);
      if (side == 1 && k_sizes) (*k_sizes)[size_t(bh)] = std::move(result.sizes);
    }
  }
  ++state.clusterings;
  state.last_warm_start = warm;
  state.last_iterations = most_iterations;
}

Tensor Svg2Attention::forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                              float scale, const AttentionContext& context, AttentionStats* stats) {
  const Tensor q = q_in.to(DType::F32).contiguous(), k = k_in.to(DType::F32).contiguous(),
               v = v_in.to(DType::F32).contiguous();
  check(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape(),
        "sparse_video_gen_2_attn: expects q, k, v as [B, S, H, D]");
  const int64_t batch = q.size(0), length = q.size(1), heads = q.size(2), dim = q.size(3);
  last_plans_.clear();
  last_dense_ = true;
  // Cross attention (and anything not square) has no token clusters to match: dense.
  if (context.is_cross || k.size(1) != length) return dense(q, k, v, scale, stats);

  // Video tokens come first, then text tokens. With a grid, the first T·H·W tokens are video and
  // the rest must be the text_length text tokens, or none (a grid that covers the whole sequence
  // is a self-attention without text, whatever text_length says about the prompt).
  const auto& grid = context.grid;
  const int64_t grid_tokens = grid[0] * grid[1] * grid[2];
  const int64_t video_length = grid_tokens > 0 ? grid_tokens : length - context.text_length;
  check(video_length >= 1 && (grid_tokens == 0 || grid_tokens == length ||
                              grid_tokens + context.text_length == length),
        "sparse_video_gen_2_attn: {} tokens are neither the {}x{}x{} latent grid nor it plus {} "
        "text tokens",
        length, grid[0], grid[1], grid[2], context.text_length);
  const int64_t text_length = length - video_length;

  LayerCentroids scratch;
  LayerCentroids* state = &scratch;
  if (context.state) {
    if (context.step_index == 0 || !context.state->value.has_value() ||
        !std::any_cast<LayerCentroids>(&context.state->value))
      context.state->value = LayerCentroids{};  // a new run starts cold
    state = std::any_cast<LayerCentroids>(&context.state->value);
  }

  const bool dense_call = context.layer_index < options_.dense_layers(context.num_layers) ||
                          context.step_index < options_.dense_steps(context.num_steps);
  if (dense_call) {
    if (options_.zero_step_kmeans_init)
      cluster(q, k, video_length, context.layer_index, *state, nullptr, nullptr, nullptr);
    return dense(q, k, v, scale, stats);
  }

  std::vector<std::vector<int32_t>> q_labels, k_labels;
  std::vector<std::vector<int64_t>> k_sizes;
  cluster(q, k, video_length, context.layer_index, *state, &q_labels, &k_labels, &k_sizes);

  // Plans, orders and patterns per (batch, head); text tokens become the last cluster.
  const bool text = text_length > 0;
  const int64_t qc = state->q_clusters, kc = state->k_clusters;
  std::vector<std::vector<int64_t>> q_orders(size_t(batch * heads)),
      k_orders(size_t(batch * heads));
  std::vector<BlockSparsePattern> patterns(size_t(batch * heads));
  last_plans_.resize(size_t(batch * heads));
  int64_t visited = 0, total = 0;
  for (int64_t bh = 0; bh < batch * heads; ++bh) {
    HeadPlan& plan = last_plans_[size_t(bh)];
    plan.q_clusters = qc + (text ? 1 : 0);
    plan.k_clusters = kc + (text ? 1 : 0);
    const std::vector<uint8_t> video_pairs = select_cluster_pairs(
        state->q_centroids[size_t(bh)].data(), qc, state->k_centroids[size_t(bh)].data(),
        k_sizes[size_t(bh)].data(), kc, dim, scale, options_.top_p_kmeans, options_.min_kc_ratio);
    plan.selected.assign(size_t(plan.q_clusters * plan.k_clusters), 1);  // text rows/columns: all
    for (int64_t i = 0; i < qc; ++i)
      std::copy(video_pairs.begin() + i * kc, video_pairs.begin() + (i + 1) * kc,
                plan.selected.begin() + i * plan.k_clusters);
    plan.q_labels = std::move(q_labels[size_t(bh)]);
    plan.k_labels = std::move(k_labels[size_t(bh)]);
    plan.q_labels.resize(size_t(length), int32_t(qc));  // text tokens: the text cluster
    plan.k_labels.resize(size_t(length), int32_t(kc));
    ClusterOrder q_order = order_by_label(plan.q_labels, plan.q_clusters);
    ClusterOrder k_order = order_by_label(plan.k_labels, plan.k_clusters);
    patterns[size_t(bh)] = make_pattern(plan, q_order, k_order, &visited, &total);
    q_orders[size_t(bh)] = std::move(q_order.order);
    k_orders[size_t(bh)] = std::move(k_order.order);
  }
  if (stats) {
    stats->visited_blocks += visited;
    stats->total_blocks += total;
  }
  last_dense_ = false;
  // Permute → block-sparse → un-permute in one pass: each query cluster's selected key clusters
  // are gathered straight from k and v into large chunks (clusters of ~16 keys would otherwise be
  // tiny blocks), and its output rows are written back to their original positions.
  return gathered_block_sparse_attention(q, k, v, scale, patterns, &q_orders, &k_orders);
}

}  // namespace mmgen::attention::svg2
