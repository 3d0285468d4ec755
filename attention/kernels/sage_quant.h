// The quantisers of SageAttention, emulated exactly on the CPU: INT8 with one scale per group of
// rows (SageAttention 1/2, the three granularities of the CUDA kernels) and the FP4 microscaling
// of SageAttention3 (e2m1 values, one e4m3 scale per 16 consecutive values).
//
// Rounding follows the GPU conversions the kernels use: INT8 rounds half away from zero (the
// Triton / CUDA `round` of the quantisation kernels); e2m1 and e4m3 round to nearest with ties to
// even and saturate to the largest finite value (`cvt.rn.satfinite`).
#pragma once

#include <cstdint>

namespace mmgen::attention::sage {

// Largest finite magnitudes of the two minifloat formats.
inline constexpr float kE2m1Max = 6.0f;
inline constexpr float kE4m3Max = 448.0f;

// x rounded to the nearest e2m1 value (0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6), ties to even mantissa,
// saturating at ±6. NaN stays NaN.
float round_e2m1(float x);
// x rounded to the nearest float8 e4m3fn value (bias 7, subnormal step 2^-9, max 448), ties to
// even, saturating at ±448.
float round_e4m3(float x);

// Which rows share one INT8 scale. The block sizes are those of the sm80 kernels (query blocks of
// 128 rows, warp slices of 32, key blocks of 64):
//   per_block:  Q one scale per 128 rows; K one per 64 rows;
//   per_warp:   Q one scale per 32-row warp slice; K one per 64 rows;
//   per_thread: Q 8 scales per warp slice (row r uses scale r mod 8); K 4 per 64-row block (rows
//               8i+2g and 8i+2g+1 use scale g), matching which MMA fragment each thread owns.
enum class Granularity { PerBlock, PerWarp, PerThread };

inline constexpr int64_t kQueryBlock = 128;
inline constexpr int64_t kWarpRows = 32;
inline constexpr int64_t kKeyBlock = 64;

// The scale group of `row` (dense numbering from 0) for queries or keys.
int64_t scale_group(int64_t row, Granularity granularity, bool is_query);

// Quantises x [rows, dim] (row stride `stride` floats) to INT8: for each scale group, scale =
// max|x| / 127 (1 for an all-zero group), value = round_half_away(x / scale) in [-127, 127].
// Writes the integer values as floats (exact) into `values` [rows, dim] (contiguous) and each
// row's group scale into `row_scales` [rows].
void quantize_int8(const float* x, int64_t rows, int64_t dim, int64_t stride,
                   Granularity granularity, bool is_query, float* values, float* row_scales);

// Quantises one group of `count` (<= 16) values to FP4 with a shared e4m3 scale
// s = e4m3(max|x| / 6) (the smallest e4m3 step when that rounds to 0 but the group is not zero)
// and writes the dequantised values e2m1(x / s) · s to `out` (may alias x). Returns s.
float quantize_fp4_group(const float* x, int64_t count, int64_t stride, float* out,
                         int64_t out_stride);

}  // namespace mmgen::attention::sage
