#include "models/vae/tiled_decode.h"

#include <algorithm>

#include "core/error.h"
#include "core/op_profile.h"

namespace mmgen::vae {

namespace {

void check_latents(const WanVaeDecoder& decoder, const Tensor& z) {
  check(z.dim() == 5 && z.size(1) == decoder.config().z_dim,
        "decode_tiled: expected latents [batch, {}, frames, height, width], got {}",
        decoder.config().z_dim, shape_string(z.shape()));
}

Tensor decode_tiles(const WanVaeDecoder& decoder, const Tensor& z, const TileBlend& blend,
                    const DecodeProgress& progress, dist::Communicator* ranks) {
  const WanVaeConfig& config = decoder.config();
  const Tensor latents = z.to(DType::F32).to(Device::CPU);
  const int64_t batch = z.size(0), frames = z.size(2), height = z.size(3), width = z.size(4);
  const int64_t factor = config.spatial_factor(), temporal = config.temporal_factor();
  const int64_t channels = config.out_channels, out_frames = config.output_frames(frames);
  const int64_t plane = height * factor * width * factor;
  const int size = ranks ? ranks->size() : 1, rank = ranks ? ranks->rank() : 0;
  const std::vector<Tile>& tiles = blend.tiles();
  // A tile's decoded region over every output frame: [out_frames, channels, rows, columns].
  const auto region_shape = [&](const Tile& tile) {
    return Shape{out_frames, channels, (tile.ry1 - tile.ry0) * factor,
                 (tile.rx1 - tile.rx0) * factor};
  };
  // Between ranks a tile travels as its core alone: the halo is only context, and it is most of a
  // band's or a small tile's pixels. `core_only` describes such a buffer for the blend.
  const auto core_only = [](Tile tile) {
    tile.ry0 = tile.y0, tile.ry1 = tile.y1, tile.rx0 = tile.x0, tile.rx1 = tile.x1;
    return tile;
  };
  const auto crop_core = [&](const Tensor& region, const Tile& tile) {
    return region.slice(2, (tile.y0 - tile.ry0) * factor, (tile.y1 - tile.ry0) * factor)
        .slice(3, (tile.x0 - tile.rx0) * factor, (tile.x1 - tile.rx0) * factor)
        .contiguous();
  };

  // Weighted sums of the tile cores, then divided by the summed weights.
  Tensor video = rank == 0
                     ? Tensor::zeros({batch, channels, out_frames, height * factor, width * factor})
                     : Tensor();
  float* out = rank == 0 ? video.data<float>() : nullptr;
  const int total = int(tiles.size() * size_t(batch * frames));
  int done = 0;
  for (int64_t b = 0; b < batch; ++b) {
    // The heads of every latent frame, on the whole plane, kept on the host (latent resolution:
    // small; every rank computes them); each tile's region goes to the decoder's device and its
    // decoded frames come back, so a GPU holds one tile's tail at a time.
    const Device device = decoder.device();
    std::vector<Tensor> heads;
    StreamState head_state = decoder.new_state();
    for (int64_t i = 0; i < frames; ++i) {
      MMGEN_PROFILE("vae tiles: heads");
      head_state.last_chunk = i + 1 == frames;
      heads.push_back(
          decoder
              .head(latents.select(0, b).select(1, i).unsqueeze(0).contiguous().to(device),
                    head_state)
              .to(Device::CPU));
    }
    const auto decode_tile = [&](const Tile& tile) {
      Tensor decoded = Tensor::empty(region_shape(tile));
      const int64_t region = decoded.size(2) * decoded.size(3);
      StreamState tail_state = decoder.new_state();
      for (int64_t i = 0; i < frames; ++i) {
        MMGEN_PROFILE("vae tiles: tails");
        tail_state.last_chunk = i + 1 == frames;
        const Tensor chunk =
            decoder.tail(crop_region(heads[size_t(i)], tile).to(device), tail_state)
                .to(Device::CPU)
                .to(DType::F32)
                .contiguous();
        const int64_t first = i == 0 ? 0 : 1 + (i - 1) * temporal;
        const int64_t count = chunk.size(0);
        check(count == (i == 0 ? 1 : temporal) && chunk.size(1) == channels &&
                  chunk.size(2) * chunk.size(3) == region,
              "decode_tiled: latent frame {} decoded to {}", i, shape_string(chunk.shape()));
        std::copy(chunk.data<float>(), chunk.data<float>() + chunk.numel(),
                  decoded.data<float>() + first * channels * region);
        if (progress && size == 1) progress(++done, total);
      }
      return decoded;
    };
    // Rounds of `size` tiles: each rank decodes its own, rank 0 blends them in tile order.
    for (size_t round = 0; round < tiles.size(); round += size_t(size)) {
      const size_t own = round + size_t(rank);
      Tensor mine = own < tiles.size() ? decode_tile(tiles[own]) : Tensor::empty({0});
      std::vector<Tensor> decoded{mine};
      if (ranks) {
        if (own < tiles.size()) mine = crop_core(mine, tiles[own]);
        std::vector<Tensor> send, recv;
        for (int r = 0; r < size; ++r) {
          send.push_back(r == 0 ? mine : Tensor::empty({0}));
          const bool expected = rank == 0 && round + size_t(r) < tiles.size();
          recv.push_back(expected ? Tensor::empty(region_shape(core_only(tiles[round + size_t(r)])))
                                  : Tensor::empty({0}));
        }
        MMGEN_PROFILE("vae tiles: exchange");
        ranks->all_to_all(send, recv);
        decoded = recv;
      }
      if (rank != 0) continue;
      MMGEN_PROFILE("vae tiles: blend");
      for (size_t r = 0; r < decoded.size() && round + r < tiles.size(); ++r) {
        const Tile tile = ranks ? core_only(tiles[round + r]) : tiles[round + r];
        const Tensor& region = decoded[r];
        for (int64_t t = 0; t < out_frames; ++t)
          blend.add(tile, region.data<float>() + t * channels * region.size(2) * region.size(3),
                    channels, out + (b * channels * out_frames + t) * plane, out_frames * plane,
                    /*clamp=*/true);
        if (progress && size > 1) {
          done += int(frames);
          progress(done, total);
        }
      }
    }
  }
  if (rank == 0) blend.normalize(out, batch * channels * out_frames);
  return video;
}

}  // namespace

Tensor decode_tiled(const WanVaeDecoder& decoder, const Tensor& z, const TileLayout& layout,
                    const DecodeProgress& progress, dist::Communicator* ranks) {
  check_latents(decoder, z);
  const int64_t factor = decoder.config().spatial_factor();
  return decode_tiles(decoder, z,
                      TileBlend(z.size(3), z.size(4), factor, layout, decoder.tail_radius()),
                      progress, ranks);
}

Tensor decode_in_bands(const WanVaeDecoder& decoder, const Tensor& z, dist::Communicator& ranks,
                       const DecodeProgress& progress) {
  check_latents(decoder, z);
  const int64_t factor = decoder.config().spatial_factor();
  const int64_t bands = std::min<int64_t>(ranks.size(), z.size(3));
  return decode_tiles(decoder, z,
                      TileBlend::bands(z.size(3), z.size(4), factor, bands, decoder.tail_radius()),
                      progress, &ranks);
}

}  // namespace mmgen::vae
