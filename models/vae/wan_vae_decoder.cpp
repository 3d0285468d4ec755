#include "models/vae/wan_vae_decoder.h"

#include <algorithm>

#include "core/download_queue.h"
#include "core/error.h"
#include "core/op_profile.h"

namespace mmgen::vae {

WanVaeDecoder::WanVaeDecoder(WanVaeConfig config, WeightStore weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  const WeightStore& store = weights_;
  const int64_t base = config_.decoder_dim(), z_dim = config_.z_dim;
  const std::vector<int64_t>& mult = config_.dim_mult;
  // diffusers' WanDecoder3d: dims = [base·mult[-1]] + [base·m for m in reversed(mult)]
  std::vector<int64_t> dims = {base * mult.back()};
  for (auto m = mult.rbegin(); m != mult.rend(); ++m) dims.push_back(base * *m);

  post_quant_conv_ = CausalConv3d(store, "post_quant_conv", {z_dim, z_dim, 1, 1, 1}, slots_);
  conv_in_ = CausalConv3d(store, "decoder.conv_in", {dims[0], z_dim, 3, 3, 3}, slots_);
  mid_resnets_.emplace_back(store, "decoder.mid_block.resnets.0", dims[0], dims[0], slots_);
  mid_attention_.emplace(store, "decoder.mid_block.attentions.0", dims[0]);
  mid_resnets_.emplace_back(store, "decoder.mid_block.resnets.1", dims[0], dims[0], slots_);

  const std::vector<bool> temporal = config_.temporal_upsample();
  const size_t blocks = mult.size();
  for (size_t i = 0; i < blocks; ++i) {
    // Wan2.1: each upsampler halves the channels, so every block after the first starts at half.
    int64_t in_dim = i > 0 ? dims[i] / 2 : dims[i];
    const int64_t out_dim = dims[i + 1];
    const std::string prefix = fmt::format("decoder.up_blocks.{}", i);
    UpBlock block;
    for (int64_t j = 0; j <= config_.num_res_blocks; ++j) {
      block.resnets.emplace_back(store, fmt::format("{}.resnets.{}", prefix, j), in_dim, out_dim,
                                 slots_);
      in_dim = out_dim;
    }
    if (i + 1 != blocks)
      block.upsampler.emplace(store, prefix + ".upsamplers.0", out_dim, temporal[i], slots_);
    up_blocks_.push_back(std::move(block));
  }
  out_dim_ = dims.back();
  norm_out_ = ChannelNorm(store, "decoder.norm_out.gamma", {out_dim_, 1, 1, 1});
  conv_out_ =
      CausalConv3d(store, "decoder.conv_out", {config_.out_channels, out_dim_, 3, 3, 3}, slots_);
}

WanVaeDecoder WanVaeDecoder::open_folder(const fs::path& folder) {
  return WanVaeDecoder(WanVaeConfig::from_file(folder / "config.json"),
                       WeightStore::open_folder(folder));
}

void WanVaeDecoder::set_device(Device device, ops::ConvPrecision precision) {
  models::move_modules(*this, device, precision);
}

void WanVaeDecoder::place_modules(Device device, ops::ConvPrecision precision) {
  device_ = device;
  precision_ = precision;
  post_quant_conv_.place(device);
  conv_in_.place(device);
  for (ResidualBlock& resnet : mid_resnets_) resnet.place(device);
  mid_attention_->place(device);
  for (UpBlock& block : up_blocks_) {
    for (ResidualBlock& resnet : block.resnets) resnet.place(device);
    if (block.upsampler) block.upsampler->place(device);
  }
  norm_out_.place(device);
  conv_out_.place(device);
}

size_t WanVaeDecoder::resident_weight_bytes() const {
  size_t bytes = post_quant_conv_.resident_bytes() + conv_in_.resident_bytes() +
                 mid_attention_->resident_bytes() + norm_out_.resident_bytes() +
                 conv_out_.resident_bytes();
  for (const ResidualBlock& resnet : mid_resnets_) bytes += resnet.resident_bytes();
  for (const UpBlock& block : up_blocks_) {
    for (const ResidualBlock& resnet : block.resnets) bytes += resnet.resident_bytes();
    if (block.upsampler) bytes += block.upsampler->resident_bytes();
  }
  return bytes;
}

StreamState WanVaeDecoder::new_state() const {
  StreamState state = slots_.make_state();
  state.precision = precision_;
  // On the GPU in TF32 the norms round for the convolutions after them (the same bits as the
  // kernel rounding its input, fewer instructions); elsewhere there is nothing to round.
  state.round_in_norms = device_ == Device::CUDA && precision_ == ops::ConvPrecision::TF32;
  return state;
}

Tensor WanVaeDecoder::head(const Tensor& x, StreamState& state) const {
  Tensor h = post_quant_conv_.forward(x, state);
  h = conv_in_.forward(h, state);
  h = mid_resnets_[0].forward(h, state);
  h = mid_attention_->forward(h, state, attention_);
  return mid_resnets_[1].forward(h, state);
}

Tensor WanVaeDecoder::tail(const Tensor& x, StreamState& state) const {
  Tensor h = x;
  for (const UpBlock& block : up_blocks_) {
    for (const ResidualBlock& resnet : block.resnets) h = resnet.forward(h, state);
    if (block.upsampler) h = block.upsampler->forward(h, state);
  }
  norm_out_.forward_(h, /*silu=*/true, state);
  return conv_out_.forward(h, state, Tensor(), state.round_in_norms);
}

int64_t WanVaeDecoder::tail_radius() const {
  return config_.tail_radius();
}

Tensor WanVaeDecoder::decode(const Tensor& z, const DecodeProgress& progress) const {
  MMGEN_PROFILE("wan vae decode (outside ops)");
  check(z.dim() == 5 && z.size(1) == config_.z_dim,
        "WanVaeDecoder::decode: expected latents [batch, {}, frames, height, width], got {}",
        config_.z_dim, shape_string(z.shape()));
  check(z.numel() > 0, "WanVaeDecoder::decode: empty latents {}", shape_string(z.shape()));
  const Tensor latents = z.to(DType::F32);
  const int64_t batch = z.size(0), frames = z.size(2), height = z.size(3), width = z.size(4);
  const int64_t spatial = config_.spatial_factor(), temporal = config_.temporal_factor();
  const int64_t out_frames = config_.output_frames(frames);
  const int64_t out_h = height * spatial, out_w = width * spatial;
  const int64_t channels = config_.out_channels;
  Tensor video = Tensor::empty({batch, channels, out_frames, out_h, out_w});
  const int64_t plane = out_h * out_w;
  const int total = int(batch * frames);
  double flops = 0;

  // Each chunk comes back clamped and channel-major ([channels, n, out_h, out_w]: each channel's
  // frames one block of the video); on the GPU its copy into `video` overlaps the next chunk.
  DownloadQueue downloads(device_, size_t(temporal * channels * plane) * sizeof(float));
  for (int64_t b = 0; b < batch; ++b) {
    StreamState state = new_state();
    for (int64_t i = 0; i < frames; ++i) {
      // Latent frame i as one [1, z_dim, h, w] frame (post_quant_conv is 1×1×1, so applying it per
      // frame equals diffusers applying it to all frames at once).
      const Tensor frame = latents.select(0, b).select(1, i).unsqueeze(0).contiguous().to(device_);
      state.last_chunk = i + 1 == frames;
      Tensor h;
      {
        MMGEN_PROFILE("vae: head");
        h = head(frame, state);
      }
      MMGEN_PROFILE("vae: tail");
      const Tensor chunk = tail(h, state);  // [n, channels, out_h, out_w]
      const int64_t first = i == 0 ? 0 : 1 + (i - 1) * temporal;
      const int64_t expected = i == 0 ? 1 : temporal;
      check(chunk.size(0) == expected && chunk.size(1) == channels && chunk.size(2) == out_h &&
                chunk.size(3) == out_w,
            "WanVaeDecoder: latent frame {} decoded to {}, expected {} frames of {}x{}", i,
            shape_string(chunk.shape()), expected, out_h, out_w);
      downloads.push(ops::clamp_channel_major(chunk, -1.0f, 1.0f), [&, b, first,
                                                                    expected](const Tensor& host) {
        const float* src = host.data<float>();
        float* dst = video.data<float>() + (b * channels * out_frames + first) * plane;
#pragma omp parallel for collapse(2) schedule(static) if (host.numel() >= (int64_t(1) << 16))
        for (int64_t c = 0; c < channels; ++c)
          for (int64_t t = 0; t < expected; ++t)
            std::copy_n(src + (c * expected + t) * plane, plane,
                        dst + (c * out_frames + t) * plane);
      });
      if (progress) progress(int(b * frames + i + 1), total);
    }
    flops += state.flops;
  }
  downloads.finish();
  last_flops_ = flops;
  return video;
}

Tensor WanVaeDecoder::denormalize(const Tensor& latents) const {
  check(latents.dim() == 5 && latents.size(1) == config_.z_dim,
        "WanVaeDecoder::denormalize: expected latents [batch, {}, frames, height, width], got {}",
        config_.z_dim, shape_string(latents.shape()));
  Tensor result = latents.to(DType::F32).clone();
  const int64_t batch = latents.size(0), channels = config_.z_dim;
  const int64_t per_channel = latents.size(2) * latents.size(3) * latents.size(4);
  float* data = result.data<float>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c) {
      // diffusers: latents_std = 1.0 / tensor(std) (float32), then latents / latents_std + mean
      const float inverse_std = 1.0f / config_.latents_std[size_t(c)];
      const float mean = config_.latents_mean[size_t(c)];
      float* p = data + (b * channels + c) * per_channel;
      for (int64_t i = 0; i < per_channel; ++i) p[i] = p[i] / inverse_std + mean;
    }
  return result;
}

}  // namespace mmgen::vae
