#include "attention/kernels/dense_attention.h"
// clang-format off
#include "core/x86_intrinsics.h"  // before anything that includes it: see there
// clang-format on

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace mmgen::attention {

namespace {

// Token rows of one (batch, head) slice are `heads * head_dim` floats apart: map them in place.
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using StridedConst = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
using Strided = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

// Queries per tile: the tile's score rows (tile x kv_len floats) stay in cache for softmax and P·V.
constexpr int64_t kQueryTile = 64;

}  // namespace

Tensor dense_attention(const DenseAttentionArgs& args) {
  const Tensor q = args.q.contiguous(), k = args.k.contiguous(), v = args.v.contiguous();
  check(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
        "attention expects [batch, seq, heads, head_dim] tensors");
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), head_dim = q.size(3);
  const int64_t kv_len = k.size(1);
  check(k.size(0) == batch && k.size(2) == heads && k.size(3) == head_dim && v.shape() == k.shape(),
        "attention: q {} k {} v {} do not fit together", shape_string(q.shape()),
        shape_string(k.shape()), shape_string(v.shape()));
  if (args.bias.defined())
    check(args.bias.shape() == Shape({heads, q_len, kv_len}),
          "attention: bias {} should be [{}, {}, {}]", shape_string(args.bias.shape()), heads,
          q_len, kv_len);
  const Tensor bias = args.bias.defined() ? args.bias.to(DType::F32) : Tensor();
  const Tensor mask = args.key_mask.defined() ? args.key_mask.to(DType::F32) : Tensor();

  Tensor out = Tensor::empty({batch, q_len, heads, head_dim});
  const int64_t row = heads * head_dim;
  const int64_t tiles = (q_len + kQueryTile - 1) / kQueryTile;
  const bool parallel = batch * heads * q_len * kv_len * head_dim > (1 << 16);
  constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

  // One (batch, head, query tile) per task; the GEMMs inside run on the task's thread.
#pragma omp parallel if (parallel)
  {
    RowMatrix scores;
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t tile = 0; tile < tiles; ++tile) {
          const int64_t first = tile * kQueryTile, count = std::min(kQueryTile, q_len - first);
          StridedConst q_tile(q.data<float>() + (b * q_len + first) * row + h * head_dim, count,
                              head_dim, Eigen::OuterStride<>(row));
          StridedConst keys(k.data<float>() + b * kv_len * row + h * head_dim, kv_len, head_dim,
                            Eigen::OuterStride<>(row));
          StridedConst values(v.data<float>() + b * kv_len * row + h * head_dim, kv_len, head_dim,
                              Eigen::OuterStride<>(row));
          scores.resize(count, kv_len);
          scores.noalias() = q_tile * keys.transpose();

          for (int64_t i = 0; i < count; ++i) {
            float* s = scores.data() + i * kv_len;
            const float* bias_row =
                bias.defined() ? bias.data<float>() + (h * q_len + first + i) * kv_len : nullptr;
            const float* mask_row = mask.defined() ? mask.data<float>() + b * kv_len : nullptr;
            float max_score = kNegativeInfinity;
            for (int64_t j = 0; j < kv_len; ++j) {
              float value = s[j] * args.scale;
              if (bias_row) value += bias_row[j];
              if (mask_row && mask_row[j] == 0.0f) value = kNegativeInfinity;
              s[j] = value;
              max_score = std::max(max_score, value);
            }
            if (max_score == kNegativeInfinity) {  // every key masked: the row attends to nothing
              std::fill(s, s + kv_len, 0.0f);
              continue;
            }
            double sum = 0;
            for (int64_t j = 0; j < kv_len; ++j) {
              s[j] = std::exp(s[j] - max_score);
              sum += s[j];
            }
            const float inverse = float(1.0 / sum);
            for (int64_t j = 0; j < kv_len; ++j) s[j] *= inverse;
          }
          Strided out_tile(out.data<float>() + (b * q_len + first) * row + h * head_dim, count,
                           head_dim, Eigen::OuterStride<>(row));
          out_tile.noalias() = scores * values;
        }
  }
  return out;
}

}  // namespace mmgen::attention
