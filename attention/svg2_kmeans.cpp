#include "attention/svg2_kmeans.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::attention::svg2 {

namespace {

// Points per GEMM chunk of the assignment: a [chunk, clusters] distance tile stays in cache-sized
// memory even for 1000 clusters, and chunks are the unit of parallel work.
constexpr int64_t kAssignChunk = 256;

// Nearest centroid of every point: argmin_c |c|² − 2 x·c (|x|² is the same for all c).
void assign(const float* x, int64_t points, int64_t dim, const std::vector<float>& centroids,
            int64_t clusters, std::vector<int32_t>& labels) {
  std::vector<float> norms(static_cast<size_t>(clusters));
  for (int64_t c = 0; c < clusters; ++c) {
    double n = 0;
    for (int64_t d = 0; d < dim; ++d)
      n += double(centroids[size_t(c * dim + d)]) * centroids[size_t(c * dim + d)];
    norms[size_t(c)] = float(n);
  }
  const int64_t chunks = (points + kAssignChunk - 1) / kAssignChunk;
  // Threads only pay off beyond a few hundred thousand multiply-adds.
  const bool parallel = chunks > 1 && points * clusters * dim > (int64_t(1) << 19);
#pragma omp parallel if (parallel)
  {
    std::vector<float> dots(static_cast<size_t>(kAssignChunk * clusters));
#pragma omp for schedule(dynamic)
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const int64_t start = chunk * kAssignChunk, rows = std::min(kAssignChunk, points - start);
      ops::gemm_bt(x + start * dim, centroids.data(), dots.data(), rows, dim, clusters);
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = dots.data() + r * clusters;
        float best = std::numeric_limits<float>::infinity();
        int32_t best_index = 0;
        for (int64_t c = 0; c < clusters; ++c) {
          const float distance = norms[size_t(c)] - 2.0f * row[c];
          if (distance < best) {
            best = distance;
            best_index = int32_t(c);
          }
        }
        labels[size_t(start + r)] = best_index;
      }
    }
  }
}

}  // namespace

std::vector<float> seeded_initial_centroids(const float* x, int64_t points, int64_t dim,
                                            int64_t clusters, uint64_t seed) {
  check(clusters >= 1 && clusters <= points, "k-means: {} clusters for {} points", clusters,
        points);
  // A partial Fisher-Yates shuffle driven by mt19937_64 (whose output the standard fixes; the
  // modulo keeps us off the implementation-defined distributions).
  std::mt19937_64 engine(seed);
  std::vector<int64_t> order(static_cast<size_t>(points));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::vector<float> centroids(static_cast<size_t>(clusters * dim));
  for (int64_t c = 0; c < clusters; ++c) {
    const int64_t pick = c + int64_t(engine() % uint64_t(points - c));
    std::swap(order[size_t(c)], order[size_t(pick)]);
    std::copy(x + order[size_t(c)] * dim, x + order[size_t(c)] * dim + dim,
              centroids.begin() + c * dim);
  }
  return centroids;
}

KMeansResult kmeans(const float* x, int64_t points, int64_t dim, std::vector<float> initial,
                    int64_t max_iterations, float tolerance) {
  const int64_t clusters = int64_t(initial.size()) / std::max<int64_t>(dim, 1);
  check(clusters >= 1 && int64_t(initial.size()) == clusters * dim,
        "k-means: initial centroids do not match the dimension {}", dim);
  KMeansResult result;
  result.centroids = std::move(initial);
  result.labels.assign(size_t(points), 0);
  result.sizes.assign(size_t(clusters), 0);
  std::vector<double> sums(static_cast<size_t>(clusters * dim));
  for (int64_t iteration = 0;; ++iteration) {
    assign(x, points, dim, result.centroids, clusters, result.labels);
    std::fill(result.sizes.begin(), result.sizes.end(), 0);
    for (int64_t p = 0; p < points; ++p) ++result.sizes[size_t(result.labels[size_t(p)])];
    if (iteration == max_iterations) break;
    std::fill(sums.begin(), sums.end(), 0.0);
    for (int64_t p = 0; p < points; ++p) {
      double* sum = sums.data() + result.labels[size_t(p)] * dim;
      for (int64_t d = 0; d < dim; ++d) sum[d] += x[p * dim + d];
    }
    float shift = 0;
    for (int64_t c = 0; c < clusters; ++c) {
      if (result.sizes[size_t(c)] == 0) continue;  // empty: keeps its centroid
      double moved = 0;
      for (int64_t d = 0; d < dim; ++d) {
        const float mean = float(sums[size_t(c * dim + d)] / double(result.sizes[size_t(c)]));
        float& centroid = result.centroids[size_t(c * dim + d)];
        moved += double(mean - centroid) * double(mean - centroid);
        centroid = mean;
      }
      shift = std::max(shift, float(std::sqrt(moved)));
    }
    result.iterations = iteration + 1;
    result.last_shift = shift;
    // Converged, or the budget is spent: the centroids now are the means of the clusters that
    // the labels describe, so stop without assigning again.
    if (shift < tolerance || result.iterations == max_iterations) break;
  }
  return result;
}

}  // namespace mmgen::attention::svg2
