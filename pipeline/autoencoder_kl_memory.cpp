#include "pipeline/autoencoder_kl_memory.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "pipeline/memory_estimate.h"

namespace mmgen {
namespace {

// The im2col budget per thread (core/conv_cpu.cpp).
constexpr uint64_t kColumnBudget = uint64_t(1) << 22;

// The AutoencoderKL decoder over one height x width image (or a tile's region of it, with
// `attention_plane` the whole latent plane the head's attention spans): at each level a resnet
// holds its input, the normed copy, the convolution's output and the shortcut, plus the 3x3
// convolution's im2col columns; the upsampler holds its input and the 2x output; the mid block's
// attention q, k, v and score rows at the latent resolution.
uint64_t vae_bytes(const vae::AutoencoderKLConfig& config, int64_t height, int64_t width,
                   uint64_t attention_plane) {
  const int64_t factor = config.spatial_factor();
  const uint64_t threads = uint64_t(std::max(1, omp_get_max_threads()));
  uint64_t plane = uint64_t((height / factor) * (width / factor));
  const std::vector<int64_t>& channels = config.block_out_channels;
  const uint64_t widest = uint64_t(channels.back());
  uint64_t peak = 3 * widest * attention_plane + threads * 128 * attention_plane;  // mid attention
  for (size_t level = 0; level < channels.size(); ++level) {
    const uint64_t out = uint64_t(channels[channels.size() - 1 - level]);
    const uint64_t in = level == 0 ? widest : uint64_t(channels[channels.size() - level]);
    const uint64_t columns =
        std::min<uint64_t>(9 * std::max(in, out) * plane, threads * kColumnBudget);
    peak = std::max(peak, plane * (in + 3 * out) + columns);
    if (level + 1 < channels.size()) {
      peak = std::max(peak, plane * out + 4 * plane * out + columns);
      plane *= 4;
    }
  }
  return peak * kFloatBytes;
}

}  // namespace

uint64_t autoencoder_kl_image_bytes(const Request& request,
                                    const vae::AutoencoderKLConfig& config) {
  // The decoded image, then its channels-last copy in [0, 1] and the writer's 8-bit pixels.
  return uint64_t(config.out_channels) * uint64_t(request.height * request.width) * kFloatBytes;
}

uint64_t autoencoder_kl_decode_bytes(const Request& request,
                                     const vae::AutoencoderKLConfig& vae_config) {
  const int64_t factor = vae_config.spatial_factor();
  const uint64_t image = autoencoder_kl_image_bytes(request, vae_config);
  uint64_t decoding = 0;
  const uint64_t latent_plane =
      uint64_t(request.height / factor) * uint64_t(request.width / factor);
  if (request.vae_tiling) {
    // One tile's region at a time: its core plus the halo on both sides
    // (models/vae/autoencoder_kl_tiled_decode.h), inside the image; beside it the head's output on
    // the whole latent plane (the widest channel count), the blend's weight plane and the image
    // the tiles are summed into.
    const int64_t region = request.vae_tile_size + 2 * vae_config.tail_radius() * factor;
    const int64_t tile_h = std::min(request.height, region);
    const int64_t tile_w = std::min(request.width, region);
    const uint64_t head =
        latent_plane * uint64_t(vae_config.block_out_channels.back()) * kFloatBytes;
    const uint64_t weights = uint64_t(request.height * request.width) * kFloatBytes;
    decoding = vae_bytes(vae_config, tile_h, tile_w, latent_plane) + head + weights + image;
  } else {
    decoding = vae_bytes(vae_config, request.height, request.width, latent_plane);
  }
  decoding = std::max(decoding, image + image / 4);
  return decoding;
}

}  // namespace mmgen
