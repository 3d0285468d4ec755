// V-MoBA's chunking of the video tokens: which chunk shape a layer uses (temporal, spatial or
// spatio-temporal, cycling by layer index) and the token reorder that makes every chunk a
// contiguous run. Unlike upstream, grids that the chunk sizes do not divide are allowed: the edge
// chunks are simply smaller.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "attention/kernels/block_sparse.h"

namespace mmgen::attention::vmoba {

enum class ChunkKind { Temporal, Spatial, SpatioTemporal };

std::string_view chunk_kind_name(ChunkKind kind);

// The layer cycle: r = (layer − first_full_layer) mod (temporal + spatial + st); the first
// `temporal_layers` values of r are temporal, the next `spatial_layers` spatial, the rest
// spatio-temporal. Layers before first_full_layer are dense (the caller checks that first).
ChunkKind chunk_kind_for_layer(int64_t layer, int64_t first_full_layer, int64_t temporal_layers,
                               int64_t spatial_layers, int64_t st_layers);

// The chunk shape in tokens (t, h, w) of a kind: temporal chunks span whole frames, spatial chunks
// every frame; sizes larger than the grid are clamped to it.
std::array<int64_t, 3> chunk_shape(ChunkKind kind, const std::array<int64_t, 3>& grid,
                                   int64_t temporal_chunk, const std::array<int64_t, 2>& spatial,
                                   const std::array<int64_t, 3>& spatio_temporal);

// Video tokens (t, h, w row-major, T·H·W of them) reordered chunk by chunk: chunks in (ct, ch, cw)
// order, tokens inside a chunk in (t, h, w) order. order[i] is the original index of the token at
// reordered position i; chunk c covers reordered positions [chunks.start[c], +chunks.length[c]).
// Temporal chunking is the identity order.
struct ChunkLayout {
  std::vector<int64_t> order;
  BlockLayout chunks;
};

ChunkLayout make_chunk_layout(const std::array<int64_t, 3>& grid,
                              const std::array<int64_t, 3>& chunk);

}  // namespace mmgen::attention::vmoba
