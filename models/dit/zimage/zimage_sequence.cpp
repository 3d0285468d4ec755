#include "models/dit/zimage/zimage_sequence.h"

#include "core/error.h"

namespace mmgen::dit {
namespace {

int64_t round_up(int64_t n) {
  return (n + kZImageSequenceMultiple - 1) / kZImageSequenceMultiple * kZImageSequenceMultiple;
}

}  // namespace

ZImageLayout zimage_layout(const ZImageConfig& config, const Shape& latent_shape,
                           int64_t caption_tokens) {
  check(latent_shape.size() == 4 && latent_shape[0] == config.in_channels,
        "Z-Image transformer: latents must be [{}, frames, height, width], got {}",
        config.in_channels, shape_string(latent_shape));
  const int64_t pf = config.f_patch_size, p = config.patch_size;
  check(latent_shape[1] > 0 && latent_shape[2] > 0 && latent_shape[3] > 0 &&
            latent_shape[1] % pf == 0 && latent_shape[2] % p == 0 && latent_shape[3] % p == 0,
        "Z-Image transformer: latent size {}x{}x{} is not a positive multiple of the patch "
        "{}x{}x{}",
        latent_shape[1], latent_shape[2], latent_shape[3], pf, p, p);
  check(caption_tokens >= 1, "Z-Image transformer: a caption needs at least one token");
  ZImageLayout layout;
  layout.latent = {latent_shape[1], latent_shape[2], latent_shape[3]};
  layout.grid = {latent_shape[1] / pf, latent_shape[2] / p, latent_shape[3] / p};
  layout.image_tokens = layout.grid[0] * layout.grid[1] * layout.grid[2];
  layout.image_padded = round_up(layout.image_tokens);
  layout.caption_tokens = caption_tokens;
  layout.caption_padded = round_up(caption_tokens);
  // diffusers indexes its RoPE tables with these positions; past their end it would fail too.
  const int64_t last_frame = layout.caption_padded + layout.grid[0];
  check(last_frame < config.axes_lens[0],
        "Z-Image transformer: {} caption tokens (padded to {}) and {} latent frames need RoPE "
        "position {}, beyond axes_lens[0] = {}; shorten the prompt",
        caption_tokens, layout.caption_padded, layout.grid[0], last_frame, config.axes_lens[0]);
  check(layout.grid[1] <= config.axes_lens[1] && layout.grid[2] <= config.axes_lens[2],
        "Z-Image transformer: a {}x{} patch grid exceeds the RoPE tables ({}x{} positions); use a "
        "smaller image",
        layout.grid[1], layout.grid[2], config.axes_lens[1], config.axes_lens[2]);
  return layout;
}

Tensor zimage_patchify(const Tensor& latents, const ZImageConfig& config,
                       const ZImageLayout& layout) {
  const Tensor in = latents.to(DType::F32).contiguous();
  const int64_t channels = config.in_channels, pf = config.f_patch_size, p = config.patch_size;
  const auto [frames, height, width] = layout.latent;
  const auto [gf, gh, gw] = layout.grid;
  const int64_t values = config.patch_values();
  Tensor rows = Tensor::empty({layout.image_tokens, values});
  // Row (f, h, w) holds (a, y, x, c) = latent[c, f·pf + a, h·p + y, w·p + x]. The latent is read in
  // its own order, one image line at a time, each value written to its row: one pass of pointer
  // steps instead of a full index computation per value (this runs on the host every step).
  const float* src = in.data<float>();
  float* dst = rows.data<float>();
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t f = 0; f < gf; ++f)
      for (int64_t a = 0; a < pf; ++a) {
        const float* plane = src + (c * frames + f * pf + a) * height * width;
        for (int64_t h = 0; h < gh; ++h)
          for (int64_t y = 0; y < p; ++y) {
            const float* line = plane + (h * p + y) * width;
            float* cell = dst + ((f * gh + h) * gw) * values + ((a * p + y) * p) * channels + c;
            for (int64_t w = 0; w < gw; ++w, cell += values, line += p)
              for (int64_t x = 0; x < p; ++x) cell[x * channels] = line[x];
          }
      }
  return rows;
}

Tensor zimage_unpatchify(const Tensor& rows, const ZImageConfig& config,
                         const ZImageLayout& layout) {
  const int64_t channels = config.in_channels, pf = config.f_patch_size, p = config.patch_size;
  const int64_t values = config.patch_values();
  check(rows.is_cpu() && rows.dim() == 2 && rows.size(0) >= layout.image_tokens &&
            rows.size(1) == values,
        "Z-Image unpatchify: expected [>= {}, {}] rows on the host, got {}", layout.image_tokens,
        values, shape_string(rows.shape()));
  const Tensor in = rows.to(DType::F32).contiguous();
  const auto [frames, height, width] = layout.latent;
  const auto [gf, gh, gw] = layout.grid;
  Tensor out = Tensor::empty({channels, frames, height, width});
  // The inverse of zimage_patchify's walk: each latent line gathered from its rows.
  const float* src = in.data<float>();
  float* dst = out.data<float>();
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t f = 0; f < gf; ++f)
      for (int64_t a = 0; a < pf; ++a) {
        float* plane = dst + (c * frames + f * pf + a) * height * width;
        for (int64_t h = 0; h < gh; ++h)
          for (int64_t y = 0; y < p; ++y) {
            float* line = plane + (h * p + y) * width;
            const float* cell =
                src + ((f * gh + h) * gw) * values + ((a * p + y) * p) * channels + c;
            for (int64_t w = 0; w < gw; ++w, cell += values, line += p)
              for (int64_t x = 0; x < p; ++x) line[x] = cell[x * channels];
          }
      }
  return out;
}

ZImagePositions zimage_caption_positions(const ZImageLayout& layout) {
  ZImagePositions ids(size_t(layout.caption_padded));
  for (int64_t i = 0; i < layout.caption_padded; ++i) ids[size_t(i)] = {1 + i, 0, 0};
  return ids;
}

ZImagePositions zimage_image_positions(const ZImageLayout& layout) {
  ZImagePositions ids(size_t(layout.image_padded), {0, 0, 0});
  const auto [gf, gh, gw] = layout.grid;
  const int64_t first_frame = layout.caption_padded + 1;
  size_t t = 0;
  for (int64_t f = 0; f < gf; ++f)
    for (int64_t h = 0; h < gh; ++h)
      for (int64_t w = 0; w < gw; ++w) ids[t++] = {first_frame + f, h, w};
  return ids;
}

}  // namespace mmgen::dit
