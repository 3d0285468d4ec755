// Causal 3-D (and 2-D) convolutions of float32 frames on the GPU as an implicit GEMM on the tensor
// cores: no column matrix in memory, each block gathers its input patches straight into shared
// memory. The layout is the CPU decoder's: a chunk is [frames, channels, height, width], each
// frame a contiguous [C, H, W] plane; "same" spatial padding, all temporal padding in front
// (frames before the chunk come from a history of earlier input frames, zeros before that).
//
// Precision: the products run on TF32 (inputs rounded to nearest, 10-bit mantissa) with fp32
// accumulation, or as three TF32 products per step (the big·big + big·small + small·big split),
// which is float32 accuracy at three times the work.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace mmgen::cuda {

enum class ConvPrecision { TF32, TF32x3 };

// Output channels per block of the kernel that fits `out_channels` best (32, 64, 96 or 128):
// packed weights are padded to a multiple of it.
int conv_block_rows(int64_t out_channels);

// PyTorch's Conv3d weight [out, in, kt, kh, kw] (or Conv2d [out, in, kh, kw] with kt = 1) as the
// kernel reads it: [rows, k_pad] with rows = out rounded up to conv_block_rows(out) and zero
// padding after K = kt·kh·kw·in up to a multiple of 16. Columns: with `spatial_inner` and
// in % 16 == 0, k = ((t · in/16 + g) · kh·kw + s) · 16 + j for channel 16g + j and spatial tap
// s = y · kw + x, so the 9 spatial taps of a 16-channel group are neighbours in K and their
// overlapping patches are read while still in L1; otherwise k = (t·kh·kw + s) · in + c.
struct PackedConvWeights {
  std::vector<float> values;
  int64_t rows = 0, k_pad = 0;
  bool spatial_inner = false;  // the order used (pass it on in Conv3dArgs)
};
PackedConvWeights pack_conv_weights(const float* weight, int64_t out_channels, int64_t in_channels,
                                    int64_t kt, int64_t kh, int64_t kw, bool spatial_inner = true);

struct Conv3dArgs {
  const float* weight = nullptr;  // packed (see above), device
  const float* bias = nullptr;    // [out] or null
  const float* input = nullptr;   // [frames, in, src_h, src_w]
  // The input frames just before input[0], oldest first (a causal convolution's memory), or null;
  // taps reaching before them read zeros.
  const float* history = nullptr;
  int64_t history_frames = 0;
  const float* residual = nullptr;  // [frames, out, h, w] added to the result, or null
  float* output = nullptr;          // [frames, out, h, w]; may be `residual`
  int64_t frames = 0, in_channels = 0, out_channels = 0, src_h = 0, src_w = 0;
  int64_t kt = 1, kh = 1, kw = 1;
  int64_t k_pad = 0;           // from the packing
  bool spatial_inner = false;  // from the packing
  // The input and the history hold TF32-rounded values (see channel_rms_norm_f32), so the TF32
  // kernel need not round them again: the same bits, fewer instructions. Ignored by TF32x3.
  bool input_tf32_rounded = false;
  // Read the input enlarged ×2 by nearest neighbour (h = 2·src_h, w = 2·src_w), never
  // materialised: WanResample's upsample then 3×3 convolution in one pass.
  bool upsample2x = false;
};

// Checks the geometry (throws mmgen::Error) and launches on `stream`.
void conv3d_forward(const Conv3dArgs& args, ConvPrecision precision, cudaStream_t stream = nullptr);

// For benchmarks: the TF32 kernel's pipeline for blocks of 96 and 128 rows, process-wide.
// 0 (the default): 32-deep stages, 3 in flight, blocks of 128 threads for 96-row blocks and of
// 256 for 128-row ones; 1: 16-deep stages, 256 threads (the first version); 2: 32-deep stages,
// 256 threads for both. All give the same bits (same products in the same order).
void set_conv3d_variant(int variant);

// Multiply-adds ×2 that conv3d_forward does for `args` (the FLOPs a caller reports).
double conv3d_flops(const Conv3dArgs& args);

}  // namespace mmgen::cuda
