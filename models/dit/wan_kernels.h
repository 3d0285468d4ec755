// Fused, OpenMP-parallel elementwise kernels of the Wan transformer: each is one pass over the
// token rows, so the blocks touch their activations as few times as possible. Rows are
// contiguous float32 of `dim` values.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mmgen::dit {

// A weight as float32: the stored tensor when it already is, else a converted copy (in parallel:
// a 1.3B-parameter bf16 checkpoint is converted once per forward, block by block).
Tensor weight_to_f32(const Tensor& weight);

// out = LayerNorm(x, no affine) · scale_plus_one + shift, per row; shift/scale_plus_one have `dim`
// values (the block's timestep modulation, with 1 already added to the scale).
void modulated_layer_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* shift,
                          const float* scale_plus_one, float eps);

// x += y · gate (gate: `dim` values, broadcast over rows), or x += y when gate is null.
void add_gated_(float* x, const float* y, int64_t rows, int64_t dim, const float* gate);

// x = RMSNorm(x) · weight over each row of `dim` values, in place.
void rms_norm_rows_(float* x, int64_t rows, int64_t dim, const float* weight, float eps);

}  // namespace mmgen::dit
