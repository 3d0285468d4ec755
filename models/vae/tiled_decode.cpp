#include "models/vae/tiled_decode.h"

#include "core/error.h"

namespace mmgen::vae {

Tensor decode_tiled(const WanVaeDecoder& decoder, const Tensor& z, const TileLayout& layout,
                    const DecodeProgress& progress) {
  check(z.dim() == 5 && z.size(1) == decoder.config().z_dim,
        "decode_tiled: expected latents [batch, {}, frames, height, width], got {}",
        decoder.config().z_dim, shape_string(z.shape()));
  const WanVaeConfig& config = decoder.config();
  const Tensor latents = z.to(DType::F32).to(Device::CPU);
  const int64_t batch = z.size(0), frames = z.size(2), height = z.size(3), width = z.size(4);
  const int64_t factor = config.spatial_factor(), temporal = config.temporal_factor();
  const int64_t channels = config.out_channels, out_frames = config.output_frames(frames);
  const int64_t plane = height * factor * width * factor;
  const TileBlend blend(height, width, factor, layout, decoder.tail_radius());

  // Weighted sums of the tile cores, then divided by the summed weights.
  Tensor video = Tensor::zeros({batch, channels, out_frames, height * factor, width * factor});
  float* out = video.data<float>();
  const int total = int(blend.tiles().size() * size_t(batch * frames));
  int done = 0;
  for (int64_t b = 0; b < batch; ++b) {
    // The heads of every latent frame, on the whole plane, kept on the host (latent resolution:
    // small); each tile's region goes to the decoder's device and its decoded frames come back, so
    // a GPU holds one tile's tail at a time.
    const Device device = decoder.device();
    std::vector<Tensor> heads;
    StreamState head_state = decoder.new_state();
    for (int64_t i = 0; i < frames; ++i) {
      head_state.last_chunk = i + 1 == frames;
      heads.push_back(
          decoder
              .head(latents.select(0, b).select(1, i).unsqueeze(0).contiguous().to(device),
                    head_state)
              .to(Device::CPU));
    }
    for (const Tile& tile : blend.tiles()) {
      StreamState tail_state = decoder.new_state();
      for (int64_t i = 0; i < frames; ++i) {
        tail_state.last_chunk = i + 1 == frames;
        const Tensor chunk =
            decoder.tail(crop_region(heads[size_t(i)], tile).to(device), tail_state)
                .to(Device::CPU)
                .to(DType::F32)
                .contiguous();
        const int64_t first = i == 0 ? 0 : 1 + (i - 1) * temporal;
        const int64_t count = chunk.size(0);
        check(count == (i == 0 ? 1 : temporal) && chunk.size(1) == channels,
              "decode_tiled: latent frame {} decoded to {}", i, shape_string(chunk.shape()));
        // chunk [count, channels, region]: frame t's channels go to planes (ch, first + t).
        for (int64_t t = 0; t < count; ++t)
          blend.add(tile, chunk.data<float>() + t * channels * chunk.size(2) * chunk.size(3),
                    channels, out + (b * channels * out_frames + first + t) * plane,
                    out_frames * plane, /*clamp=*/true);
        if (progress) progress(++done, total);
      }
    }
  }
  blend.normalize(out, batch * channels * out_frames);
  return video;
}

}  // namespace mmgen::vae
