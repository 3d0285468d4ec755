#include "models/vae/autoencoder_kl_attention.h"

#include <cmath>
#include <cstring>

#include "attention/device_attention.h"
#include "attention/kernels/dense_attention.h"
#include "core/error.h"
#include "core/ops.h"
#include "models/vae/autoencoder_kl_weights.h"

namespace mmgen::vae {
namespace {

constexpr float kAttentionNormEps =
    1e-6f;  // UNetMidBlock2D passes resnet_eps to its attention's norm

// `parts` ([rows_i, ...] on the host, any float dtype) stacked along the first axis as float32,
// reshaped to `shape`.
Tensor stack_f32(std::initializer_list<Tensor> parts, const Shape& shape) {
  Tensor result = Tensor::empty(shape);
  std::byte* to = result.raw();
  for (const Tensor& part : parts) {
    const Tensor values = ops::weight_to_f32(part).contiguous();
    std::memcpy(to, values.raw(), values.nbytes());
    to += values.nbytes();
  }
  return result;
}

}  // namespace

KlAttentionBlock::KlAttentionBlock(const WeightStore& store, const std::string& prefix,
                                   int64_t channels, int64_t groups)
    : prefix_(prefix),
      channels_(channels),
      norm_(store, prefix + ".group_norm", channels, groups, kAttentionNormEps) {
  for (const char* projection : {".to_q", ".to_k", ".to_v", ".to_out.0"}) {
    models::expect_tensor(store, prefix + projection + ".weight", {channels, channels},
                          kAutoencoderKlCheckpoint);
    models::expect_tensor(store, prefix + projection + ".bias", {channels},
                          kAutoencoderKlCheckpoint);
  }
  q_weight_ = store.get(prefix + ".to_q.weight"), q_bias_ = store.get(prefix + ".to_q.bias");
  k_weight_ = store.get(prefix + ".to_k.weight"), k_bias_ = store.get(prefix + ".to_k.bias");
  v_weight_ = store.get(prefix + ".to_v.weight"), v_bias_ = store.get(prefix + ".to_v.bias");
  out_weight_ = store.get(prefix + ".to_out.0.weight");
  out_bias_ = store.get(prefix + ".to_out.0.bias");
}

void KlAttentionBlock::place(Device device, ops::ConvPrecision precision) {
  norm_.place(device);
  precision_ = precision;
  if (device == Device::CPU) {
    qkv_ = ops::Conv(), out_ = ops::Conv();
    return;
  }
  // A linear layer over channels is a 1×1 convolution over channel-major planes, which leaves
  // q, k and v as the [C, H·W] planes channel_attention_gpu reads: no transposes on the GPU.
  const int64_t c = channels_;
  qkv_ = ops::Conv(stack_f32({q_weight_, k_weight_, v_weight_}, {3 * c, c, 1, 1}),
                   stack_f32({q_bias_, k_bias_, v_bias_}, {3 * c}), {3 * c, c, 0, 1, 1})
             .to(device);
  out_ = ops::Conv(stack_f32({out_weight_}, {c, c, 1, 1}), stack_f32({out_bias_}, {c}),
                   {c, c, 0, 1, 1})
             .to(device);
}

size_t KlAttentionBlock::resident_bytes() const {
  return norm_.resident_bytes() + qkv_.resident_bytes() + out_.resident_bytes();
}

Tensor KlAttentionBlock::forward(const Tensor& x, attention::Layer& attention) const {
  check(x.dim() == 4 && x.size(1) == channels_, "{}: expects [B, {}, H, W], got {}", prefix_,
        channels_, shape_string(x.shape()));
  return x.is_cpu() ? forward_cpu(x, attention) : forward_gpu(x);
}

Tensor KlAttentionBlock::forward_cpu(const Tensor& x, attention::Layer& attention) const {
  const int64_t batch = x.size(0), height = x.size(2), width = x.size(3);
  const int64_t positions = height * width;
  const Tensor normed = norm_.forward(x, /*silu=*/false);
  // Channels-first planes to token rows [B, H·W, C], which the projections multiply.
  const Tensor tokens = normed.view({batch, channels_, positions}).permute({0, 2, 1}).contiguous();
  auto project = [&](const Tensor& weight, const Tensor& bias) {
    return ops::linear(tokens, weight, bias).view({batch, positions, 1, channels_});  // one head
  };
  const Tensor q = project(q_weight_, q_bias_), k = project(k_weight_, k_bias_),
               v = project(v_weight_, v_bias_);
  // SDPA's default scale, 1/√head_dim, formed in double and rounded once as torch does.
  const float scale = float(1.0 / std::sqrt(double(channels_)));
  // Through the plan's backend for the VAE, or the dense reference without one.
  const Tensor attended = attention.forward(q, k, v, {.scale = scale});
  const Tensor rows = attended.contiguous().view({batch, positions, channels_});
  const Tensor out = ops::linear(rows, out_weight_, out_bias_);
  Tensor y = out.permute({0, 2, 1}).contiguous().view({batch, channels_, height, width});
  ops::add_(y, x);  // residual_connection; rescale_output_factor 1 divides by nothing
  return y;
}

Tensor KlAttentionBlock::forward_gpu(const Tensor& x) const {
  check(qkv_.device() == x.device(),
        "{}: the input is on the {} but the weights are not; call "
        "the decoder's set_device first",
        prefix_, device_name(x.device()));
  const int64_t batch = x.size(0), channels = channels_, positions = x.size(2) * x.size(3);
  ops::ConvInputs inputs;
  inputs.precision = precision_;
  // [B, 3C, H, W]: channels [0, C) the queries, [C, 2C) the keys, [2C, 3C) the values.
  const Tensor qkv = ops::conv3d(qkv_, norm_.forward(x, /*silu=*/false), inputs);
  const float scale = float(1.0 / std::sqrt(double(channels)));
  Tensor attended = Tensor::empty(x.shape(), DType::F32, x.device());
  for (int64_t b = 0; b < batch; ++b) {
    const Tensor image = qkv.select(0, b).view({3 * channels, positions});
    Tensor out = attended.select(0, b).view({channels, positions});
    attention::channel_attention_gpu(image.slice(0, 0, channels),
                                     image.slice(0, channels, 2 * channels),
                                     image.slice(0, 2 * channels, 3 * channels), scale,
                                     precision_ == ops::ConvPrecision::FP32, out);
  }
  inputs.residual = x;  // residual_connection, added by the output projection
  return ops::conv3d(out_, attended, inputs);
}

}  // namespace mmgen::vae
