#include "models/vae/autoencoder_kl_attention.h"

#include <cmath>

#include "attention/dense_attention.h"
#include "core/error.h"
#include "core/ops.h"
#include "models/vae/autoencoder_kl_weights.h"

namespace mmgen::vae {
namespace {

constexpr float kNormEps = 1e-6f;  // UNetMidBlock2D passes resnet_eps to its attention's norm

}  // namespace

KlAttentionBlock::KlAttentionBlock(const WeightStore& store, const std::string& prefix,
                                   int64_t channels, int64_t groups)
    : prefix_(prefix), channels_(channels), groups_(groups) {
  check_kl_weight(store, prefix + ".group_norm.weight", {channels});
  check_kl_weight(store, prefix + ".group_norm.bias", {channels});
  for (const char* projection : {".to_q", ".to_k", ".to_v", ".to_out.0"}) {
    check_kl_weight(store, prefix + projection + ".weight", {channels, channels});
    check_kl_weight(store, prefix + projection + ".bias", {channels});
  }
}

Tensor KlAttentionBlock::forward(const WeightStore& store, const Tensor& x,
                                 attention::AttentionBackend* backend) const {
  check(x.dim() == 4 && x.size(1) == channels_, "{}: expects [B, {}, H, W], got {}", prefix_,
        channels_, shape_string(x.shape()));
  const int64_t batch = x.size(0), height = x.size(2), width = x.size(3);
  const int64_t positions = height * width;
  const Tensor normed =
      ops::group_norm(x, groups_, kNormEps, store.get(prefix_ + ".group_norm.weight"),
                      store.get(prefix_ + ".group_norm.bias"));
  // Channels-first planes to token rows [B, H·W, C], which the projections multiply.
  const Tensor tokens = normed.view({batch, channels_, positions}).permute({0, 2, 1}).contiguous();
  auto project = [&](const char* name) {
    const std::string p = prefix_ + name;
    return ops::linear(tokens, store.get(p + ".weight"), store.get(p + ".bias"))
        .view({batch, positions, 1, channels_});  // one head of width C
  };
  const Tensor q = project(".to_q"), k = project(".to_k"), v = project(".to_v");
  // SDPA's default scale, 1/√head_dim, formed in double and rounded once as torch does.
  const float scale = float(1.0 / std::sqrt(double(channels_)));
  Tensor attended;
  if (backend) {
    attended = backend->forward(q, k, v, scale, attention::AttentionContext{});
  } else {
    attention::DenseAttentionArgs args;
    args.q = q;
    args.k = k;
    args.v = v;
    args.scale = scale;
    attended = attention::dense_attention(args);
  }
  const Tensor rows = attended.contiguous().view({batch, positions, channels_});
  const Tensor out = ops::linear(rows, store.get(prefix_ + ".to_out.0.weight"),
                                 store.get(prefix_ + ".to_out.0.bias"));
  Tensor y = out.permute({0, 2, 1}).contiguous().view({batch, channels_, height, width});
  ops::add_(y, x);  // residual_connection; rescale_output_factor 1 divides by nothing
  return y;
}

}  // namespace mmgen::vae
