// Euclidean k-means for Sparse VideoGen 2: the queries (or keys) of one head clustered so that
// tokens with similar vectors become one contiguous block after permutation.
//
// One iteration assigns every point to its nearest centroid (squared Euclidean distance, ties to
// the lower index) and moves each centroid to the mean of its members (an empty cluster keeps its
// old centroid); it stops early once no centroid moved by more than `tolerance` (the reference's
// 1e-4). The labels and sizes returned are those of the last assignment, the centroids the means
// of those clusters, as the reference returns them.
#pragma once

#include <cstdint>
#include <vector>

namespace mmgen::attention::svg2 {

struct KMeansResult {
  std::vector<int32_t> labels;   // [points]
  std::vector<float> centroids;  // [clusters, dim]
  std::vector<int64_t> sizes;    // [clusters]
  int64_t iterations = 0;        // centroid updates run (early stop included)
  float last_shift = 0;          // largest centroid move of the last update
};

// The initial centroids of a cold start: `clusters` distinct points (clusters <= points) drawn
// with a portable, seeded generator, so a run is reproducible on any machine.
std::vector<float> seeded_initial_centroids(const float* x, int64_t points, int64_t dim,
                                            int64_t clusters, uint64_t seed);
// The indices of those points, in centroid order (the GPU gathers the rows itself).
std::vector<int64_t> seeded_initial_picks(int64_t points, int64_t clusters, uint64_t seed);
// The seed of one cold start: layer, pair (b·heads + h) and side (0 queries, 1 keys) spread by
// splitmix64, so every head and side draws independently and the CPU and GPU draw alike.
uint64_t cold_start_seed(int64_t layer, int64_t pair, int side);

// Clusters x [points, dim] (contiguous) starting from `initial` [clusters, dim]. With
// max_iterations 0 it only assigns (the centroids stay as given).
KMeansResult kmeans(const float* x, int64_t points, int64_t dim, std::vector<float> initial,
                    int64_t max_iterations, float tolerance = 1e-4f);

}  // namespace mmgen::attention::svg2
