#include "models/vae/autoencoder_kl_conv.h"

#include "core/error.h"
#include "models/vae/autoencoder_kl_weights.h"

namespace mmgen::vae {

KlConv2d::KlConv2d(const WeightStore& store, std::string prefix, int64_t in_channels,
                   int64_t out_channels, int64_t kernel)
    : prefix_(std::move(prefix)) {
  models::expect_tensor(store, prefix_ + ".weight", {out_channels, in_channels, kernel, kernel},
                        kAutoencoderKlCheckpoint);
  models::expect_tensor(store, prefix_ + ".bias", {out_channels}, kAutoencoderKlCheckpoint);
  conv_ = ops::Conv(store.get(prefix_ + ".weight"), store.get(prefix_ + ".bias"),
                    {out_channels, in_channels, 0, kernel, kernel});
}

void KlConv2d::place(Device device, ops::ConvPrecision precision) {
  conv_ = conv_.to(device);
  precision_ = precision;
}

Tensor KlConv2d::forward(const Tensor& x, bool upsample2x, const Tensor& residual) const {
  check(x.dim() == 4 && x.dtype() == DType::F32 && x.is_contiguous() &&
            x.size(1) == conv_.in_channels(),
        "{}: expects contiguous float32 [B, {}, H, W], got {} {}", prefix_, conv_.in_channels(),
        dtype_name(x.dtype()), shape_string(x.shape()));
  // One temporal tap: the batch's images are independent frames.
  ops::ConvInputs inputs;
  inputs.upsample2x = upsample2x;
  inputs.residual = residual;
  inputs.precision = precision_;
  return ops::conv3d(conv_, x, inputs);
}

}  // namespace mmgen::vae
