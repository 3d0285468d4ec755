#include "attention/backends/sparse_video_gen_2_attn/svg2_kmeans.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/ops.h"

#if defined(__AVX2__)
#include "core/x86_intrinsics.h"
#endif
#include <omp.h>

namespace mmgen::attention::svg2 {

namespace {

// Points per GEMM chunk of the assignment: a [chunk, clusters] distance tile stays in cache-sized
// memory even for 1000 clusters, and chunks are the unit of parallel work.
constexpr int64_t kAssignChunk = 256;

// The nearest centroid of one point from its dot products with the centroids: the lowest index of
// the smallest norms[c] − 2·dots[c] (n >= 1); 0 when none compares (NaNs). The minimum is found
// first (vectorised) and then its first occurrence, which is the scalar loop's "strictly smaller
// replaces" rule. Computed on the fly, without writing the distances: 2·dots[c] is exact, so the
// fused multiply-add and the separate multiply and subtract round to the same float.
int32_t nearest_centroid(const float* dots, const float* norms, int64_t n) {
  float best = std::numeric_limits<float>::infinity();
  int64_t c = 0;
#if defined(__AVX512F__)
  if (n >= 16) {
    const __m512 two = _mm512_set1_ps(2.0f);
    __m512 m = _mm512_set1_ps(best);
    for (; c + 16 <= n; c += 16)
      m = _mm512_min_ps(
          m, _mm512_fnmadd_ps(two, _mm512_loadu_ps(dots + c), _mm512_loadu_ps(norms + c)));
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, m);
    for (float lane : lanes) best = std::min(best, lane);
  }
#elif defined(__AVX2__)
  if (n >= 8) {
    const __m256 two = _mm256_set1_ps(2.0f);
    __m256 m = _mm256_set1_ps(best);
    for (; c + 8 <= n; c += 8)
      m = _mm256_min_ps(
          m, _mm256_fnmadd_ps(two, _mm256_loadu_ps(dots + c), _mm256_loadu_ps(norms + c)));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    for (float lane : lanes) best = std::min(best, lane);
  }
#endif
  for (; c < n; ++c) best = std::min(best, norms[c] - 2.0f * dots[c]);
  if (!(best < std::numeric_limits<float>::infinity())) return 0;
  for (c = 0; c < n; ++c)
    if (norms[c] - 2.0f * dots[c] == best) return int32_t(c);
  return 0;
}

// One pass over the points: the nearest centroid of every point, argmin_c |c|² − 2 x·c (|x|² is
// the same for all c; one Eigen GEMM per chunk of points), and, when `sums` is non-null, the
// per-cluster sums of the points (double) and the sizes, accumulated in the same pass while the
// chunk is in cache. Chunks run in parallel, each thread with its own sums, added at the end.
void assign(const float* x, int64_t points, int64_t dim, const std::vector<float>& centroids,
            int64_t clusters, std::vector<int32_t>& labels, std::vector<int64_t>& sizes,
            std::vector<double>* sums) {
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
  const int threads = parallel ? std::min<int>(omp_get_max_threads(), int(chunks)) : 1;
  std::vector<std::vector<double>> partial_sums(static_cast<size_t>(threads));
  std::vector<std::vector<int64_t>> partial_sizes(static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads) if (parallel)
  {
    const int thread = omp_get_thread_num();
    std::vector<int64_t>& my_sizes = partial_sizes[size_t(thread)];
    my_sizes.assign(size_t(clusters), 0);
    std::vector<double>* my_sums = nullptr;
    if (sums) {
      partial_sums[size_t(thread)].assign(size_t(clusters * dim), 0.0);
      my_sums = &partial_sums[size_t(thread)];
    }
    std::vector<float> dots(static_cast<size_t>(kAssignChunk * clusters));
#pragma omp for schedule(dynamic)
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const int64_t start = chunk * kAssignChunk, rows = std::min(kAssignChunk, points - start);
      ops::gemm_bt(x + start * dim, centroids.data(), dots.data(), rows, dim, clusters);
      for (int64_t r = 0; r < rows; ++r) {
        const int32_t label = nearest_centroid(dots.data() + r * clusters, norms.data(), clusters);
        labels[size_t(start + r)] = label;
        ++my_sizes[size_t(label)];
        if (my_sums) {
          double* sum = my_sums->data() + int64_t(label) * dim;
          const float* point = x + (start + r) * dim;
          for (int64_t d = 0; d < dim; ++d) sum[d] += point[d];
        }
      }
    }
  }
  std::fill(sizes.begin(), sizes.end(), 0);
  for (const auto& part : partial_sizes)  // a thread the runtime did not start left it empty
    for (size_t c = 0; c < part.size(); ++c) sizes[c] += part[c];
  if (sums) {
    std::fill(sums->begin(), sums->end(), 0.0);
    for (const auto& part : partial_sums)
      for (size_t i = 0; i < part.size(); ++i) (*sums)[i] += part[i];
  }
}

}  // namespace

std::vector<int64_t> seeded_initial_picks(int64_t points, int64_t clusters, uint64_t seed) {
  check(clusters >= 1 && clusters <= points, "k-means: {} clusters for {} points", clusters,
        points);
  // A partial Fisher-Yates shuffle driven by mt19937_64 (whose output the standard fixes; the
  // modulo keeps us off the implementation-defined distributions).
  std::mt19937_64 engine(seed);
  std::vector<int64_t> order(static_cast<size_t>(points));
  std::iota(order.begin(), order.end(), int64_t(0));
  for (int64_t c = 0; c < clusters; ++c) {
    const int64_t pick = c + int64_t(engine() % uint64_t(points - c));
    std::swap(order[size_t(c)], order[size_t(pick)]);
  }
  order.resize(size_t(clusters));
  return order;
}

std::vector<float> seeded_initial_centroids(const float* x, int64_t points, int64_t dim,
                                            int64_t clusters, uint64_t seed) {
  const std::vector<int64_t> picks = seeded_initial_picks(points, clusters, seed);
  std::vector<float> centroids(static_cast<size_t>(clusters * dim));
  for (int64_t c = 0; c < clusters; ++c)
    std::copy(x + picks[size_t(c)] * dim, x + picks[size_t(c)] * dim + dim,
              centroids.begin() + c * dim);
  return centroids;
}

uint64_t cold_start_seed(int64_t layer, int64_t pair, int side) {
  uint64_t value = (uint64_t(layer) << 32) ^ (uint64_t(pair) << 1) ^ uint64_t(side);
  value += 0x9e3779b97f4a7c15ull;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ull;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebull;
  return value ^ (value >> 31);
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
    // Every assignment but an assign-only call's is followed by an update from its labels, so
    // the sums are gathered in the same pass.
    const bool update = iteration < max_iterations;
    assign(x, points, dim, result.centroids, clusters, result.labels, result.sizes,
           update ? &sums : nullptr);
    if (!update) break;
    float shift = 0;
#pragma omp parallel for reduction(max : shift) if (clusters * dim > (int64_t(1) << 14))
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
