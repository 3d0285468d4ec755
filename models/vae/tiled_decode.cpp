#include "models/vae/tiled_decode.h"

#include <algorithm>

#include "core/error.h"

namespace mmgen::vae {

std::vector<int64_t> tile_starts(int64_t size, const TileLayout& layout) {
  check(layout.tile > 0 && layout.overlap >= 0 && layout.overlap < layout.tile,
        "VAE tiling: the overlap ({}) must be smaller than the tile ({}), in latent pixels",
        layout.overlap, layout.tile);
  if (layout.tile >= size) return {0};
  std::vector<int64_t> starts;
  const int64_t stride = layout.tile - layout.overlap;
  for (int64_t start = 0; start + layout.tile < size; start += stride) starts.push_back(start);
  starts.push_back(size - layout.tile);
  return starts;
}

float blend_weight(int64_t i, int64_t length, int64_t ramp, bool before, bool after) {
  float weight = 1.0f;
  // Pixel centres: the two tiles' weights across an overlap of exactly `ramp` pixels sum to 1.
  if (before && i < ramp) weight = std::min(weight, (float(i) + 0.5f) / float(ramp));
  if (after && length - 1 - i < ramp)
    weight = std::min(weight, (float(length - 1 - i) + 0.5f) / float(ramp));
  return weight;
}

namespace {

// Rows [y0, y1) and columns [x0, x1) of every frame of h [T, C, H, W], as a contiguous tensor.
Tensor crop(const Tensor& h, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
  return h.slice(2, y0, y1).slice(3, x0, x1).contiguous();
}

}  // namespace

Tensor decode_tiled(const WanVaeDecoder& decoder, const Tensor& z, const TileLayout& layout,
                    const DecodeProgress& progress) {
  check(z.dim() == 5 && z.size(1) == decoder.config().z_dim,
        "decode_tiled: expected latents [batch, {}, frames, height, width], got {}",
        decoder.config().z_dim, shape_string(z.shape()));
  check(decoder.device() == Device::CPU,
        "decode_tiled: tiled decoding runs on the CPU; this decoder is on the {}",
        device_name(decoder.device()));
  const WanVaeConfig& config = decoder.config();
  const Tensor latents = z.to(DType::F32);
  const int64_t batch = z.size(0), frames = z.size(2), height = z.size(3), width = z.size(4);
  const int64_t factor = config.spatial_factor(), temporal = config.temporal_factor();
  const int64_t channels = config.out_channels, out_frames = config.output_frames(frames);
  const int64_t out_h = height * factor, out_w = width * factor, plane = out_h * out_w;
  const int64_t ramp = layout.overlap * factor, halo = decoder.tail_radius();
  const std::vector<int64_t> rows = tile_starts(height, layout),
                             columns = tile_starts(width, layout);

  // Weighted sums of the tile cores, then divided by the summed weights (one plane: the weights
  // do not depend on frame or channel).
  Tensor video = Tensor::zeros({batch, channels, out_frames, out_h, out_w});
  std::vector<float> weight_sum(static_cast<size_t>(plane), 0.0f);
  float* out = video.data<float>();
  const int total = int(rows.size() * columns.size() * size_t(batch * frames));
  int done = 0;
  for (int64_t b = 0; b < batch; ++b) {
    // The heads of every latent frame, on the whole plane.
    std::vector<Tensor> heads;
    StreamState head_state = decoder.new_state();
    for (int64_t i = 0; i < frames; ++i)
      heads.push_back(
          decoder.head(latents.select(0, b).select(1, i).unsqueeze(0).contiguous(), head_state));
    for (size_t r = 0; r < rows.size(); ++r)
      for (size_t c = 0; c < columns.size(); ++c) {
        // The core, and the region decoded: the core plus the halo, inside the plane.
        const int64_t y0 = rows[r], y1 = std::min(height, y0 + layout.tile);
        const int64_t x0 = columns[c], x1 = std::min(width, x0 + layout.tile);
        const int64_t ry0 = std::max<int64_t>(0, y0 - halo), ry1 = std::min(height, y1 + halo);
        const int64_t rx0 = std::max<int64_t>(0, x0 - halo), rx1 = std::min(width, x1 + halo);
        const int64_t ph = (y1 - y0) * factor, pw = (x1 - x0) * factor;
        const int64_t region_w = (rx1 - rx0) * factor,
                      region_plane = (ry1 - ry0) * factor * region_w;
        const int64_t skip_y = (y0 - ry0) * factor, skip_x = (x0 - rx0) * factor;
        std::vector<float> wy(static_cast<size_t>(ph)), wx(static_cast<size_t>(pw));
        for (int64_t i = 0; i < ph; ++i)
          wy[size_t(i)] = blend_weight(i, ph, ramp, r > 0, r + 1 < rows.size());
        for (int64_t i = 0; i < pw; ++i)
          wx[size_t(i)] = blend_weight(i, pw, ramp, c > 0, c + 1 < columns.size());
        if (b == 0)
          for (int64_t y = 0; y < ph; ++y)
            for (int64_t x = 0; x < pw; ++x)
              weight_sum[size_t((y0 * factor + y) * out_w + x0 * factor + x)] +=
                  wy[size_t(y)] * wx[size_t(x)];

        StreamState tail_state = decoder.new_state();
        for (int64_t i = 0; i < frames; ++i) {
          const Tensor chunk = decoder.tail(crop(heads[size_t(i)], ry0, ry1, rx0, rx1), tail_state);
          const int64_t first = i == 0 ? 0 : 1 + (i - 1) * temporal;
          const int64_t count = chunk.size(0);
          check(count == (i == 0 ? 1 : temporal) && chunk.size(1) == channels,
                "decode_tiled: latent frame {} decoded to {}", i, shape_string(chunk.shape()));
          const float* src = chunk.data<float>();
          float* dst = out + b * channels * out_frames * plane;
#pragma omp parallel for collapse(2) schedule(static) if (chunk.numel() >= (int64_t(1) << 16))
          for (int64_t t = 0; t < count; ++t)
            for (int64_t ch = 0; ch < channels; ++ch) {
              const float* from =
                  src + (t * channels + ch) * region_plane + skip_y * region_w + skip_x;
              float* to =
                  dst + (ch * out_frames + first + t) * plane + y0 * factor * out_w + x0 * factor;
              for (int64_t y = 0; y < ph; ++y)
                for (int64_t x = 0; x < pw; ++x)
                  to[y * out_w + x] += wy[size_t(y)] * wx[size_t(x)] *
                                       std::clamp(from[y * region_w + x], -1.0f, 1.0f);
            }
          if (progress) progress(++done, total);
        }
      }
  }
  const int64_t planes = batch * channels * out_frames;
#pragma omp parallel for schedule(static) if (planes * plane >= (int64_t(1) << 16))
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < plane; ++i) out[p * plane + i] /= weight_sum[size_t(i)];
  return video;
}

}  // namespace mmgen::vae
