#include "models/vae/autoencoder_kl_conv.h"

#include "core/error.h"
#include "models/vae/autoencoder_kl_weights.h"

namespace mmgen::vae {

KlConv2d::KlConv2d(const WeightStore& store, std::string prefix, int64_t in_channels,
                   int64_t out_channels, int64_t kernel)
    : prefix_(std::move(prefix)), shape_{out_channels, in_channels, 0, kernel, kernel} {
  check_kl_weight(store, prefix_ + ".weight", {out_channels, in_channels, kernel, kernel});
  check_kl_weight(store, prefix_ + ".bias", {out_channels});
}

Tensor KlConv2d::forward(const WeightStore& store, const Tensor& x, bool upsample2x) const {
  check(x.is_cpu(), "{}: the VAE convolution has no CUDA implementation yet; decode on the CPU",
        prefix_);
  check(x.dim() == 4 && x.dtype() == DType::F32 && x.is_contiguous() &&
            x.size(1) == shape_.in_channels,
        "{}: expects contiguous float32 [B, {}, H, W], got {} {}", prefix_, shape_.in_channels,
        dtype_name(x.dtype()), shape_string(x.shape()));
  const int64_t batch = x.size(0), height = x.size(2), width = x.size(3);
  const int64_t scale = upsample2x ? 2 : 1;
  const ConvWeights weights = load_conv(store, prefix_, shape_);
  Tensor y = Tensor::empty({batch, shape_.out_channels, scale * height, scale * width});
  const int64_t in_image = shape_.in_channels * height * width;
  const int64_t out_image = shape_.out_channels * scale * height * scale * width;
  // conv_frame threads over bands of output rows; images go one after another.
  for (int64_t b = 0; b < batch; ++b)
    conv_frame(weights, {x.data<float>() + b * in_image}, height, width, upsample2x,
               y.data<float>() + b * out_image);
  return y;
}

}  // namespace mmgen::vae
