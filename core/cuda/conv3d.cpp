#include "core/cuda/conv3d.h"

#include <atomic>
#include <climits>

#include "core/cuda/conv3d_kernels.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {
std::atomic<int> pipeline_variant{0};
}  // namespace

void set_conv3d_variant(int variant) {
  check(variant >= 0 && variant <= 2, "set_conv3d_variant: no variant {} (0-2)", variant);
  pipeline_variant = variant;
}

int conv_block_rows(int64_t out_channels) {
  // The fewest padded rows; among equals the taller block (fewer blocks re-gather the patches).
  int best = 32;
  int64_t best_rows = INT64_MAX;
  for (int rows : {32, 64, 96, 128}) {
    const int64_t padded = (out_channels + rows - 1) / rows * rows;
    if (padded <= best_rows) best = rows, best_rows = padded;
  }
  return best;
}

PackedConvWeights pack_conv_weights(const float* weight, int64_t out_channels, int64_t in_channels,
                                    int64_t kt, int64_t kh, int64_t kw, bool spatial_inner) {
  check(out_channels > 0 && in_channels > 0 && kt > 0 && kh > 0 && kw > 0,
        "pack_conv_weights: empty convolution [{}, {}, {}, {}, {}]", out_channels, in_channels, kt,
        kh, kw);
  const int64_t taps = kt * kh * kw, k_total = taps * in_channels;
  PackedConvWeights packed;
  packed.rows = (out_channels + conv_block_rows(out_channels) - 1) / conv_block_rows(out_channels) *
                conv_block_rows(out_channels);
  packed.k_pad = (k_total + 15) / 16 * 16;
  packed.values.assign(size_t(packed.rows * packed.k_pad), 0.0f);
  packed.spatial_inner = spatial_inner && in_channels % 16 == 0;
  const int64_t taps_2d = kh * kw;
  for (int64_t o = 0; o < out_channels; ++o)
    for (int64_t c = 0; c < in_channels; ++c)
      for (int64_t tap = 0; tap < taps; ++tap) {
        const int64_t t = tap / taps_2d, s = tap % taps_2d;
        const int64_t k = packed.spatial_inner
                              ? ((t * (in_channels / 16) + c / 16) * taps_2d + s) * 16 + c % 16
                              : tap * in_channels + c;
        packed.values[size_t(o * packed.k_pad + k)] = weight[(o * in_channels + c) * taps + tap];
      }
  return packed;
}

double conv3d_flops(const Conv3dArgs& a) {
  const int64_t scale = a.upsample2x ? 4 : 1;
  return 2.0 * double(a.frames) * double(a.out_channels) * double(a.kt * a.kh * a.kw) *
         double(a.in_channels) * double(a.src_h * a.src_w * scale);
}

void conv3d_forward(const Conv3dArgs& a, ConvPrecision precision, cudaStream_t stream) {
  check(a.weight && a.input && a.output, "conv3d_forward: missing weight, input or output");
  check(a.frames > 0 && a.in_channels > 0 && a.out_channels > 0 && a.src_h > 0 && a.src_w > 0,
        "conv3d_forward: empty input [{}, {}, {}, {}] -> {} channels", a.frames, a.in_channels,
        a.src_h, a.src_w, a.out_channels);
  check(a.kt >= 1 && a.kh % 2 == 1 && a.kw % 2 == 1,
        "conv3d_forward: kernel {}x{}x{} (odd spatial sizes for 'same' padding)", a.kt, a.kh, a.kw);
  check(a.k_pad == (a.kt * a.kh * a.kw * a.in_channels + 15) / 16 * 16,
        "conv3d_forward: weights packed for another geometry (k_pad {})", a.k_pad);
  check(!a.spatial_inner || a.in_channels % 16 == 0,
        "conv3d_forward: the spatial-inner order needs a multiple of 16 input channels, not {}",
        a.in_channels);
  check(a.history_frames >= 0 && (a.history_frames == 0 || a.history != nullptr),
        "conv3d_forward: {} history frames without a pointer", a.history_frames);
  const int64_t scale = a.upsample2x ? 2 : 1;
  const int64_t in_frame = a.in_channels * a.src_h * a.src_w;
  const int64_t out_frame = a.out_channels * a.src_h * a.src_w * scale * scale;
  // Offsets inside one frame are 32-bit in the kernel; the grid's z is the frame.
  check(in_frame < INT_MAX && out_frame < INT_MAX && a.frames < 65536,
        "conv3d_forward: frames of {} / {} values ({} frames) exceed the kernel's 32-bit frame "
        "offsets",
        in_frame, out_frame, a.frames);
  launch_conv3d(a, conv_block_rows(a.out_channels), precision, pipeline_variant.load(), stream);
}

}  // namespace mmgen::cuda
