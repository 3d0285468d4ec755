// sparse_video_gen_2_attn on the CPU: Sparse VideoGen 2's semantic-aware permutation.
//
// Per (batch, head), the video queries and keys are clustered by k-means (svg2_kmeans.h), each
// query cluster attends the key clusters that hold the top-p of its size-weighted centroid
// attention (svg2_plan.h), and the tokens of every head are permuted so that each cluster is a
// contiguous block; one block-sparse call with a pattern per (batch, head) does the attention and
// the output is permuted back. The permutation is folded into the call
// (gathered_block_sparse_attention): each query cluster's selected key clusters are gathered from
// k and v into chunks of up to 128 keys, so the ~16-token key clusters of 1000 clusters per head
// do not each pay a softmax rescale, and no permuted copies of q, k, v or the output are built.
//
// Decisions, where this differs from or pins down the reference:
//  - Dense steps are counted by step index: dense while step_index < n, n = floor(first_times_fp ·
//    num_steps) (first_times_fp <= 1) or first_times_fp itself (> 1). The reference compares the
//    timestep value with timesteps[n − 1] − 1, which selects the same steps whenever consecutive
//    timesteps differ by more than 1 (true of every scheduler mmgen has); the context carries no
//    timestep table to do it literally. Dense layers: layer_index < floor(first_layers_fp ·
//    num_layers) (or the count when > 1).
//  - The centroids live in the layer's LayerState and warm-start the next clustering call; the
//    state is cleared whenever step_index is 0 (a new run). The Wan transformer keeps one state per
//    classifier-free-guidance branch, so the two prompts' clusters never mix (the reference's
//    per-layer processor shares one cache between them). Without a state every call is a cold
//    start.
//  - Cold starts pick distinct tokens with a seeded generator (seed from layer, batch, head and
//    side), so runs are reproducible; the reference draws torch.randint unseeded.
//  - Cluster counts above the number of video tokens are clamped to it.
//  - Batches larger than 1 are allowed (each batch entry clusters on its own); the reference
//    asserts batch 1.
//  - Text tokens (after the video tokens: the tokens beyond the T·H·W of the grid when a grid is
//    given, else the last text_length) are one extra cluster on each side that attends and is
//    attended by every cluster (the reference's "prompt" cluster; mmgen passes no padding split,
//    so there is no "unprompt" cluster). Wan's self-attention has none.
//  - Centroid scores use the call's scale (the reference's 1/sqrt(D), the same for Wan).
//  - Stats count token pairs, so density() is the fraction of the attention matrix computed, as the
//    other backends' (near-)uniform blocks give it: visited = Σ |Qc_i|·|Kc_j| over the attended
//    cluster pairs, total = Sq·Sk, per (batch, head); dense calls count Sq·Sk for both.
// The GPU half (svg2_cuda.h) runs the same clustering on the device and this file's plan on the
// host, with the same labels, centroids and kept pairs on the same bf16 inputs.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "attention/backend.h"
#include "attention/backends/sparse_video_gen_2_attn/svg2_plan.h"

namespace mmgen::attention::svg2 {

struct Options {
  int64_t num_q_centroids = 300;
  int64_t num_k_centroids = 1000;
  double top_p_kmeans = 0.9;
  double min_kc_ratio = 0.1;
  int64_t kmeans_iter_init = 50;
  int64_t kmeans_iter_step = 2;
  bool zero_step_kmeans_init = false;
  double first_layers_fp = 0.03;
  double first_times_fp = 0.2;

  // From the validated config (attention/backend_config.h: every key present, the defaults
  // being the catalogue row's).
  static Options from_json(const nlohmann::json& config);
  int64_t dense_layers(int64_t num_layers) const;
  int64_t dense_steps(int64_t num_steps) const;
};

// What one layer keeps across steps (in LayerState::value).
struct LayerCentroids {
  int64_t batch = 0, heads = 0, dim = 0, q_clusters = 0, k_clusters = 0, video_length = 0;
  std::vector<std::vector<float>> q_centroids;  // per (batch, head): [q_clusters, dim]
  std::vector<std::vector<float>> k_centroids;
  int64_t clusterings = 0;       // calls that clustered since the last reset
  bool last_warm_start = false;  // whether the last clustering started from stored centroids
  int64_t last_iterations = 0;   // most k-means updates any head ran in the last clustering
};

class Svg2Attention final : public AttentionBackend {
 public:
  explicit Svg2Attention(Options options);
  std::string_view name() const override { return "sparse_video_gen_2_attn"; }
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const AttentionContext& context, AttentionStats* stats = nullptr) override;

  // What the last forward did (tests, `mmgen attention`): its plans, one per (batch, head), or
  // none when it ran dense.
  bool last_was_dense() const { return last_dense_; }
  const std::vector<HeadPlan>& last_plans() const { return last_plans_; }

 private:
  // Clusters the video tokens of every (batch, head) into `centroids` (warm when it fits).
  void cluster(const Tensor& q, const Tensor& k, int64_t video_length, int64_t layer,
               LayerCentroids& centroids, std::vector<std::vector<int32_t>>* q_labels,
               std::vector<std::vector<int32_t>>* k_labels,
               std::vector<std::vector<int64_t>>* k_sizes) const;
  Tensor dense(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
               AttentionStats* stats) const;

  Options options_;
  std::unique_ptr<AttentionBackend> dense_backend_;  // `fa` when this build has it
  bool last_dense_ = true;
  std::vector<HeadPlan> last_plans_;
};

}  // namespace mmgen::attention::svg2
