#include "attention/backends/sparse_video_gen_2_attn/svg2_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::attention::svg2 {

std::vector<uint8_t> select_cluster_pairs(const float* q_centroids, int64_t q_clusters,
                                          const float* k_centroids, const int64_t* k_sizes,
                                          int64_t k_clusters, int64_t dim, float scale,
                                          double top_p, double min_kc_ratio) {
  std::vector<float> scores(static_cast<size_t>(q_clusters * k_clusters));
  ops::gemm_bt(q_centroids, k_centroids, scores.data(), q_clusters, dim, k_clusters);
  std::vector<uint8_t> selected(static_cast<size_t>(q_clusters * k_clusters), 0);
  const int64_t always_kept = int64_t(std::floor(min_kc_ratio * double(k_clusters)));
  // Query clusters are independent: rows in parallel, each thread with its own buffers.
#pragma omp parallel if (q_clusters * k_clusters > (int64_t(1) << 15))
  {
    std::vector<double> mass(static_cast<size_t>(k_clusters));
    std::vector<int64_t> sorted(static_cast<size_t>(k_clusters));
#pragma omp for schedule(dynamic, 8)
    for (int64_t i = 0; i < q_clusters; ++i) {
      uint8_t* keep = selected.data() + i * k_clusters;
      if (top_p >= 1.0) {
        std::fill(keep, keep + k_clusters, uint8_t(1));
        continue;
      }
      const float* s = scores.data() + i * k_clusters;
      double row_max = -INFINITY, total = 0;
      for (int64_t j = 0; j < k_clusters; ++j) row_max = std::max(row_max, double(s[j]) * scale);
      for (int64_t j = 0; j < k_clusters; ++j) {
        mass[size_t(j)] = double(k_sizes[j]) * std::exp(double(s[j]) * scale - row_max);
        total += mass[size_t(j)];
      }
      for (auto& m : mass) m /= std::max(total, 1e-12);
      // Descending mass, ties by cluster index: the stable sort's order, as a strict total order,
      // so only the head of it needs sorting. Sort a prefix; if the walk reaches its end while
      // still keeping, sort twice as much.
      std::iota(sorted.begin(), sorted.end(), int64_t(0));
      const auto before_in_order = [&](int64_t a, int64_t b) {
        return mass[size_t(a)] > mass[size_t(b)] || (mass[size_t(a)] == mass[size_t(b)] && a < b);
      };
      int64_t prefix = std::min(k_clusters, std::max<int64_t>(always_kept + 1, 64));
      std::partial_sort(sorted.begin(), sorted.begin() + prefix, sorted.end(), before_in_order);
      double before = 0;  // mass of the clusters ahead of this one in the sorted order
      for (int64_t rank = 0; rank < k_clusters; ++rank) {
        if (rank == prefix) {
          const int64_t grown = std::min(k_clusters, 2 * prefix);
          std::partial_sort(sorted.begin() + prefix, sorted.begin() + grown, sorted.end(),
                            before_in_order);
          prefix = grown;
        }
        const int64_t j = sorted[size_t(rank)];
        if (rank == 0 || rank < always_kept || before <= top_p)
          keep[j] = 1;
        else
          break;  // the mass only grows, and the always-kept ranks are behind us
        before += mass[size_t(j)];
      }
    }
  }
  return selected;
}

ClusterOrder order_by_label(const std::vector<int32_t>& labels, int64_t clusters) {
  ClusterOrder result;
  result.blocks.start.assign(size_t(clusters), 0);
  result.blocks.length.assign(size_t(clusters), 0);
  for (int32_t label : labels) {
    check(label >= 0 && label < clusters, "svg2: label {} outside {} clusters", label, clusters);
    ++result.blocks.length[size_t(label)];
  }
  for (int64_t c = 1; c < clusters; ++c)
    result.blocks.start[size_t(c)] =
        result.blocks.start[size_t(c - 1)] + result.blocks.length[size_t(c - 1)];
  std::vector<int64_t> next = result.blocks.start;
  result.order.resize(labels.size());
  for (size_t i = 0; i < labels.size(); ++i)
    result.order[size_t(next[size_t(labels[i])]++)] = int64_t(i);
  return result;
}

BlockSparsePattern make_pattern(const HeadPlan& plan, const ClusterOrder& q_order,
                                const ClusterOrder& k_order, int64_t* visited_pairs,
                                int64_t* total_pairs) {
  BlockSparsePattern pattern;
  pattern.q_blocks = q_order.blocks;
  pattern.kv_blocks = k_order.blocks;
  pattern.indptr.reserve(size_t(plan.q_clusters + 1));
  pattern.indptr.push_back(0);
  int64_t q_tokens = 0, k_tokens = 0, visited = 0;
  for (int64_t j = 0; j < plan.k_clusters; ++j) k_tokens += k_order.blocks.length[size_t(j)];
  for (int64_t i = 0; i < plan.q_clusters; ++i) {
    const int64_t rows = q_order.blocks.length[size_t(i)];
    if (rows > 0) {
      q_tokens += rows;
      const uint8_t* keep = plan.selected.data() + i * plan.k_clusters;
      for (int64_t j = 0; j < plan.k_clusters; ++j)
        if (keep[j] && k_order.blocks.length[size_t(j)] > 0) {
          pattern.indices.push_back(int32_t(j));
          visited += rows * k_order.blocks.length[size_t(j)];
        }
    }
    pattern.indptr.push_back(int64_t(pattern.indices.size()));
  }
  if (visited_pairs) *visited_pairs += visited;
  if (total_pairs) *total_pairs += q_tokens * k_tokens;
  return pattern;
}

namespace {

Tensor move_heads(const Tensor& x_in, const std::vector<std::vector<int64_t>>& orders,
                  bool inverse) {
  const Tensor x = x_in.to(DType::F32).contiguous();
  const int64_t batch = x.size(0), length = x.size(1), heads = x.size(2), dim = x.size(3);
  check(int64_t(orders.size()) == batch * heads, "svg2: {} token orders for {} x {} heads",
        orders.size(), batch, heads);
  Tensor out = Tensor::empty(x.shape());
  const float* source = x.data<float>();
  float* target = out.data<float>();
  const size_t bytes = size_t(dim) * sizeof(float);
#pragma omp parallel for collapse(2) schedule(static) if (x.numel() > (int64_t(1) << 18))
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<int64_t>& order = orders[size_t(b * heads + h)];
      for (int64_t i = 0; i < length; ++i) {
        const int64_t from = inverse ? i : order[size_t(i)], to = inverse ? order[size_t(i)] : i;
        std::memcpy(target + ((b * length + to) * heads + h) * dim,
                    source + ((b * length + from) * heads + h) * dim, bytes);
      }
    }
  return out;
}

}  // namespace

Tensor permute_heads(const Tensor& x, const std::vector<std::vector<int64_t>>& orders) {
  return move_heads(x, orders, false);
}

Tensor unpermute_heads(const Tensor& x, const std::vector<std::vector<int64_t>>& orders) {
  return move_heads(x, orders, true);
}

}  // namespace mmgen::attention::svg2
