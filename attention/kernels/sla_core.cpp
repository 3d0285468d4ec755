#include "attention/kernels/sla_core.h"
// clang-format off
#include "core/x86_intrinsics.h"  // before anything that includes it: see there
// clang-format on

#include <spdlog/spdlog.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>

#include "attention/kernels/sla_quant.h"
#include "core/error.h"
#include "core/ops.h"

namespace mmgen::attention::sla {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using StridedConst = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
using Strided = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

// Upstream's guard in the linear branch's denominator.
constexpr float kLinearEps = 1e-5f;

// Mean over rows [start, start + length) of one (batch, head) of x [B, S, H, D], in double.
void row_mean(const float* x, int64_t row, int64_t start, int64_t length, int64_t dim,
              double* mean) {
  std::fill(mean, mean + dim, 0.0);
  for (int64_t s = start; s < start + length; ++s)
    for (int64_t d = 0; d < dim; ++d) mean[d] += x[s * row + d];
  if (length > 0)
    for (int64_t d = 0; d < dim; ++d) mean[d] /= double(length);
}

// φ applied to every row of `rows` in place.
void apply_feature_map(RowMatrix& rows, FeatureMap feature_map) {
  for (int64_t i = 0; i < rows.rows(); ++i) {
    float* x = rows.data() + i * rows.cols();
    const int64_t n = rows.cols();
    switch (feature_map) {
      case FeatureMap::Softmax: {
        float max = x[0];
        for (int64_t d = 1; d < n; ++d) max = std::max(max, x[d]);
        float sum = 0;
        for (int64_t d = 0; d < n; ++d) sum += (x[d] = std::exp(x[d] - max));
        const float inverse = 1.0f / sum;
        for (int64_t d = 0; d < n; ++d) x[d] *= inverse;
        break;
      }
      case FeatureMap::Elu:
        for (int64_t d = 0; d < n; ++d) x[d] = x[d] > 0 ? x[d] + 1.0f : std::exp(x[d]);
        break;
      case FeatureMap::Relu:
        for (int64_t d = 0; d < n; ++d) x[d] = std::max(x[d], 0.0f);
        break;
    }
  }
}

const Tensor* find_weight(const LayerWeights* weights, const std::string& name) {
  if (!weights) return nullptr;
  auto it = weights->find(name);
  return it == weights->end() ? nullptr : &it->second;
}

}  // namespace

SlaSettings SlaSettings::from_json(const nlohmann::json& config, bool int8_qk) {
  SlaSettings s;
  s.int8_qk = int8_qk;
  config.at("topk").get_to(s.topk);
  config.at("block_q").get_to(s.block_q);
  config.at("block_k").get_to(s.block_k);
  const std::string map = config.at("feature_map").get<std::string>();
  if (map == "softmax")
    s.feature_map = FeatureMap::Softmax;
  else if (map == "elu")
    s.feature_map = FeatureMap::Elu;
  else if (map == "relu")
    s.feature_map = FeatureMap::Relu;
  else
    fail("sla_attn: feature_map '{}' is not softmax, elu or relu", map);
  check(s.topk > 0 && s.topk <= 1, "sla_attn: topk {} must be in (0, 1]", s.topk);
  check(s.block_q >= 1 && s.block_k >= 1, "sla_attn: block_q and block_k must be at least 1");
  return s;
}

int64_t kept_blocks(double ratio, int64_t key_blocks) {
  // int(ratio * blocks) in double, as Python computes it upstream.
  const auto count = int64_t(std::floor(ratio * double(key_blocks)));
  return std::clamp<int64_t>(count, 1, std::max<int64_t>(key_blocks, 1));
}

std::vector<BlockSparsePattern> block_map(const Tensor& q, const Tensor& k,
                                          const SlaSettings& settings) {
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), dim = q.size(3);
  const int64_t kv_len = k.size(1), row = heads * dim;
  const BlockLayout q_blocks = BlockLayout::uniform(q_len, settings.block_q);
  const BlockLayout kv_blocks = BlockLayout::uniform(kv_len, settings.block_k);
  const int64_t nq = q_blocks.size(), nk = kv_blocks.size();
  const int64_t kept = kept_blocks(settings.topk, nk);
  std::vector<BlockSparsePattern> patterns(size_t(batch * heads));
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < batch * heads; ++bh) {
    const int64_t b = bh / heads, h = bh % heads;
    const float* qh = q.data<float>() + b * q_len * row + h * dim;
    const float* kh = k.data<float>() + b * kv_len * row + h * dim;
    std::vector<double> k_mean(static_cast<size_t>(dim)), pooled_q(static_cast<size_t>(nq * dim)),
        pooled_k(static_cast<size_t>(nk * dim));
    row_mean(kh, row, 0, kv_len, dim, k_mean.data());
    for (int64_t i = 0; i < nq; ++i)
      row_mean(qh, row, q_blocks.start[size_t(i)], q_blocks.length[size_t(i)], dim,
               pooled_q.data() + i * dim);
    for (int64_t j = 0; j < nk; ++j) {
      double* p = pooled_k.data() + j * dim;
      row_mean(kh, row, kv_blocks.start[size_t(j)], kv_blocks.length[size_t(j)], dim, p);
      for (int64_t d = 0; d < dim; ++d) p[d] -= k_mean[size_t(d)];  // smooth-k
    }
    BlockSparsePattern& pattern = patterns[size_t(bh)];
    pattern.q_blocks = q_blocks;
    pattern.kv_blocks = kv_blocks;
    pattern.indptr.reserve(size_t(nq + 1));
    pattern.indptr.push_back(0);
    pattern.indices.reserve(size_t(nq * kept));
    std::vector<double> score(static_cast<size_t>(nk));
    std::vector<int32_t> order(static_cast<size_t>(nk));
    for (int64_t i = 0; i < nq; ++i) {
      const double* pq = pooled_q.data() + i * dim;
      for (int64_t j = 0; j < nk; ++j) {
        const double* pk = pooled_k.data() + j * dim;
        double dot = 0;
        for (int64_t d = 0; d < dim; ++d) dot += pq[d] * pk[d];
        score[size_t(j)] = dot;
      }
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + kept, order.end(),
                        [&](int32_t a, int32_t c) {
                          return score[size_t(a)] > score[size_t(c)] ||
                                 (score[size_t(a)] == score[size_t(c)] && a < c);
                        });
      std::sort(order.begin(), order.begin() + kept);  // ascending: friendlier memory order
      pattern.indices.insert(pattern.indices.end(), order.begin(), order.begin() + kept);
      pattern.indptr.push_back(int64_t(pattern.indices.size()));
    }
  }
  return patterns;
}

Tensor linear_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        FeatureMap feature_map) {
  const Tensor q = q_in.to(DType::F32), k = k_in.to(DType::F32), v = v_in.to(DType::F32);
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), dim = q.size(3);
  const int64_t kv_len = k.size(1);
  Tensor out = Tensor::empty({batch, q_len, heads, dim});
  const int64_t q_stride = q.strides()[1], k_stride = k.strides()[1], v_stride = v.strides()[1];
  check(q.strides()[3] == 1 && k.strides()[3] == 1 && v.strides()[3] == 1,
        "linear attention: head_dim must be contiguous");
#pragma omp parallel
  {
    RowMatrix phi_q, phi_k, kv, numerator;
    Eigen::RowVectorXf key_sum;
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < batch * heads; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      const float* qh = q.data<float>() + b * q.strides()[0] + h * q.strides()[2];
      const float* kh = k.data<float>() + b * k.strides()[0] + h * k.strides()[2];
      const float* vh = v.data<float>() + b * v.strides()[0] + h * v.strides()[2];
      phi_q = StridedConst(qh, q_len, dim, Eigen::OuterStride<>(q_stride));
      phi_k = StridedConst(kh, kv_len, dim, Eigen::OuterStride<>(k_stride));
      apply_feature_map(phi_q, feature_map);
      apply_feature_map(phi_k, feature_map);
      kv.noalias() =
          phi_k.transpose() * StridedConst(vh, kv_len, dim, Eigen::OuterStride<>(v_stride));
      key_sum = phi_k.colwise().sum();
      numerator.noalias() = phi_q * kv;
      Strided o(out.data<float>() + b * q_len * heads * dim + h * dim, q_len, dim,
                Eigen::OuterStride<>(heads * dim));
      for (int64_t i = 0; i < q_len; ++i) {
        const float denominator = kLinearEps + phi_q.row(i).dot(key_sum);
        o.row(i) = numerator.row(i) / denominator;
      }
    }
  }
  return out;
}

void add_projection(Tensor& out, const Tensor& o_l, const Tensor& weight, const Tensor& bias) {
  const int64_t dim = out.size(3);
  const Tensor rows = o_l.contiguous().view({-1, dim});
  Tensor projected = ops::linear(rows, weight, bias);
  Tensor shaped = projected.view(out.shape());
  ops::add_(out, shaped);
}

Tensor sla_forward(std::string_view name, const Tensor& q_in, const Tensor& k_in,
                   const Tensor& v_in, float scale, const SlaSettings& settings,
                   const LayerWeights* weights, AttentionStats* stats) {
  check(q_in.dim() == 4 && k_in.dim() == 4 && v_in.shape() == k_in.shape() &&
            q_in.size(0) == k_in.size(0) && q_in.size(2) == k_in.size(2) &&
            q_in.size(3) == k_in.size(3),
        "{}: expects q [B, Sq, H, D] and k, v [B, Sk, H, D]; got q {}, k {}, v {}", name,
        shape_string(q_in.shape()), shape_string(k_in.shape()), shape_string(v_in.shape()));
  const Tensor q = q_in.to(DType::F32).contiguous(), k = k_in.to(DType::F32).contiguous(),
               v = v_in.to(DType::F32).contiguous();
  const int64_t dim = q.size(3);

  const std::vector<BlockSparsePattern> patterns = block_map(q, k, settings);
  Tensor out;
  if (settings.int8_qk) {
    // Scores = (INT8 q·scale) · (INT8 smoothed k): the softmax scale is inside the quantised q.
    const Tensor q8 = int8_round_trip(q, patterns[0].q_blocks, kQueryWarpRows, scale);
    const Tensor k8 =
        int8_round_trip(smooth_keys(k), patterns[0].kv_blocks, settings.block_k, 1.0f);
    out = block_sparse_attention(q8, k8, v, 1.0f, patterns);
  } else {
    out = block_sparse_attention(q, k, v, scale, patterns);
  }

  const Tensor* weight = find_weight(weights, "proj_l.weight");
  if (weight) {
    const Tensor* bias = find_weight(weights, "proj_l.bias");
    check(weight->dim() == 2 && weight->size(0) == dim && weight->size(1) == dim,
          "{}: proj_l.weight is {} but the head size is {} (expected [{}, {}])", name,
          shape_string(weight->shape()), dim, dim, dim);
    check(!bias || (bias->dim() == 1 && bias->size(0) == dim),
          "{}: proj_l.bias is {} (expected [{}])", name, bias ? shape_string(bias->shape()) : "",
          dim);
    const Tensor o_l = linear_attention(q, k, v, settings.feature_map);
    add_projection(out, o_l, *weight, bias ? *bias : Tensor());
  } else {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      spdlog::warn(
          "{}: no proj_l weights for this layer (not an SLA-trained checkpoint); the linear "
          "branch contributes zero, as in an untrained SLA layer: pure block-sparse attention",
          name);
  }
  if (stats)
    for (const auto& pattern : patterns) {
      stats->visited_blocks += pattern.visited();
      stats->total_blocks += pattern.total();
    }
  return out;
}

std::vector<ConfigKey> config_keys() {
  return {
      {.name = "topk",
       .type = ConfigType::Float,
       .default_value = 0.1,
       .help = "fraction of key blocks each query block attends with softmax attention (at least "
               "one block is kept)",
       .min = 0.0,
       .max = 1.0,
       .min_inclusive = false,
       .aliases = {"topk_ratio"}},
      {.name = "block_q",
       .type = ConfigType::Int,
       .default_value = 128,
       .help = "query block size in tokens",
       .min = 1,
       .max = 1 << 16,
       .aliases = {"BLKQ"}},
      {.name = "block_k",
       .type = ConfigType::Int,
       .default_value = 64,
       .help = "key block size in tokens",
       .min = 1,
       .max = 1 << 16,
       .aliases = {"BLKK"}},
      {.name = "feature_map",
       .type = ConfigType::Choice,
       .default_value = "softmax",
       .help = "feature map of the linear-attention branch",
       .choices = {"softmax", "elu", "relu"}},
  };
}

}  // namespace mmgen::attention::sla
