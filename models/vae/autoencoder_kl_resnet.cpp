#include "models/vae/autoencoder_kl_resnet.h"

namespace mmgen::vae {
namespace {

constexpr float kResnetNormEps = 1e-6f;  // the decoder passes resnet_eps=1e-6 to every block

}  // namespace

KlResnetBlock::KlResnetBlock(const WeightStore& store, const std::string& prefix,
                             int64_t in_channels, int64_t out_channels, int64_t groups)
    : norm1_(store, prefix + ".norm1", in_channels, groups, kResnetNormEps),
      norm2_(store, prefix + ".norm2", out_channels, groups, kResnetNormEps),
      has_shortcut_(in_channels != out_channels) {
  conv1_ = KlConv2d(store, prefix + ".conv1", in_channels, out_channels, 3);
  conv2_ = KlConv2d(store, prefix + ".conv2", out_channels, out_channels, 3);
  if (has_shortcut_)
    shortcut_ = KlConv2d(store, prefix + ".conv_shortcut", in_channels, out_channels, 1);
}

void KlResnetBlock::place(Device device, ops::ConvPrecision precision) {
  norm1_.place(device), norm2_.place(device);
  conv1_.place(device, precision), conv2_.place(device, precision);
  if (has_shortcut_) shortcut_.place(device, precision);
}

size_t KlResnetBlock::resident_bytes() const {
  return norm1_.resident_bytes() + norm2_.resident_bytes() + conv1_.resident_bytes() +
         conv2_.resident_bytes() + (has_shortcut_ ? shortcut_.resident_bytes() : 0);
}

Tensor KlResnetBlock::forward(const Tensor& x) const {
  const Tensor h = conv1_.forward(norm1_.forward(x, /*silu=*/true));
  // diffusers adds input + hidden; float addition commutes, so the convolution adding the input
  // to its result (after its own sum, as a separate add would) is the same sum. Dropout is the
  // identity at inference.
  return conv2_.forward(norm2_.forward(h, /*silu=*/true), /*upsample2x=*/false,
                        has_shortcut_ ? shortcut_.forward(x) : x);
}

}  // namespace mmgen::vae
