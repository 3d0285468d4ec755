#include "models/vae/autoencoder_kl_decoder.h"

#include "core/error.h"
#include "core/interrupt.h"
#include "core/ops.h"
#include "models/vae/autoencoder_kl_weights.h"

namespace mmgen::vae {
namespace {

constexpr float kNormOutEps = 1e-6f;  // the decoder's conv_norm_out

}  // namespace

AutoencoderKLDecoder::AutoencoderKLDecoder(AutoencoderKLConfig config, WeightStore weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  const WeightStore& store = weights_;
  const std::vector<int64_t>& channels = config_.block_out_channels;
  const int64_t groups = config_.norm_num_groups, latent = config_.latent_channels;
  const int64_t deepest = channels.back();

  if (config_.use_post_quant_conv)
    post_quant_conv_ = KlConv2d(store, "post_quant_conv", latent, latent, 1);
  conv_in_ = KlConv2d(store, "decoder.conv_in", latent, deepest, 3);
  mid_resnets_.emplace_back(store, "decoder.mid_block.resnets.0", deepest, deepest, groups);
  if (config_.mid_block_add_attention)
    mid_attention_.emplace(store, "decoder.mid_block.attentions.0", deepest, groups);
  mid_resnets_.emplace_back(store, "decoder.mid_block.resnets.1", deepest, deepest, groups);

  // Up block i turns the previous level's channels into reversed(block_out_channels)[i].
  int64_t previous = deepest;
  for (size_t i = 0; i < channels.size(); ++i) {
    const int64_t out = channels[channels.size() - 1 - i];
    const std::string prefix = fmt::format("decoder.up_blocks.{}", i);
    UpBlock block;
    for (int64_t j = 0; j <= config_.layers_per_block; ++j)
      block.resnets.emplace_back(store, fmt::format("{}.resnets.{}", prefix, j),
                                 j == 0 ? previous : out, out, groups);
    block.upsample = i + 1 < channels.size();
    if (block.upsample)
      block.upsampler = KlConv2d(store, prefix + ".upsamplers.0.conv", out, out, 3);
    up_blocks_.push_back(std::move(block));
    previous = out;
  }
  norm_out_ = KlGroupNorm(store, "decoder.conv_norm_out", channels.front(), groups, kNormOutEps);
  conv_out_ = KlConv2d(store, "decoder.conv_out", channels.front(), config_.out_channels, 3);
}

AutoencoderKLDecoder AutoencoderKLDecoder::open_folder(const fs::path& folder) {
  return AutoencoderKLDecoder(AutoencoderKLConfig::from_file(folder / "config.json"),
                              WeightStore::open_folder(folder));
}

void AutoencoderKLDecoder::set_device(Device device, ops::ConvPrecision precision) {
  models::move_modules(*this, device, precision);
}

void AutoencoderKLDecoder::place_modules(Device device, ops::ConvPrecision precision) {
  device_ = device;
  precision_ = precision;
  if (config_.use_post_quant_conv) post_quant_conv_.place(device, precision);
  conv_in_.place(device, precision);
  for (KlResnetBlock& resnet : mid_resnets_) resnet.place(device, precision);
  if (mid_attention_) mid_attention_->place(device, precision);
  for (UpBlock& block : up_blocks_) {
    for (KlResnetBlock& resnet : block.resnets) resnet.place(device, precision);
    if (block.upsample) block.upsampler.place(device, precision);
  }
  norm_out_.place(device);
  conv_out_.place(device, precision);
}

size_t AutoencoderKLDecoder::resident_weight_bytes() const {
  size_t bytes = post_quant_conv_.resident_bytes() + conv_in_.resident_bytes() +
                 norm_out_.resident_bytes() + conv_out_.resident_bytes();
  for (const KlResnetBlock& resnet : mid_resnets_) bytes += resnet.resident_bytes();
  if (mid_attention_) bytes += mid_attention_->resident_bytes();
  for (const UpBlock& block : up_blocks_) {
    for (const KlResnetBlock& resnet : block.resnets) bytes += resnet.resident_bytes();
    bytes += block.upsampler.resident_bytes();
  }
  return bytes;
}

Tensor AutoencoderKLDecoder::decode(const Tensor& z) const {
  // The image is the pipeline's (post-processing, writers): it comes back to the host.
  return tail(head(z)).to(Device::CPU);
}

Tensor AutoencoderKLDecoder::head(const Tensor& z) const {
  check(z.dim() == 4 && z.size(1) == config_.latent_channels && z.numel() > 0,
        "AutoencoderKLDecoder::decode: expected latents [batch, {}, height, width], got {}",
        config_.latent_channels, shape_string(z.shape()));
  Tensor h = z.to(device_).to(DType::F32).contiguous();
  if (config_.use_post_quant_conv) h = post_quant_conv_.forward(h);
  h = conv_in_.forward(h);
  h = mid_resnets_[0].forward(h);
  if (mid_attention_) h = mid_attention_->forward(h, attention_);
  return mid_resnets_[1].forward(h);
}

Tensor AutoencoderKLDecoder::tail(const Tensor& head) const {
  const int64_t deepest = config_.block_out_channels.back();
  check(head.dim() == 4 && head.size(1) == deepest && head.numel() > 0,
        "AutoencoderKLDecoder::tail: expected [batch, {}, height, width], got {}", deepest,
        shape_string(head.shape()));
  Tensor h = head.to(device_).contiguous();
  for (const UpBlock& block : up_blocks_) {
    stop_between_blocks("VAE up-blocks");  // Ctrl-C waits for one up-block of the decode
    for (const KlResnetBlock& resnet : block.resnets) h = resnet.forward(h);
    if (block.upsample) h = block.upsampler.forward(h, /*upsample2x=*/true);
  }
  return conv_out_.forward(norm_out_.forward(h, /*silu=*/true));
}

int64_t AutoencoderKLDecoder::tail_radius() const {
  return config_.tail_radius();
}

Tensor denormalize(const AutoencoderKLConfig& config, const Tensor& latents) {
  check(latents.dim() == 4 && latents.size(1) == config.latent_channels,
        "AutoencoderKL denormalize: expected latents [batch, {}, height, width], got {}",
        config.latent_channels, shape_string(latents.shape()));
  Tensor result = latents.to(Device::CPU).to(DType::F32).contiguous().clone();
  float* p = result.data<float>();
  // diffusers: (latents / scaling_factor) + shift_factor, both Python floats that torch rounds to
  // float32; a true division (not a product with the reciprocal), then the addition, each rounded.
  const float scaling = config.scaling_factor;
  const int64_t count = result.numel();
  if (config.shift_factor) {
    const float shift = *config.shift_factor;
    for (int64_t i = 0; i < count; ++i) p[i] = p[i] / scaling + shift;
  } else {
    for (int64_t i = 0; i < count; ++i) p[i] = p[i] / scaling;
  }
  return result;
}

Tensor AutoencoderKLDecoder::denormalize(const Tensor& latents) const {
  return vae::denormalize(config_, latents);
}

}  // namespace mmgen::vae
