// Convolutions over video frames and the per-pixel passes between them, one call for every device
// (core/conv_cpu.h on the CPU, core/cuda/conv_ops_cuda.h on the GPU): the building blocks of the
// Wan VAE, and of any image VAE (a 2-D convolution is the one-temporal-tap case).
//
// Frames are [T, C, H, W] float32, contiguous: each frame a [C, H, W] plane, which is what the
// convolutions, a per-frame attention and a time-doubling reshape want. Spatial padding is "same"
// (kh/2, kw/2 zeros); all temporal padding is in front (causal): the taps before a chunk's first
// frame read the frames remembered from earlier chunks, and zeros before those.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace mmgen::ops {

// A convolution's geometry; kt = 0 means a 2-D convolution whose weight is stored
// [out, in, kh, kw] (it runs as kt = 1).
struct ConvShape {
  int64_t out_channels = 0, in_channels = 0, kt = 1, kh = 1, kw = 1;
};

// How the GPU computes a convolution's products: TF32 tensor cores with float32 accumulation, or
// three TF32 products per step (big·big + big·small + small·big: float32 accuracy at three times
// the work). The CPU always computes in float32.
enum class ConvPrecision { TF32, FP32 };

// A convolution's weights, held the way the kernel of their device reads them. On the CPU: the
// checkpoint's tensors as stored (memory-mapped, any float dtype), converted per call, so resident
// memory stays the checkpoint's. On the GPU: float32 packed once for the implicit-GEMM kernel
// (core/cuda/conv3d.h), and the bias as float32.
class Conv {
 public:
  Conv() = default;
  // `weight` [out, in, kt, kh, kw] (or [out, in, kh, kw] when shape.kt is 0) and `bias` [out] on
  // the host, any float dtype; their shapes must match `shape` (checked).
  Conv(Tensor weight, Tensor bias, ConvShape shape);

  // This convolution on `device` (uploading and packing for the GPU once).
  Conv to(Device device) const;
  Device device() const { return weight_.defined() ? weight_.device() : Device::CPU; }

  const ConvShape& shape() const { return shape_; }
  int64_t out_channels() const { return shape_.out_channels; }
  int64_t in_channels() const { return shape_.in_channels; }
  int64_t taps() const { return shape_.kt > 1 ? shape_.kt : 1; }  // temporal taps
  // Device memory the weights take (0 on the CPU, where they stay in the checkpoint).
  size_t resident_bytes() const;

  // For the implementations: the weights where they live (see above); on the GPU, the packing's
  // padded K and column order.
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  int64_t packed_k() const { return packed_k_; }
  bool spatial_inner() const { return spatial_inner_; }

 private:
  Tensor host_weight_, host_bias_;  // the checkpoint's, kept to come back to the CPU
  Tensor weight_, bias_;
  ConvShape shape_;
  int64_t packed_k_ = 0;
  bool spatial_inner_ = false;
};

// The optional inputs of one convolution call.
struct ConvInputs {
  // [n, in, H, W]: the input frames just before x[0], oldest first (a causal convolution's
  // memory), on x's device; undefined for none. Taps reaching before them read zeros.
  Tensor history;
  // [T, out, H', W'], added to the result (a residual connection), or undefined.
  Tensor residual;
  // Read x enlarged ×2 by nearest neighbour (torch's "nearest-exact" at scale 2), so
  // H' = 2H, W' = 2W; the enlarged frames are never materialised.
  bool upsample2x = false;
  ConvPrecision precision = ConvPrecision::TF32;
  // A GPU hint: x and history already hold TF32-rounded values (channel_rms_norm with
  // round_tf32), so the TF32 kernel skips rounding them: the same bits, fewer instructions.
  bool input_tf32_rounded = false;
};

// x [T, in, H, W] float32 contiguous, on the convolution's device -> [T, out, H', W'].
Tensor conv3d(const Conv& conv, const Tensor& x, const ConvInputs& inputs = {});
// The floating-point operations (2 per multiply-add) conv3d spends on these inputs, counting the
// taps that read history or zeros as the GPU kernel does (for benchmark figures).
double conv3d_flops(const Conv& conv, const Tensor& x, const ConvInputs& inputs = {});

// What a causal convolution remembers after a chunk: the last `count` frames of `history`
// followed by `x` (all of them when there are fewer), copied into a new tensor on x's device.
Tensor last_frames(const Tensor& history, const Tensor& x, int64_t count);

// WanRMS_norm over the channels of every pixel of frames x [T, C, H, W]:
// x / max(‖x‖₂, 1e-12) · √C · gamma[c], then SiLU when asked; gamma [C] float32 on x's device.
// `y` may be x. `round_tf32` (GPU): round the results to TF32, as the convolution reading them
// would (see ConvInputs::input_tf32_rounded); ignored on the CPU.
void channel_rms_norm(const Tensor& x, const Tensor& gamma, bool silu, Tensor& y,
                      bool round_tf32 = false);
Tensor channel_rms_norm(const Tensor& x, const Tensor& gamma, bool silu, bool round_tf32 = false);

// Frames [T, C, H, W] clamped to [low, high] and transposed to [C, T, H, W], so each channel's
// frames are one block, as a video [B, C, T, H, W] holds them. On x's device.
Tensor clamp_channel_major(const Tensor& frames, float low, float high);

}  // namespace mmgen::ops
