// The per-pixel passes between a VAE decoder's convolutions (core/conv.h), on float32 frames [T, C,
// H, W] in device memory (fp32 math, the CPU decoder's formulas and order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// WanRMS_norm over the channels of every pixel: x / max(‖x‖₂, 1e-12) · √C · gamma[c], then SiLU
// when asked. `x` and `y` may be the same buffer. With `round_tf32` the results are rounded to
// TF32 (nearest, ties away: what the convolution kernel's TF32 mode does to its input anyway).
void channel_rms_norm_f32(const float* x, const float* gamma, bool silu, float* y, int64_t frames,
                          int64_t channels, int64_t positions, bool round_tf32 = false,
                          cudaStream_t stream = nullptr);

// Row-wise softmax of (scale · s) in place, s [rows, columns] row-major.
void softmax_rows_f32(float* s, int64_t rows, int64_t columns, float scale,
                      cudaStream_t stream = nullptr);

// A decoder's last step for one chunk: frames [T, C, P] clamped to [low, high] and transposed to
// [C, T, P], so each channel's frames are one contiguous block of the video.
void clamp_to_channel_major_f32(const float* frames, float* out, int64_t count, int64_t channels,
                                int64_t positions, float low, float high,
                                cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
