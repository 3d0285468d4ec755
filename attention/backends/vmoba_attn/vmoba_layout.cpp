#include "attention/backends/vmoba_attn/vmoba_layout.h"

#include <algorithm>
#include <utility>

#include "attention/kernels/sta_tiling.h"
#include "core/error.h"

namespace mmgen::attention::vmoba {

std::string_view chunk_kind_name(ChunkKind kind) {
  switch (kind) {
    case ChunkKind::Temporal:
      return "temporal";
    case ChunkKind::Spatial:
      return "spatial";
    case ChunkKind::SpatioTemporal:
      return "spatio-temporal";
  }
  return "?";
}

ChunkKind chunk_kind_for_layer(int64_t layer, int64_t first_full_layer, int64_t temporal_layers,
                               int64_t spatial_layers, int64_t st_layers) {
  const int64_t cycle = temporal_layers + spatial_layers + st_layers;
  check(cycle > 0,
        "vmoba_attn: temporal_layer + spatial_layer + st_layer is 0; set at least one of them "
        "to 1 or more");
  int64_t r = (layer - first_full_layer) % cycle;
  if (r < 0) r += cycle;
  if (r < temporal_layers) return ChunkKind::Temporal;
  if (r < temporal_layers + spatial_layers) return ChunkKind::Spatial;
  return ChunkKind::SpatioTemporal;
}

std::array<int64_t, 3> chunk_shape(ChunkKind kind, const std::array<int64_t, 3>& grid,
                                   int64_t temporal_chunk, const std::array<int64_t, 2>& spatial,
                                   const std::array<int64_t, 3>& spatio_temporal) {
  std::array<int64_t, 3> shape;
  switch (kind) {
    case ChunkKind::Temporal:
      shape = {temporal_chunk, grid[1], grid[2]};
      break;
    case ChunkKind::Spatial:
      shape = {grid[0], spatial[0], spatial[1]};
      break;
    case ChunkKind::SpatioTemporal:
      shape = spatio_temporal;
      break;
  }
  for (int d = 0; d < 3; ++d)
    shape[size_t(d)] = std::clamp<int64_t>(shape[size_t(d)], 1, grid[size_t(d)]);
  return shape;
}

ChunkLayout make_chunk_layout(const std::array<int64_t, 3>& grid,
                              const std::array<int64_t, 3>& chunk) {
  check(grid[0] > 0 && grid[1] > 0 && grid[2] > 0,
        "vmoba_attn: latent grid {}x{}x{} must be positive", grid[0], grid[1], grid[2]);
  for (int64_t c : chunk) check(c > 0, "vmoba_attn: chunk sizes must be positive");
  // A chunk is a box of STA's tiling: boxes in (t, h, w) order, tokens inside in (t, h, w) order.
  BoxTiling tiling = tile_video({grid[0], grid[1], grid[2]}, {chunk[0], chunk[1], chunk[2]}, 0);
  return {std::move(tiling.order), std::move(tiling.video_blocks)};
}

}  // namespace mmgen::attention::vmoba
