// A random-weight Wan2.1 VAE decoder checkpoint of any configuration, for GPU tests and benchmarks
// that need real dimensions without a download: post_quant_conv and every decoder tensor the
// config implies (the names and shapes WanVaeDecoder checks), deterministic. Convolution weights
// are scaled by their fan-in so activations stay in range; conv_out is scaled down further so the
// video is not mostly clamped to ±1.
#pragma once

#include "core/safetensors.h"
#include "models/vae/wan_vae_config.h"

namespace mmgen::vae {

// `dtype`: bf16 (as released checkpoints store it) or f32.
NamedTensors random_decoder_checkpoint(const WanVaeConfig& config, DType dtype = DType::BF16);

}  // namespace mmgen::vae
