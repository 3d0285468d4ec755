#include "attention/backends/video_sparse_attn/vsa_coarse.h"
// clang-format off
#include "core/x86_intrinsics.h"  // before anything that includes it: see there
// clang-format on

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace mmgen::attention {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Means over each cube's valid tokens: [B, H, cubes, D], summed in double.
Tensor cube_means(const Tensor& x, const BlockLayout& cubes) {
  const int64_t batch = x.size(0), length = x.size(1), heads = x.size(2), dim = x.size(3);
  const int64_t count = cubes.size();
  Tensor means = Tensor::zeros({batch, heads, count, dim});
  const float* in = x.data<float>();
  float* out = means.data<float>();
#pragma omp parallel
  {
    std::vector<double> sum(static_cast<size_t>(dim));
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t c = 0; c < count; ++c) {
        const int64_t start = cubes.start[size_t(c)], size = cubes.length[size_t(c)];
        if (size == 0) continue;
        for (int64_t h = 0; h < heads; ++h) {
          std::fill(sum.begin(), sum.end(), 0.0);
          for (int64_t t = start; t < start + size; ++t) {
            const float* row = in + ((b * length + t) * heads + h) * dim;
            for (int64_t d = 0; d < dim; ++d) sum[size_t(d)] += row[d];
          }
          float* mean = out + ((b * heads + h) * count + c) * dim;
          for (int64_t d = 0; d < dim; ++d) mean[d] = float(sum[size_t(d)] / double(size));
        }
      }
  }
  return means;
}

}  // namespace

int64_t vsa_topk(double sparsity, int64_t cubes) {
  const double wanted = std::ceil((1.0 - sparsity) * double(cubes));
  return std::clamp<int64_t>(int64_t(std::max(wanted, 0.0)), 1, std::max<int64_t>(cubes, 1));
}

VsaCoarse vsa_coarse(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                     const BoxTiling& tiling, int64_t topk, int64_t text_block, bool want_output) {
  check(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(),
        "vsa_coarse: expects contiguous tensors");
  const int64_t batch = q.size(0), heads = q.size(2), dim = q.size(3);
  const int64_t cubes = tiling.box_count();
  check(topk >= 1 && topk <= cubes, "vsa_coarse: top-k {} outside [1, {}]", topk, cubes);
  const Tensor qc = cube_means(q, tiling.video_blocks), kc = cube_means(k, tiling.video_blocks);
  const Tensor vc = want_output ? cube_means(v, tiling.video_blocks) : Tensor();

  VsaCoarse result;
  if (want_output) result.output = Tensor::zeros({batch, heads, cubes, dim});
  const BlockLayout blocks = tiling_blocks(tiling, text_block);
  const int64_t block_count = blocks.size();
  result.patterns.resize(size_t(batch * heads));

#pragma omp parallel
  {
    RowMatrix scores;
    std::vector<int32_t> ranked(static_cast<size_t>(cubes));
    std::vector<double> weights(static_cast<size_t>(cubes));
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        const size_t offset = size_t((b * heads + h) * cubes * dim);
        Eigen::Map<const RowMatrix> qm(qc.data<float>() + offset, cubes, dim);
        Eigen::Map<const RowMatrix> km(kc.data<float>() + offset, cubes, dim);
        scores.noalias() = (qm * km.transpose()) * scale;

        BlockSparsePattern& pattern = result.patterns[size_t(b * heads + h)];
        pattern.q_blocks = blocks;
        pattern.kv_blocks = blocks;
        pattern.indptr.reserve(size_t(block_count + 1));
        pattern.indptr.push_back(0);
        pattern.indices.reserve(
            size_t(cubes * (topk + block_count - cubes) + (block_count - cubes) * block_count));
        for (int64_t i = 0; i < cubes; ++i) {
          const float* row = scores.data() + i * cubes;
          std::iota(ranked.begin(), ranked.end(), 0);
          const auto higher = [row](int32_t a, int32_t c) {
            return row[a] > row[c] || (row[a] == row[c] && a < c);
          };
          if (topk < cubes)
            std::nth_element(ranked.begin(), ranked.begin() + topk - 1, ranked.end(), higher);
          pattern.indices.insert(pattern.indices.end(), ranked.begin(), ranked.begin() + topk);
          for (int64_t text = cubes; text < block_count; ++text)
            pattern.indices.push_back(int32_t(text));
          pattern.indptr.push_back(int64_t(pattern.indices.size()));

          if (want_output) {
            // Softmax of the row in double, written over the scores (the selection is done).
            float* probabilities = scores.data() + i * cubes;
            double top = -INFINITY;
            for (int64_t j = 0; j < cubes; ++j) top = std::max(top, double(row[j]));
            double total = 0;
            for (int64_t j = 0; j < cubes; ++j)
              total += weights[size_t(j)] = std::exp(double(row[j]) - top);
            for (int64_t j = 0; j < cubes; ++j)
              probabilities[j] = float(weights[size_t(j)] / total);
          }
        }
        if (want_output) {
          Eigen::Map<const RowMatrix> vm(vc.data<float>() + offset, cubes, dim);
          Eigen::Map<RowMatrix> out(result.output.data<float>() + offset, cubes, dim);
          out.noalias() = scores * vm;
        }
        for (int64_t query = cubes; query < block_count; ++query) {
          for (int64_t key = 0; key < block_count; ++key) pattern.indices.push_back(int32_t(key));
          pattern.indptr.push_back(int64_t(pattern.indices.size()));
        }
      }
  }
  return result;
}

}  // namespace mmgen::attention
