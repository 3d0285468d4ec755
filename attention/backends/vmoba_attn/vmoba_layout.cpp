#include "attention/backends/vmoba_attn/vmoba_layout.h"

#include <algorithm>

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
  const auto [T, H, W] = grid;
  check(T > 0 && H > 0 && W > 0, "vmoba_attn: latent grid {}x{}x{} must be positive", T, H, W);
  for (int64_t c : chunk) check(c > 0, "vmoba_attn: chunk sizes must be positive");
  const int64_t nt = (T + chunk[0] - 1) / chunk[0], nh = (H + chunk[1] - 1) / chunk[1],
                nw = (W + chunk[2] - 1) / chunk[2];
  ChunkLayout layout;
  layout.order.reserve(size_t(T * H * W));
  for (int64_t ct = 0; ct < nt; ++ct)
    for (int64_t ch = 0; ch < nh; ++ch)
      for (int64_t cw = 0; cw < nw; ++cw) {
        const int64_t t0 = ct * chunk[0], t1 = std::min(T, t0 + chunk[0]);
        const int64_t h0 = ch * chunk[1], h1 = std::min(H, h0 + chunk[1]);
        const int64_t w0 = cw * chunk[2], w1 = std::min(W, w0 + chunk[2]);
        layout.chunks.start.push_back(int64_t(layout.order.size()));
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) layout.order.push_back((t * H + h) * W + w);
        layout.chunks.length.push_back(int64_t(layout.order.size()) - layout.chunks.start.back());
      }
  return layout;
}

}  // namespace mmgen::attention::vmoba
