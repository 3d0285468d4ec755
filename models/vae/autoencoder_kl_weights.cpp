#include "models/vae/autoencoder_kl_weights.h"

#include "core/error.h"

namespace mmgen::vae {

void check_kl_weight(const WeightStore& store, const std::string& name, const Shape& shape) {
  check(store.has(name),
        "VAE weights in {} lack '{}'; is this a diffusers AutoencoderKL with this config.json?",
        store.origin().string(), name);
  check(store.info(name).shape == shape,
        "VAE weight '{}' in {} has shape {} but config.json implies {}; config and weights "
        "disagree",
        name, store.origin().string(), shape_string(store.info(name).shape), shape_string(shape));
}

}  // namespace mmgen::vae
