// Sparse VideoGen 2's steps around the attention kernel on the GPU
// (attention/backends/sparse_video_gen_2_attn/svg2_cuda.cpp drives them): the k-means of every
// (batch, head)'s queries or keys, written to give the CPU's svg2_kmeans.h results on the same
// bf16 values, and the per-head permutation of the tokens into padded cluster order and back.
//
// x is always a bf16 [batch, seq, heads·head_dim] buffer (the GPU transformer's q or k); "pair"
// p = b·heads + h names one (batch, head); all `seq` tokens are points. Centroids are float32
// [pairs, clusters, head_dim]; labels int32 [pairs, seq]. `active` [pairs] (int32, 1 or 0) lets
// the heads stop at different iterations, as the CPU's per-head loops do: kernels leave a pair
// whose flag is 0 as it is. head_dim must be 64 or 128 (what the attention kernel takes).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// The shape every k-means kernel shares.
struct Svg2KmeansShape {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0, clusters = 0;
  int64_t pairs() const { return batch * heads; }
};

// centroids[p, c, :] = x[b, picks[p·clusters + c], h, :] (the cold start's chosen tokens).
void svg2_gather_centroids(const void* x, const int32_t* picks, float* centroids,
                           const Svg2KmeansShape& shape, cudaStream_t stream = nullptr);

// norms[p, c] = float(Σ_d double(c_d)²), d ascending: the CPU's norms, bit for bit.
void svg2_centroid_norms(const float* centroids, float* norms, const int32_t* active,
                         const Svg2KmeansShape& shape, cudaStream_t stream = nullptr);

// labels[p, i] = argmin_c norms[c] − 2·(x_i · c), the lowest index among equals (0 when none
// compares: NaNs). Each dot product is one float32 fused multiply-add chain, d ascending.
void svg2_assign(const void* x, const float* centroids, const float* norms, int32_t* labels,
                 const int32_t* active, const Svg2KmeansShape& shape,
                 cudaStream_t stream = nullptr);

// Scratch of svg2_sort_members for `shape` (bytes; allocate once per shape).
size_t svg2_sort_scratch_bytes(const Svg2KmeansShape& shape);

// The members of every cluster in token order (a stable radix sort of the keys p·clusters + label:
// deterministic, no atomics): members [pairs·seq] holds, for pair p, the token indices of cluster
// 0, then cluster 1, ... each ascending; keys_sorted [pairs·seq] their keys; counts and starts
// [pairs, clusters] each cluster's size and first position within the pair's run (0 for empty
// clusters).
struct Svg2Members {
  int32_t* keys = nullptr;         // [pairs·seq] scratch
  int32_t* tokens = nullptr;       // [pairs·seq] scratch
  int32_t* keys_sorted = nullptr;  // [pairs·seq]
  int32_t* members = nullptr;      // [pairs·seq]
  int32_t* counts = nullptr;       // [pairs·clusters]
  int32_t* starts = nullptr;       // [pairs·clusters]
  void* scratch = nullptr;         // svg2_sort_scratch_bytes(shape)
  size_t scratch_bytes = 0;
};
void svg2_sort_members(const int32_t* labels, const Svg2Members& members,
                       const Svg2KmeansShape& shape, cudaStream_t stream = nullptr);

// One k-means update of the active pairs from the members of the last assignment: every
// non-empty cluster moves to float(Σ x / size) (the sum in double, members in token order), an
// empty one stays; shift_bits[p] (zeroed by the caller) becomes the bits of the largest
// float(sqrt(Σ_d double(new − old)²)) over the pair's clusters. Then iterations[p] grows by one
// and active[p] drops to 0 once the shift is below `tolerance` or `max_iterations` are done.
void svg2_update(const void* x, const Svg2Members& members, float* centroids, uint32_t* shift_bits,
                 int32_t* iterations, int32_t* active, int64_t max_iterations, float tolerance,
                 const Svg2KmeansShape& shape, cudaStream_t stream = nullptr);

// The slots of the padded cluster order: member i of cluster c of pair p (members as
// svg2_sort_members left them) goes to slot slot_start[p·clusters + c] + i; token_of_slot[slot] =
// p·seq + token. The caller fills token_of_slot with -1 first, so padding slots stay -1.
void svg2_slots(const Svg2Members& members, const int32_t* slot_start, int32_t* token_of_slot,
                const Svg2KmeansShape& shape, cudaStream_t stream = nullptr);

// rows[s, :] = x[b, t, h, :] for token_of_slot[s] = p·seq + t, zeros for -1. rows [slots,
// head_dim] bf16.
void svg2_gather_rows(const void* x, const int32_t* token_of_slot, void* rows, int64_t slots,
                      const Svg2KmeansShape& shape, cudaStream_t stream = nullptr);

// out[b, t, h, :] = rows[s, :] for every slot s with token_of_slot[s] = p·seq + t.
void svg2_scatter_rows(const void* rows, const int32_t* token_of_slot, void* out, int64_t slots,
                       const Svg2KmeansShape& shape, cudaStream_t stream = nullptr);

// ---- The plan on the device ----
//
// The kept cluster pairs of every (pair, query cluster) row, with the CPU's rule
// (svg2_plan.h's select_cluster_pairs): size-weighted softmax of scale · (Cq_i · Ck_j) over the
// key clusters, descending (ties by index), kept while the mass before a cluster is <= top_p (the
// first and the floor(min_kc_ratio · k_clusters) first always). The CPU rounds its float32 scores
// in Eigen's order, which the device cannot promise to repeat, so the device computes the scores
// (and the masses) in double and proves per row that any float32 score within the worst-case
// summation error γ_D · Σ_d |a_d·b_d| of the exact one would give the same kept set: the kept and
// the first dropped cluster must stay apart and the top-p crossing must stay on its side under
// the resulting relative change of every mass. Rows that fail (near-ties) are flagged for the
// host, which recomputes them with the CPU's own arithmetic (svg2_cuda.cpp); nothing else
// differs. selected [rows · k_clusters] uint8, flags [rows] uint8, *flag_count (zeroed by the
// caller) the number of flagged rows; rows = pairs · q_clusters.
struct Svg2PlanShape {
  int64_t pairs = 0, q_clusters = 0, k_clusters = 0, head_dim = 0;
  int64_t q_rows() const { return pairs * q_clusters; }
  int64_t k_rows() const { return pairs * k_clusters; }
};
void svg2_select_pairs(const float* q_centroids, const float* k_centroids, const int32_t* k_counts,
                       float scale, double top_p, double min_kc_ratio, const Svg2PlanShape& shape,
                       uint8_t* selected, uint8_t* flags, int32_t* flag_count,
                       cudaStream_t stream = nullptr);

// selected[row_ids[r] · k_clusters + j] = rows[r · k_clusters + j]: the host's flagged rows.
void svg2_patch_rows(const uint8_t* rows, const int32_t* row_ids, int64_t count, int64_t k_clusters,
                     uint8_t* selected, cudaStream_t stream = nullptr);

// The block lists of the padded cluster order (svg2_cuda.cpp): every cluster padded to whole
// 64-row blocks, one list per 64-query half holding, ascending, the key blocks of the kept
// non-empty key clusters. Built in three passes around two scans, so only totals go to the host.
//
// blocks[i] = ceil(counts[i] / 64) for i < n, blocks[n] = 0 (so an exclusive scan's last entry
// is the total).
void svg2_block_counts(const int32_t* counts, int64_t n, int32_t* blocks,
                       cudaStream_t stream = nullptr);
// Exclusive prefix sums of n values (int32 or int64) and their scratch.
size_t svg2_scan_scratch_bytes(int64_t n);
void svg2_exclusive_scan(const int32_t* in, int32_t* out, int64_t n, void* scratch, size_t bytes,
                         cudaStream_t stream = nullptr);
void svg2_exclusive_scan(const int64_t* in, int64_t* out, int64_t n, void* scratch, size_t bytes,
                         cudaStream_t stream = nullptr);
// Per query-cluster row: list_len[row] = Σ key blocks of its kept non-empty key clusters,
// entries[row] = list_len · its query halves (entries[rows] = 0), and *kept_pairs (zeroed by the
// caller) += its rows · the keys of those clusters (integers: the sum is exact in any order).
void svg2_list_lengths(const uint8_t* selected, const int32_t* q_counts, const int32_t* k_counts,
                       const Svg2PlanShape& shape, int32_t* list_len, int64_t* entries,
                       unsigned long long* kept_pairs, cudaStream_t stream = nullptr);
// offsets[half] and indices of every row's halves (every half of a row gets the same list), and
// offsets[total halves] = the total entries; slot starts (64 · block starts) of both sides and
// key_lengths of every key block.
struct Svg2ListArgs {
  const uint8_t* selected = nullptr;
  const int32_t *q_counts = nullptr, *k_counts = nullptr;
  const int32_t *q_half_start = nullptr, *k_block_start = nullptr;  // [rows + 1] exclusive scans
  const int32_t* list_len = nullptr;
  const int64_t* entry_start = nullptr;  // [q rows + 1]
  int32_t *offsets = nullptr, *indices = nullptr, *key_lengths = nullptr;
  int32_t *q_slot_start = nullptr, *k_slot_start = nullptr;
};
void svg2_write_lists(const Svg2ListArgs& args, const Svg2PlanShape& shape,
                      cudaStream_t stream = nullptr);
// The totals the host needs, in one download: out = {*flag_count, q_half_start[q rows],
// k_block_start[k rows], entry_start[q rows], *kept_pairs}.
void svg2_plan_totals(const int32_t* flag_count, const int32_t* q_half_start,
                      const int32_t* k_block_start, const int64_t* entry_start,
                      const unsigned long long* kept_pairs, const Svg2PlanShape& shape,
                      int64_t* out, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
