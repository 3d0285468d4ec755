// The host memory an AutoencoderKL decode takes on the CPU (Z-Image and FLUX decode with it),
// from its config and the request only: see pipeline/memory_estimate.h.
#pragma once

#include <cstdint>

#include "models/vae/autoencoder_kl_config.h"
#include "pipeline/request.h"

namespace mmgen {

// The decoded image in float32 (what the output stage holds).
uint64_t autoencoder_kl_image_bytes(const Request& request, const vae::AutoencoderKLConfig& config);
// The decode's peak, whole or in --vae-tiling tiles.
uint64_t autoencoder_kl_decode_bytes(const Request& request,
                                     const vae::AutoencoderKLConfig& config);

}  // namespace mmgen
