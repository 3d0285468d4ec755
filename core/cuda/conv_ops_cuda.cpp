#include "core/cuda/conv_ops_cuda.h"

#include "core/cuda/conv3d.h"
#include "core/cuda/vae_ops.h"
#include "core/error.h"

namespace mmgen::cuda::ops {

PackedConv pack_conv(const Tensor& weight, const Tensor& bias, int64_t kt, int64_t kh, int64_t kw) {
  const Tensor host = weight.to(DType::F32).contiguous();
  const int64_t out = weight.size(0), in = weight.size(1);
  const PackedConvWeights packed = pack_conv_weights(host.data<float>(), out, in, kt, kh, kw);
  PackedConv result;
  Tensor values = Tensor::empty({packed.rows, packed.k_pad});
  std::copy(packed.values.begin(), packed.values.end(), values.data<float>());
  result.weight = values.to(Device::CUDA);
  if (bias.defined()) result.bias = bias.to(DType::F32).contiguous().to(Device::CUDA);
  result.k_pad = packed.k_pad;
  result.spatial_inner = packed.spatial_inner;
  return result;
}

Tensor conv3d(const mmgen::ops::Conv& conv, const Tensor& x, const mmgen::ops::ConvInputs& inputs) {
  const mmgen::ops::ConvShape& shape = conv.shape();
  const int64_t scale = inputs.upsample2x ? 2 : 1;
  Tensor y = Tensor::empty({x.size(0), shape.out_channels, scale * x.size(2), scale * x.size(3)},
                           DType::F32, Device::CUDA);
  Conv3dArgs args;
  args.weight = conv.weight().data<float>();
  args.bias = conv.bias().defined() ? conv.bias().data<float>() : nullptr;
  args.input = x.data<float>();
  const bool history = inputs.history.defined() && inputs.history.numel() > 0;
  args.history = history ? inputs.history.data<float>() : nullptr;
  args.history_frames = history ? inputs.history.size(0) : 0;
  args.residual = inputs.residual.defined() ? inputs.residual.data<float>() : nullptr;
  args.output = y.data<float>();
  args.frames = x.size(0);
  args.in_channels = shape.in_channels;
  args.out_channels = shape.out_channels;
  args.src_h = x.size(2);
  args.src_w = x.size(3);
  args.kt = conv.taps(), args.kh = shape.kh, args.kw = shape.kw;
  args.k_pad = conv.packed_k();
  args.spatial_inner = conv.spatial_inner();
  args.input_tf32_rounded = inputs.input_tf32_rounded;
  args.upsample2x = inputs.upsample2x;
  conv3d_forward(args, inputs.precision == mmgen::ops::ConvPrecision::FP32 ? ConvPrecision::TF32x3
                                                                           : ConvPrecision::TF32);
  return y;
}

void channel_rms_norm(const Tensor& x, const Tensor& gamma, bool silu, Tensor& y, bool round_tf32) {
  channel_rms_norm_f32(x.data<float>(), gamma.data<float>(), silu, y.data<float>(), x.size(0),
                       x.size(1), x.size(2) * x.size(3), round_tf32);
}

Tensor clamp_channel_major(const Tensor& frames, float low, float high) {
  const int64_t count = frames.size(0), channels = frames.size(1);
  Tensor out =
      Tensor::empty({channels, count, frames.size(2), frames.size(3)}, DType::F32, Device::CUDA);
  clamp_to_channel_major_f32(frames.data<float>(), out.data<float>(), count, channels,
                             frames.size(2) * frames.size(3), low, high);
  return out;
}

}  // namespace mmgen::cuda::ops
