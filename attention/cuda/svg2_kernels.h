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

}  // namespace mmgen::cuda
