#include "attention/kernels/sage_attention.h"
// clang-format off
#include "core/x86_intrinsics.h"  // before anything that includes it: see there
// clang-format on

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace mmgen::attention::sage {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();
constexpr int64_t kQueryTile = kQueryBlock;  // one tile per query block: block means align
constexpr int64_t kKeyTile = 256;            // a multiple of the INT8 key block and of 16
constexpr int64_t kFp4Group = 16;

// One (batch, head) prepared for the tiled loop: scores = (a · bᵀ) ∘ (row_scale ⊗ col_scale)
// + q̄_block · k_smoothᵀ, times the softmax scale; then P · v.
struct PreparedHead {
  std::vector<float> a;           // [Sq, D]
  std::vector<float> b;           // [Sk, D]
  std::vector<float> v;           // [Sk, D]
  std::vector<float> row_scale;   // [Sq] or empty (all 1)
  std::vector<float> col_scale;   // [Sk] or empty
  std::vector<float> block_mean;  // [ceil(Sq / 128), D] or empty (no Q smoothing)
  std::vector<float> k_smooth;    // [Sk, D] float32 smoothed K, when block_mean is used
};

// Copies head h of batch b out of a contiguous [B, S, H, D] tensor into [S, D].
std::vector<float> copy_head(const Tensor& x, int64_t b, int64_t h) {
  const int64_t length = x.size(1), heads = x.size(2), dim = x.size(3);
  std::vector<float> out(size_t(length * dim));
  const float* base = x.data<float>() + (b * length * heads + h) * dim;
  for (int64_t s = 0; s < length; ++s)
    std::copy(base + s * heads * dim, base + s * heads * dim + dim, out.data() + s * dim);
  return out;
}

void subtract_token_mean(std::vector<float>& x, int64_t length, int64_t dim) {
  if (length == 0) return;
  std::vector<double> mean(size_t(dim), 0.0);
  for (int64_t s = 0; s < length; ++s)
    for (int64_t d = 0; d < dim; ++d) mean[size_t(d)] += x[size_t(s * dim + d)];
  for (auto& m : mean) m /= double(length);
  for (int64_t s = 0; s < length; ++s)
    for (int64_t d = 0; d < dim; ++d) x[size_t(s * dim + d)] -= float(mean[size_t(d)]);
}

// Quantises P (rows × cols, row-major) in place the SageAttention3 way: each row normalised by
// s1 = rowmax / (448 · 6) so its e4m3 group scales use their whole range, FP4 groups of 16 along
// the keys, then scaled back by s1.
void quantize_p_fp4(RowMatrix& p) {
  const int64_t rows = p.rows(), cols = p.cols();
  std::vector<float> normalised(static_cast<size_t>(cols));
  for (int64_t i = 0; i < rows; ++i) {
    float* row = p.data() + i * cols;
    float row_max = 0;
    for (int64_t j = 0; j < cols; ++j) row_max = std::max(row_max, row[j]);
    if (row_max == 0) continue;
    const float s1 = row_max / (kE4m3Max * kE2m1Max);
    for (int64_t j = 0; j < cols; ++j) normalised[size_t(j)] = row[j] / s1;
    for (int64_t j = 0; j < cols; j += kFp4Group)
      quantize_fp4_group(normalised.data() + j, std::min(kFp4Group, cols - j), 1,
                         normalised.data() + j, 1);
    for (int64_t j = 0; j < cols; ++j) row[j] = normalised[size_t(j)] * s1;
  }
}

// The shared tiled loop: online softmax over key tiles for one (batch, head, query tile).
void attend_tile(const PreparedHead& head, int64_t q_len, int64_t kv_len, int64_t dim,
                 int64_t q_start, float scale, bool quantize_p, float* out, int64_t out_row) {
  const int64_t rows = std::min(kQueryTile, q_len - q_start);
  ConstMap a_tile(head.a.data() + q_start * dim, rows, dim);
  RowMatrix scores, accumulator = RowMatrix::Zero(rows, dim);
  Eigen::VectorXf running_max = Eigen::VectorXf::Constant(rows, kNegativeInfinity);
  Eigen::VectorXf running_sum = Eigen::VectorXf::Zero(rows);
  const float* mean =
      head.block_mean.empty() ? nullptr : head.block_mean.data() + (q_start / kQueryBlock) * dim;
  Eigen::VectorXf bias;
  for (int64_t k_start = 0; k_start < kv_len; k_start += kKeyTile) {
    const int64_t cols = std::min(kKeyTile, kv_len - k_start);
    ConstMap b_tile(head.b.data() + k_start * dim, cols, dim);
    ConstMap v_tile(head.v.data() + k_start * dim, cols, dim);
    scores.noalias() = a_tile * b_tile.transpose();
    if (mean) {
      ConstMap k_tile(head.k_smooth.data() + k_start * dim, cols, dim);
      bias.noalias() = k_tile * Eigen::Map<const Eigen::VectorXf>(mean, dim);
    }
    for (int64_t i = 0; i < rows; ++i) {
      float* s = scores.data() + i * cols;
      const float rs = head.row_scale.empty() ? 1.0f : head.row_scale[size_t(q_start + i)];
      if (!head.col_scale.empty()) {
        const float* cs = head.col_scale.data() + k_start;
        for (int64_t j = 0; j < cols; ++j) s[j] = s[j] * (rs * cs[j]) * scale;
      } else if (mean) {
        for (int64_t j = 0; j < cols; ++j) s[j] = (s[j] + bias[j]) * scale;
      } else {
        for (int64_t j = 0; j < cols; ++j) s[j] *= scale;
      }
      float block_max = kNegativeInfinity;
      for (int64_t j = 0; j < cols; ++j) block_max = std::max(block_max, s[j]);
      const float new_max = std::max(running_max[i], block_max);
      const float correction =
          running_max[i] == kNegativeInfinity ? 0.0f : std::exp(running_max[i] - new_max);
      float sum = 0;
      for (int64_t j = 0; j < cols; ++j) {
        s[j] = std::exp(s[j] - new_max);
        sum += s[j];
      }
      running_sum[i] = running_sum[i] * correction + sum;
      accumulator.row(i) *= correction;
      running_max[i] = new_max;
    }
    if (quantize_p) quantize_p_fp4(scores);
    accumulator.noalias() += scores * v_tile;
  }
  for (int64_t i = 0; i < rows; ++i) {
    float* o = out + (q_start + i) * out_row;
    const float inverse = running_sum[i] > 0 ? 1.0f / running_sum[i] : 0.0f;
    for (int64_t d = 0; d < dim; ++d) o[d] = accumulator(i, d) * inverse;
  }
}

struct Inputs {
  Tensor q, k, v;
  int64_t batch, q_len, kv_len, heads, dim;
};

Inputs check_inputs(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const char* who) {
  Inputs in{q_in.to(DType::F32).contiguous(),
            k_in.to(DType::F32).contiguous(),
            v_in.to(DType::F32).contiguous(),
            0,
            0,
            0,
            0,
            0};
  check(in.q.dim() == 4 && in.k.dim() == 4 && in.v.shape() == in.k.shape(),
        "{}: expects q, k, v as [B, S, H, D] with k and v alike", who);
  in.batch = in.q.size(0);
  in.q_len = in.q.size(1);
  in.heads = in.q.size(2);
  in.dim = in.q.size(3);
  in.kv_len = in.k.size(1);
  check(in.k.size(0) == in.batch && in.k.size(2) == in.heads && in.k.size(3) == in.dim,
        "{}: q {} and k {} differ in batch, heads or head size", who, shape_string(in.q.shape()),
        shape_string(in.k.shape()));
  return in;
}

template <typename Prepare>
Tensor run(const Inputs& in, float scale, bool quantize_p, Prepare prepare) {
  const int64_t pairs = in.batch * in.heads;
  std::vector<PreparedHead> heads(static_cast<size_t>(pairs));
  // Threads only pay off beyond a few hundred thousand multiply-adds.
  const bool parallel = in.q_len * in.kv_len * in.dim * pairs > (int64_t(1) << 19);
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t bh = 0; bh < pairs; ++bh) heads[size_t(bh)] = prepare(bh / in.heads, bh % in.heads);

  Tensor out = Tensor::empty({in.batch, in.q_len, in.heads, in.dim});
  const int64_t tiles = (in.q_len + kQueryTile - 1) / kQueryTile;
  const int64_t out_row = in.heads * in.dim;
#pragma omp parallel for collapse(2) schedule(dynamic) if (parallel)
  for (int64_t bh = 0; bh < pairs; ++bh)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t b = bh / in.heads, h = bh % in.heads;
      attend_tile(heads[size_t(bh)], in.q_len, in.kv_len, in.dim, t * kQueryTile, scale, quantize_p,
                  out.data<float>() + b * in.q_len * out_row + h * in.dim, out_row);
    }
  return out;
}

}  // namespace

Granularity parse_granularity(std::string_view name) {
  if (name == "per_block") return Granularity::PerBlock;
  if (name == "per_warp") return Granularity::PerWarp;
  if (name == "per_thread") return Granularity::PerThread;
  fail("sage_attn: qk_quant_gran '{}' is not one of per_block, per_warp, per_thread", name);
}

Tensor sage_int8_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, float scale,
                           const Int8Options& options) {
  const Inputs in = check_inputs(q_in, k_in, v_in, "sage_attn");
  check(in.dim <= 1040, "sage_attn: head size {} is too large for exact INT8 products (<= 1040)",
        in.dim);
  return run(in, scale, false, [&](int64_t b, int64_t h) {
    PreparedHead head;
    std::vector<float> q = copy_head(in.q, b, h), k = copy_head(in.k, b, h);
    if (options.smooth_k) subtract_token_mean(k, in.kv_len, in.dim);
    head.a.resize(q.size());
    head.row_scale.resize(size_t(in.q_len));
    quantize_int8(q.data(), in.q_len, in.dim, in.dim, options.granularity, true, head.a.data(),
                  head.row_scale.data());
    head.b.resize(k.size());
    head.col_scale.resize(size_t(in.kv_len));
    quantize_int8(k.data(), in.kv_len, in.dim, in.dim, options.granularity, false, head.b.data(),
                  head.col_scale.data());
    head.v = copy_head(in.v, b, h);
    return head;
  });
}

Tensor sage_fp4_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, float scale,
                          const Fp4Options& options) {
  const Inputs in = check_inputs(q_in, k_in, v_in, "sage_attn_3");
  return run(in, scale, true, [&](int64_t b, int64_t h) {
    PreparedHead head;
    const int64_t dim = in.dim;
    std::vector<float> q = copy_head(in.q, b, h), k = copy_head(in.k, b, h);
    subtract_token_mean(k, in.kv_len, dim);
    if (options.per_block_mean) {
      const int64_t blocks = (in.q_len + kQueryBlock - 1) / kQueryBlock;
      head.block_mean.assign(size_t(blocks * dim), 0.0f);
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t start = blk * kQueryBlock, rows = std::min(kQueryBlock, in.q_len - start);
        std::vector<double> mean(size_t(dim), 0.0);
        for (int64_t r = start; r < start + rows; ++r)
          for (int64_t d = 0; d < dim; ++d) mean[size_t(d)] += q[size_t(r * dim + d)];
        for (int64_t d = 0; d < dim; ++d) {
          const float m = float(mean[size_t(d)] / double(rows));
          head.block_mean[size_t(blk * dim + d)] = m;
          for (int64_t r = start; r < start + rows; ++r) q[size_t(r * dim + d)] -= m;
        }
      }
      head.k_smooth = k;
    }
    // Q and K: groups of 16 along the head dimension (the reduction of Q·Kᵀ).
    head.a.resize(q.size());
    for (int64_t r = 0; r < in.q_len; ++r)
      for (int64_t d = 0; d < dim; d += kFp4Group)
        quantize_fp4_group(q.data() + r * dim + d, std::min(kFp4Group, dim - d), 1,
                           head.a.data() + r * dim + d, 1);
    head.b.resize(k.size());
    for (int64_t r = 0; r < in.kv_len; ++r)
      for (int64_t d = 0; d < dim; d += kFp4Group)
        quantize_fp4_group(k.data() + r * dim + d, std::min(kFp4Group, dim - d), 1,
                           head.b.data() + r * dim + d, 1);
    // V: groups of 16 tokens per channel (the reduction of P·V; the kernel stores V transposed).
    const std::vector<float> v = copy_head(in.v, b, h);
    head.v.resize(v.size());
    for (int64_t s = 0; s < in.kv_len; s += kFp4Group)
      for (int64_t d = 0; d < dim; ++d)
        quantize_fp4_group(v.data() + s * dim + d, std::min(kFp4Group, in.kv_len - s), dim,
                           head.v.data() + s * dim + d, dim);
    return head;
  });
}

}  // namespace mmgen::attention::sage
