#include "core/conv.h"

#include <algorithm>
#include <cstring>

#include "core/conv_cpu.h"
#include "core/error.h"
#include "core/op_profile.h"
#ifdef MMGEN_HAVE_CUDA
#include "core/cuda/conv_ops_cuda.h"
#include "core/cuda/device_storage.h"
#endif

namespace mmgen::ops {
namespace {

Shape weight_shape(const ConvShape& s) {
  if (s.kt == 0) return {s.out_channels, s.in_channels, s.kh, s.kw};
  return {s.out_channels, s.in_channels, s.kt, s.kh, s.kw};
}

void require_frames(const Tensor& x, const Device device, const char* what, const char* op) {
  check(x.dim() == 4 && x.dtype() == DType::F32 && x.is_contiguous(),
        "{}: the {} must be contiguous float32 frames [T, C, H, W], got {} {}", op, what,
        dtype_name(x.dtype()), shape_string(x.shape()));
  check(x.device() == device, "{}: the {} is on the {} but the weights are on the {}", op, what,
        device_name(x.device()), device_name(device));
}

[[noreturn, maybe_unused]] void no_cuda(const char* op) {
  fail("{}: this build has no CUDA, so no tensor can live on the GPU", op);
}

// Copies `bytes` between two buffers of one device.
void copy_bytes(Device device, void* to, const void* from, size_t bytes) {
  if (device == Device::CPU) {
    std::memcpy(to, from, bytes);
    return;
  }
#ifdef MMGEN_HAVE_CUDA
  cuda::copy_device_to_device(to, from, bytes);
#else
  no_cuda("last_frames");
#endif
}

}  // namespace

Conv::Conv(Tensor weight, Tensor bias, ConvShape shape)
    : host_weight_(std::move(weight)), host_bias_(std::move(bias)), shape_(shape) {
  check(host_weight_.defined() && host_weight_.is_cpu(),
        "Conv: the checkpoint's weight must be given on the host");
  check(host_weight_.shape() == weight_shape(shape), "Conv: weight {} does not match {}",
        shape_string(host_weight_.shape()), shape_string(weight_shape(shape)));
  check(!host_bias_.defined() || host_bias_.shape() == Shape{shape.out_channels},
        "Conv: bias {} for {} output channels", shape_string(host_bias_.shape()),
        shape.out_channels);
  weight_ = host_weight_;
  bias_ = host_bias_;
}

Conv Conv::to(Device device) const {
  Conv placed = *this;
  placed.weight_ = host_weight_;
  placed.bias_ = host_bias_;
  placed.packed_k_ = 0;
  placed.spatial_inner_ = false;
  if (device == Device::CPU) return placed;
#ifdef MMGEN_HAVE_CUDA
  const cuda::ops::PackedConv packed =
      cuda::ops::pack_conv(host_weight_, host_bias_, taps(), shape_.kh, shape_.kw);
  placed.weight_ = packed.weight;
  placed.bias_ = packed.bias;
  placed.packed_k_ = packed.k_pad;
  placed.spatial_inner_ = packed.spatial_inner;
  return placed;
#else
  no_cuda("Conv::to");
#endif
}

size_t Conv::resident_bytes() const {
  if (device() == Device::CPU) return 0;
  return weight_.nbytes() + (bias_.defined() ? bias_.nbytes() : 0);
}

Tensor conv3d(const Conv& conv, const Tensor& x, const ConvInputs& inputs) {
  require_frames(x, conv.device(), "input", "conv3d");
  check(x.size(1) == conv.in_channels(), "conv3d: {} input channels for a convolution of {}",
        x.size(1), conv.in_channels());
  if (inputs.history.defined() && inputs.history.numel() > 0) {
    require_frames(inputs.history, conv.device(), "history", "conv3d");
    check(inputs.history.size(1) == x.size(1) && inputs.history.size(2) == x.size(2) &&
              inputs.history.size(3) == x.size(3),
          "conv3d: history {} does not match the input frames {}",
          shape_string(inputs.history.shape()), shape_string(x.shape()));
  }
  const int64_t scale = inputs.upsample2x ? 2 : 1;
  if (inputs.residual.defined()) {
    require_frames(inputs.residual, conv.device(), "residual", "conv3d");
    check(inputs.residual.shape() ==
              Shape({x.size(0), conv.out_channels(), scale * x.size(2), scale * x.size(3)}),
          "conv3d: residual {} does not match the output", shape_string(inputs.residual.shape()));
  }
  if (conv.device() == Device::CPU) {
    MMGEN_PROFILE("conv3d");
    return cpu::conv3d(conv, x, inputs);
  }
#ifdef MMGEN_HAVE_CUDA
  return cuda::ops::conv3d(conv, x, inputs);
#else
  no_cuda("conv3d");
#endif
}

double conv3d_flops(const Conv& conv, const Tensor& x, const ConvInputs& inputs) {
  const ConvShape& s = conv.shape();
  const double scale = inputs.upsample2x ? 4.0 : 1.0;
  return 2.0 * double(s.out_channels) * double(s.in_channels) * double(conv.taps()) *
         double(s.kh * s.kw) * double(x.size(0)) * double(x.size(2) * x.size(3)) * scale;
}

Tensor last_frames(const Tensor& history, const Tensor& x, int64_t count) {
  check(x.dim() == 4 && x.is_contiguous(), "last_frames: expects contiguous frames, got {}",
        shape_string(x.shape()));
  const int64_t remembered = history.defined() ? history.size(0) : 0;
  const int64_t keep = std::min(count, remembered + x.size(0));
  Tensor kept = Tensor::empty({keep, x.size(1), x.size(2), x.size(3)}, x.dtype(), x.device());
  const size_t frame_bytes = size_t(x.size(1) * x.size(2) * x.size(3)) * dtype_size(x.dtype());
  // The kept frames are the tail of [history..., x...]: at most two contiguous runs.
  const int64_t from_history = std::max<int64_t>(0, keep - x.size(0));
  if (from_history > 0)
    copy_bytes(x.device(), kept.raw(),
               history.raw() + size_t(remembered - from_history) * frame_bytes,
               size_t(from_history) * frame_bytes);
  const int64_t from_x = keep - from_history;
  if (from_x > 0)
    copy_bytes(x.device(), kept.raw() + size_t(from_history) * frame_bytes,
               x.raw() + size_t(x.size(0) - from_x) * frame_bytes, size_t(from_x) * frame_bytes);
  return kept;
}

void channel_rms_norm(const Tensor& x, const Tensor& gamma, bool silu, Tensor& y, bool round_tf32) {
  require_frames(x, x.device(), "input", "channel_rms_norm");
  check(y.shape() == x.shape() && y.device() == x.device() && y.is_contiguous() &&
            y.dtype() == DType::F32,
        "channel_rms_norm: output {} does not match the input {}", shape_string(y.shape()),
        shape_string(x.shape()));
  check(gamma.numel() == x.size(1) && gamma.dtype() == DType::F32 && gamma.device() == x.device() &&
            gamma.is_contiguous(),
        "channel_rms_norm: gamma must be {} float32 values on the {}", x.size(1),
        device_name(x.device()));
  if (x.is_cpu()) {
    MMGEN_PROFILE("channel_rms_norm");
    return cpu::channel_rms_norm(x, gamma, silu, y);
  }
#ifdef MMGEN_HAVE_CUDA
  cuda::ops::channel_rms_norm(x, gamma, silu, y, round_tf32);
#else
  no_cuda("channel_rms_norm");
#endif
}

Tensor channel_rms_norm(const Tensor& x, const Tensor& gamma, bool silu, bool round_tf32) {
  Tensor y = Tensor::empty(x.shape(), DType::F32, x.device());
  channel_rms_norm(x, gamma, silu, y, round_tf32);
  return y;
}

Tensor clamp_channel_major(const Tensor& frames, float low, float high) {
  require_frames(frames, frames.device(), "input", "clamp_channel_major");
  if (frames.is_cpu()) return cpu::clamp_channel_major(frames, low, high);
#ifdef MMGEN_HAVE_CUDA
  return cuda::ops::clamp_channel_major(frames, low, high);
#else
  no_cuda("clamp_channel_major");
#endif
}

}  // namespace mmgen::ops
