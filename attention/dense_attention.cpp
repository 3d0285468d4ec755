#include "attention/dense_attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::attention {

Tensor dense_attention(const DenseAttentionArgs& args) {
  const Tensor q = args.q.contiguous(), k = args.k.contiguous(), v = args.v.contiguous();
  check(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention expects [batch, seq, heads, head_dim] tensors");
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), head_dim = q.size(3);
  const int64_t kv_len = k.size(1);
  check(k.size(0) == batch && k.size(2) == heads && k.size(3) == head_dim && v.shape() == k.shape(),
        "attention: q {} k {} v {} do not fit together", shape_string(q.shape()), shape_string(k.shape()),
        shape_string(v.shape()));
  if (args.bias.defined())
    check(args.bias.shape() == Shape({heads, q_len, kv_len}), "attention: bias {} should be [{}, {}, {}]",
          shape_string(args.bias.shape()), heads, q_len, kv_len);
  Tensor bias = args.bias.defined() ? args.bias.to(DType::F32) : Tensor();
  Tensor mask = args.key_mask.defined() ? args.key_mask.to(DType::F32) : Tensor();

  Tensor out = Tensor::empty({batch, q_len, heads, head_dim});
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  float* op = out.data<float>();
  const int64_t row = heads * head_dim;  // stride between tokens

#pragma omp parallel if (batch * heads * q_len * kv_len * head_dim > (1 << 16))
  {
    std::vector<float> scores(static_cast<size_t>(kv_len));
#pragma omp for collapse(3) schedule(static)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < q_len; ++i) {
          const float* qi = qp + (b * q_len + i) * row + h * head_dim;
          float max_score = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < kv_len; ++j) {
            const float* kj = kp + (b * kv_len + j) * row + h * head_dim;
            float dot = 0;
            for (int64_t d = 0; d < head_dim; ++d) dot += qi[d] * kj[d];
            float score = dot * args.scale;
            if (bias.defined()) score += bias.data<float>()[(h * q_len + i) * kv_len + j];
            if (mask.defined() && mask.data<float>()[b * kv_len + j] == 0.0f)
              score = -std::numeric_limits<float>::infinity();
            scores[size_t(j)] = score;
            max_score = std::max(max_score, score);
          }
          float* oi = op + (b * q_len + i) * row + h * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) oi[d] = 0;
          if (max_score == -std::numeric_limits<float>::infinity()) continue;  // every key masked
          double sum = 0;
          for (int64_t j = 0; j < kv_len; ++j) {
            scores[size_t(j)] = std::exp(scores[size_t(j)] - max_score);
            sum += scores[size_t(j)];
          }
          const float inv = float(1.0 / sum);
          for (int64_t j = 0; j < kv_len; ++j) {
            const float p = scores[size_t(j)] * inv;
            const float* vj = vp + (b * kv_len + j) * row + h * head_dim;
            for (int64_t d = 0; d < head_dim; ++d) oi[d] += p * vj[d];
          }
        }
  }
  return out;
}

}  // namespace mmgen::attention
