#include "models/vae/vae_layouts.h"

namespace mmgen::vae {

const std::vector<KeyLayout>& wan_vae_layouts() {
  static const std::vector<KeyLayout> layouts = {
      {"diffusers", "decoder.mid_block.resnets.0.conv1.weight", {}, {}},
      {"original Wan VAE",
       "decoder.middle.0.residual.2.weight",
       {},
       "mmgen reads the Wan VAE in diffusers' layout only; convert it with diffusers "
       "(AutoencoderKLWan.from_single_file(FILE).save_pretrained(DIR)) or use the model folder's "
       "vae"},
  };
  return layouts;
}

const std::vector<KeyLayout>& autoencoder_kl_layouts() {
  static const std::vector<KeyLayout> layouts = {
      {"diffusers", "decoder.mid_block.resnets.0.conv1.weight", {}, {}},
      {"original LDM",
       "decoder.mid.block_1.conv1.weight",
       {},
       "mmgen reads AutoencoderKL in diffusers' layout only; convert it with diffusers "
       "(AutoencoderKL.from_single_file(FILE).save_pretrained(DIR)) or use the model folder's "
       "vae"},
  };
  return layouts;
}

}  // namespace mmgen::vae
