#include "models/vae/autoencoder_kl_tiled_decode.h"

#include "core/error.h"

namespace mmgen::vae {

Tensor decode_tiled(const AutoencoderKLDecoder& decoder, const Tensor& z, const TileLayout& layout,
                    const std::function<void(int done, int total)>& progress) {
  const AutoencoderKLConfig& config = decoder.config();
  check(z.dim() == 4 && z.size(1) == config.latent_channels && z.numel() > 0,
        "decode_tiled: expected latents [batch, {}, height, width], got {}", config.latent_channels,
        shape_string(z.shape()));
  const int64_t batch = z.size(0), height = z.size(2), width = z.size(3);
  const int64_t factor = config.spatial_factor(), channels = config.out_channels;
  const TileBlend blend(height, width, factor, layout, decoder.tail_radius());

  // The head on the whole plane, kept on the host (latent resolution: small); each tile's region
  // goes to the decoder's device and its decoded image comes back.
  const Tensor head = decoder.head(z).to(Device::CPU);
  Tensor image = Tensor::zeros({batch, channels, height * factor, width * factor});
  float* out = image.data<float>();
  const int total = int(blend.tiles().size());
  int done = 0;
  for (const Tile& tile : blend.tiles()) {
    const Tensor decoded = decoder.tail(crop_region(head, tile)).to(Device::CPU).contiguous();
    check(decoded.dim() == 4 && decoded.size(1) == channels &&
              decoded.size(2) == (tile.ry1 - tile.ry0) * factor &&
              decoded.size(3) == (tile.rx1 - tile.rx0) * factor,
          "decode_tiled: a tile decoded to {}", shape_string(decoded.shape()));
    blend.add(tile, decoded.data<float>(), batch * channels, out, image.size(2) * image.size(3),
              /*clamp=*/false);
    if (progress) progress(++done, total);
  }
  blend.normalize(out, batch * channels);
  return image;
}

}  // namespace mmgen::vae
