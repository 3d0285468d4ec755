#include "models/vae/autoencoder_kl_norm.h"

#include "core/ops.h"
#include "models/vae/autoencoder_kl_weights.h"

namespace mmgen::vae {

KlGroupNorm::KlGroupNorm(const WeightStore& store, const std::string& prefix, int64_t channels,
                         int64_t groups, float eps)
    : groups_(groups), eps_(eps) {
  models::expect_tensor(store, prefix + ".weight", {channels}, kAutoencoderKlCheckpoint);
  models::expect_tensor(store, prefix + ".bias", {channels}, kAutoencoderKlCheckpoint);
  host_weight_ = weight_ = store.get(prefix + ".weight");
  host_bias_ = bias_ = store.get(prefix + ".bias");
}

void KlGroupNorm::place(Device device) {
  if (device == Device::CPU) {
    weight_ = host_weight_, bias_ = host_bias_;
    return;
  }
  // The GPU kernel reads float32 weights; converting once here spares a conversion per call.
  weight_ = ops::weight_to_f32(host_weight_).contiguous().to(device);
  bias_ = ops::weight_to_f32(host_bias_).contiguous().to(device);
}

size_t KlGroupNorm::resident_bytes() const {
  return weight_.is_cpu() ? 0 : weight_.nbytes() + bias_.nbytes();
}

Tensor KlGroupNorm::forward(const Tensor& x, bool silu) const {
  return ops::group_norm(x, groups_, eps_, weight_, bias_, silu);
}

}  // namespace mmgen::vae
