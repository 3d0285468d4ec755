// The Wan2.1 VAE decoder (diffusers' AutoencoderKLWan decoder half) on an NVIDIA GPU, with the CPU
// decoder's contract: latents [B, z_dim, T, h, w] in, a float32 video [B, 3, 1 + 4·(T − 1), 8h, 8w]
// in [−1, 1] out, on the host. The CPU decoder's checked weights go up once as float32 (packed
// for the convolution kernel); activations stay float32.
//
// Like the CPU decoder it streams one latent frame at a time, each causal convolution keeping its
// last input frames on the device between chunks (the first-chunk "Rep" rule of the temporal
// upsamplers included), so device memory is the weights, that cache and one chunk's scratch
// (at most 4 output frames), whatever the video length.
//
// Every convolution (3-D causal, the 2-D ones after nearest ×2 upsampling, the 1×1 ones) runs on
// the implicit-GEMM kernel in core/cuda/conv3d; the mid block's attention on cuBLASLt float32
// products and a softmax kernel.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/device_memory.h"
#include "core/tensor.h"
#include "models/vae/wan_vae_decoder.h"

namespace mmgen::cuda {

// TF32: products on TF32 tensor cores (10-bit mantissa inputs) with fp32 accumulation — the
// default, within the 3e-3 per-component bound of the float32 CPU decoder. FP32: the
// convolutions as three TF32 products (big·big + big·small + small·big) and the attention in full
// float32: the CPU decoder's numbers to float32 rounding, at about three times the time.
enum class VaePrecision { TF32, FP32 };

class WanVaeDecoderCuda {
 public:
  // Uploads the weights of `decoder` (which checked them); `decoder` must outlive this object.
  explicit WanVaeDecoderCuda(const vae::WanVaeDecoder& decoder,
                             VaePrecision precision = VaePrecision::TF32);
  ~WanVaeDecoderCuda();
  WanVaeDecoderCuda(const WanVaeDecoderCuda&) = delete;
  WanVaeDecoderCuda& operator=(const WanVaeDecoderCuda&) = delete;

  // z: [B, z_dim, T, h, w], already de-normalised, any float dtype. Returns float32
  // [B, out_channels, 1 + 4·(T − 1), 8h, 8w] on the host, clamped to [−1, 1].
  Tensor decode(const Tensor& z, const vae::DecodeProgress& progress = {}) const;
  // The pipeline's de-normalisation (on the host, as the CPU decoder does it).
  Tensor denormalize(const Tensor& latents) const { return decoder_.denormalize(latents); }

  VaePrecision precision() const { return precision_; }
  void set_precision(VaePrecision precision) { precision_ = precision; }
  // TF32 only: the RMS norms round their outputs to TF32 so the convolutions reading them skip
  // that rounding (on by default; the same bits either way — the switch is for benchmarks).
  void set_round_in_norms(bool on) { round_in_norms_ = on; }
  size_t weight_bytes() const { return weight_bytes_; }
  // Floating-point operations of the convolutions and attention products of the last decode.
  double last_decode_flops() const { return flops_; }
  // With profiling on, every pass is timed alone (the device synchronised around it, so decodes
  // get slower) and its seconds are summed per kind and shape until the profile is cleared.
  void set_profiling(bool on) { profiling_ = on; }
  const std::map<std::string, double>& profile() const { return profile_; }
  void clear_profile() { profile_.clear(); }

 private:
  struct Frames;
  struct Conv;
  struct Resnet;
  struct Upsampler;
  struct State;

  Conv upload_conv(const std::string& prefix, int64_t out, int64_t in, int64_t kt, int64_t kh,
                   int64_t kw);
  DeviceBuffer upload_vector(const std::string& name);
  Resnet upload_resnet(const std::string& prefix, int64_t in, int64_t out);

  // Runs `conv` over `frames` input frames [frames, conv.in, h, w] into `output`
  // ([frames, conv.out, h', w']), adding `residual` when given; a causal convolution reads and
  // then updates its history in `state`.
  // `rounded`: the input (and so the history) was rounded to TF32 by the norm before it.
  void run_conv(const Conv& conv, const float* input, int64_t frames, int64_t height, int64_t width,
                float* output, const float* residual, State* state, bool upsample2x = false,
                bool rounded = false) const;
  Frames conv(const Conv& conv, const Frames& x, State* state, const float* residual = nullptr,
              bool rounded = false) const;
  bool round_in_norms() const { return round_in_norms_ && precision_ == VaePrecision::TF32; }
  Frames resnet(const Resnet& block, const Frames& x, State& state) const;
  Frames attention(const Frames& x) const;
  Frames upsample(const Upsampler& block, const Frames& x, State& state) const;
  Frames decode_chunk(const Frames& x, State& state) const;
  // Runs `pass`, timed under `key` when profiling.
  template <class Pass>
  void timed(const std::string& key, Pass&& pass) const;
  std::string norm_key(const Frames& x) const;  // the profile's key of an RMS norm pass

  const vae::WanVaeDecoder& decoder_;
  VaePrecision precision_;
  int history_slots_ = 0, started_slots_ = 0;
  std::unique_ptr<Conv> post_quant_conv_, conv_in_, conv_out_, to_qkv_, proj_;
  std::vector<Resnet> mid_resnets_;
  DeviceBuffer attention_gamma_, norm_out_gamma_;
  struct UpBlock;
  std::vector<UpBlock> up_blocks_;
  int64_t mid_dim_ = 0, out_dim_ = 0;
  size_t weight_bytes_ = 0;
  mutable double flops_ = 0;
  bool profiling_ = false;
  bool round_in_norms_ = true;
  mutable std::map<std::string, double> profile_;
};

}  // namespace mmgen::cuda
