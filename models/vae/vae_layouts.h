// The key layouts VAE checkpoints come in (models/key_layout.h). mmgen reads diffusers' layout;
// the original releases' (Wan2.1_VAE.pth's keys, as ComfyUI's wan_2.1_vae.safetensors keeps them;
// the LDM layout of BFL's ae.safetensors) are recognised so that such a file is refused in one line
// that says what it is and how to convert it, rather than as a missing tensor.
#pragma once

#include <vector>

#include "models/key_layout.h"

namespace mmgen::vae {

const std::vector<KeyLayout>& wan_vae_layouts();         // AutoencoderKLWan
const std::vector<KeyLayout>& autoencoder_kl_layouts();  // AutoencoderKL (FLUX.1, Z-Image)

}  // namespace mmgen::vae
