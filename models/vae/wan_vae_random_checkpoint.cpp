#include "models/vae/wan_vae_random_checkpoint.h"

#include <fmt/format.h>

#include <cmath>

#include "models/dit/wan/wan_random_checkpoint.h"

namespace mmgen::vae {

NamedTensors random_decoder_checkpoint(const WanVaeConfig& config, DType dtype) {
  NamedTensors tensors;
  uint64_t seed = 101;
  auto add = [&](const std::string& name, const Shape& shape, float center, float spread) {
    tensors.emplace_back(name, dit::random_tensor(shape, center, spread, seed++, dtype));
  };
  // Uniform in ±√(3 / fan_in) keeps a unit-variance input at unit variance (times `gain`).
  auto conv = [&](const std::string& name, Shape shape, float gain = 1.0f) {
    int64_t fan_in = 1;
    for (size_t i = 1; i < shape.size(); ++i) fan_in *= shape[i];
    add(name + ".weight", shape, 0.0f, gain * float(std::sqrt(3.0 / double(fan_in))));
    add(name + ".bias", {shape[0]}, 0.0f, 0.05f);
  };
  auto gamma = [&](const std::string& name, Shape shape) { add(name, shape, 1.0f, 0.2f); };
  auto resnet = [&](const std::string& prefix, int64_t in, int64_t out) {
    gamma(prefix + ".norm1.gamma", {in, 1, 1, 1});
    conv(prefix + ".conv1", {out, in, 3, 3, 3});
    gamma(prefix + ".norm2.gamma", {out, 1, 1, 1});
    conv(prefix + ".conv2", {out, out, 3, 3, 3}, 0.5f);
    if (in != out) conv(prefix + ".conv_shortcut", {out, in, 1, 1, 1});
  };

  const int64_t base = config.decoder_dim(), z_dim = config.z_dim;
  const std::vector<int64_t>& mult = config.dim_mult;
  std::vector<int64_t> dims = {base * mult.back()};
  for (auto m = mult.rbegin(); m != mult.rend(); ++m) dims.push_back(base * *m);

  conv("post_quant_conv", {z_dim, z_dim, 1, 1, 1});
  conv("decoder.conv_in", {dims[0], z_dim, 3, 3, 3});
  resnet("decoder.mid_block.resnets.0", dims[0], dims[0]);
  gamma("decoder.mid_block.attentions.0.norm.gamma", {dims[0], 1, 1});
  conv("decoder.mid_block.attentions.0.to_qkv", {3 * dims[0], dims[0], 1, 1});
  conv("decoder.mid_block.attentions.0.proj", {dims[0], dims[0], 1, 1}, 0.5f);
  resnet("decoder.mid_block.resnets.1", dims[0], dims[0]);
  const std::vector<bool> temporal = config.temporal_upsample();
  for (size_t i = 0; i < mult.size(); ++i) {
    int64_t in_dim = i > 0 ? dims[i] / 2 : dims[i];
    const int64_t out_dim = dims[i + 1];
    const std::string prefix = fmt::format("decoder.up_blocks.{}", i);
    for (int64_t j = 0; j <= config.num_res_blocks; ++j) {
      resnet(fmt::format("{}.resnets.{}", prefix, j), in_dim, out_dim);
      in_dim = out_dim;
    }
    if (i + 1 == mult.size()) continue;
    if (temporal[i]) conv(prefix + ".upsamplers.0.time_conv", {2 * out_dim, out_dim, 3, 1, 1});
    conv(prefix + ".upsamplers.0.resample.1", {out_dim / 2, out_dim, 3, 3});
  }
  gamma("decoder.norm_out.gamma", {dims.back(), 1, 1, 1});
  conv("decoder.conv_out", {config.out_channels, dims.back(), 3, 3, 3}, 0.3f);
  return tensors;
}

}  // namespace mmgen::vae
