#include "models/vae/autoencoder_kl_resnet.h"

#include "core/ops.h"
#include "models/vae/autoencoder_kl_weights.h"

namespace mmgen::vae {
namespace {

constexpr float kNormEps = 1e-6f;  // the decoder passes resnet_eps=1e-6 to every block

}  // namespace

KlResnetBlock::KlResnetBlock(const WeightStore& store, const std::string& prefix,
                             int64_t in_channels, int64_t out_channels, int64_t groups)
    : prefix_(prefix), groups_(groups), has_shortcut_(in_channels != out_channels) {
  for (const char* part : {".norm1.weight", ".norm1.bias"})
    check_kl_weight(store, prefix + part, {in_channels});
  for (const char* part : {".norm2.weight", ".norm2.bias"})
    check_kl_weight(store, prefix + part, {out_channels});
  conv1_ = KlConv2d(store, prefix + ".conv1", in_channels, out_channels, 3);
  conv2_ = KlConv2d(store, prefix + ".conv2", out_channels, out_channels, 3);
  if (has_shortcut_)
    shortcut_ = KlConv2d(store, prefix + ".conv_shortcut", in_channels, out_channels, 1);
}

Tensor KlResnetBlock::forward(const WeightStore& store, const Tensor& x) const {
  Tensor h = ops::group_norm(x, groups_, kNormEps, store.get(prefix_ + ".norm1.weight"),
                             store.get(prefix_ + ".norm1.bias"), /*silu=*/true);
  h = conv1_.forward(h);
  h = ops::group_norm(h, groups_, kNormEps, store.get(prefix_ + ".norm2.weight"),
                      store.get(prefix_ + ".norm2.bias"), /*silu=*/true);
  h = conv2_.forward(h);  // dropout is the identity at inference
  // diffusers adds input + hidden; float addition commutes, so adding into h is the same sum.
  ops::add_(h, has_shortcut_ ? shortcut_.forward(x) : x);
  return h;
}

}  // namespace mmgen::vae
