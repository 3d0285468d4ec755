// Sparse VideoGen 2's block list: which key clusters each query cluster attends (top-p over the
// size-weighted centroid attention), the per-head token permutation that makes every cluster a
// contiguous block, and the block-sparse pattern that follows from both.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/kernels/block_sparse.h"
#include "core/tensor.h"

namespace mmgen::attention::svg2 {

// The reference's identify_dynamic_map for one head. For query cluster i:
//   p[i, j] = |Kc_j| · exp(s_ij − max_l s_il) / Σ_l |Kc_l| · exp(s_il − max_l s_il),
//   s_ij = scale · (Cq_i · Ck_j)
// and, with the p[i, :] sorted in descending order (ties by cluster index), a cluster is kept
// unless the mass of the clusters before it already exceeds top_p (so the cluster that crosses
// top_p is kept, and so is the first); the first floor(min_kc_ratio · k_clusters) of the sorted
// clusters are always kept. top_p >= 1 keeps every cluster (the mass can never exceed 1; this
// keeps rounding in the cumulative sum from dropping any). Returns [q_clusters · k_clusters], 1
// where the pair is attended.
std::vector<uint8_t> select_cluster_pairs(const float* q_centroids, int64_t q_clusters,
                                          const float* k_centroids, const int64_t* k_sizes,
                                          int64_t k_clusters, int64_t dim, float scale,
                                          double top_p, double min_kc_ratio);

// What one (batch, head) attends, at token level: token i (query) attends token j (key) iff
// selected[q_labels[i] · k_clusters + k_labels[j]].
struct HeadPlan {
  std::vector<int32_t> q_labels;  // [Sq]
  std::vector<int32_t> k_labels;  // [Sk]
  int64_t q_clusters = 0;         // text tokens, when present, form the last cluster on each side
  int64_t k_clusters = 0;
  std::vector<uint8_t> selected;  // [q_clusters · k_clusters]
};

// Tokens ordered by label (a stable counting sort: within a cluster, original order) and the
// block of each cluster in that order.
struct ClusterOrder {
  std::vector<int64_t> order;  // order[i] = original index of the i-th token
  BlockLayout blocks;          // one block per cluster, empty clusters included
};
ClusterOrder order_by_label(const std::vector<int32_t>& labels, int64_t clusters);

// The block-sparse pattern of one plan over the two cluster orders (empty clusters are never
// listed: they hold no tokens). `visited_pairs` / `total_pairs` are increased by the TOKEN pairs
// attended, Σ over listed pairs of |Qc_i|·|Kc_j|, and by Sq·Sk (every token pair): the density
// is the fraction of the attention matrix computed, whatever the cluster sizes.
BlockSparsePattern make_pattern(const HeadPlan& plan, const ClusterOrder& q_order,
                                const ClusterOrder& k_order, int64_t* visited_pairs = nullptr,
                                int64_t* total_pairs = nullptr);

// Per-head token permutation of a [B, S, H, D] float32 tensor: out[b, i, h] = x[b,
// orders[b·H + h][i], h] (every order a permutation of the S tokens), and its inverse
// (out[b, orders[b·H + h][i], h] = x[b, i, h]). The block-sparse core reads one token order for
// all heads, so permuting each head's column in place of the tokens gives every head its own
// clusters in a single call.
Tensor permute_heads(const Tensor& x, const std::vector<std::vector<int64_t>>& orders);
Tensor unpermute_heads(const Tensor& x, const std::vector<std::vector<int64_t>>& orders);

}  // namespace mmgen::attention::svg2
