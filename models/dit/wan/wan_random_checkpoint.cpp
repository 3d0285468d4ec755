#include "models/dit/wan/wan_random_checkpoint.h"

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"

namespace mmgen::dit {
namespace {

// A deterministic uniform value in [-1, 1) from a counter (splitmix64), so filling is parallel.
float uniform_at(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + index + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(double(z >> 40) / double(1ull << 23) - 1.0);
}

}  // namespace

Tensor random_tensor(const Shape& shape, float center, float spread, uint64_t seed, DType dtype) {
  Tensor out = Tensor::empty(shape, dtype);
  const int64_t count = out.numel();
  if (dtype == DType::BF16) {
    uint16_t* p = out.data<uint16_t>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i)
      p[i] = f32_to_bf16(center + spread * uniform_at(seed, uint64_t(i)));
  } else {
    float* p = out.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) p[i] = center + spread * uniform_at(seed, uint64_t(i));
  }
  return out;
}

NamedTensors random_checkpoint(const WanTransformerConfig& config) {
  const int64_t d = config.inner_dim(), f = config.ffn_dim;
  NamedTensors tensors;
  uint64_t seed = 1;
  auto add = [&](const std::string& name, const Shape& shape, float center, float spread) {
    tensors.emplace_back(name, random_tensor(shape, center, spread, seed++, DType::BF16));
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    add(name + ".weight", {out, in}, 0.0f, float(1.0 / std::sqrt(double(in))));
    add(name + ".bias", {out}, 0.0f, 0.02f);
  };
  const auto [pt, ph, pw] = config.patch_size;
  add("patch_embedding.weight", {d, config.in_channels, pt, ph, pw}, 0.0f,
      float(1.0 / std::sqrt(double(config.in_channels * pt * ph * pw))));
  add("patch_embedding.bias", {d}, 0.0f, 0.02f);
  linear("condition_embedder.time_embedder.linear_1", d, config.freq_dim);
  linear("condition_embedder.time_embedder.linear_2", d, d);
  linear("condition_embedder.time_proj", 6 * d, d);
  linear("condition_embedder.text_embedder.linear_1", d, config.text_dim);
  linear("condition_embedder.text_embedder.linear_2", d, d);
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const std::string block = "blocks." + std::to_string(layer) + ".";
    for (const char* attention : {"attn1.", "attn2."}) {
      for (const char* projection : {"to_q", "to_k", "to_v", "to_out.0"})
        linear(block + attention + projection, d, d);
      add(block + attention + "norm_q.weight", {d}, 1.0f, 0.1f);
      add(block + attention + "norm_k.weight", {d}, 1.0f, 0.1f);
    }
    add(block + "norm2.weight", {d}, 1.0f, 0.1f);
    add(block + "norm2.bias", {d}, 0.0f, 0.02f);
    linear(block + "ffn.net.0.proj", f, d);
    linear(block + "ffn.net.2", d, f);
    add(block + "scale_shift_table", {1, 6, d}, 0.0f, float(1.0 / std::sqrt(double(d))));
  }
  linear("proj_out", config.out_channels * config.patch_volume(), d);
  add("scale_shift_table", {1, 2, d}, 0.0f, float(1.0 / std::sqrt(double(d))));
  return tensors;
}

NamedTensors random_lora(const WanTransformerConfig& config, int64_t rank) {
  NamedTensors tensors;
  const int64_t d = config.inner_dim(), f = config.ffn_dim;
  uint64_t seed = 500;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const std::string block = "transformer.blocks." + std::to_string(l) + ".";
    std::vector<std::tuple<std::string, int64_t, int64_t>> layers;
    for (const char* attention : {"attn1.", "attn2."})
      for (const char* projection : {"to_q", "to_k", "to_v", "to_out.0"})
        layers.emplace_back(std::string(attention) + projection, d, d);
    layers.emplace_back("ffn.net.0.proj", f, d);
    layers.emplace_back("ffn.net.2", d, f);
    for (const auto& [name, out, in] : layers) {
      tensors.emplace_back(
          block + name + ".lora_A.weight",
          random_tensor({rank, in}, 0.0f, 1.0f / std::sqrt(float(in)), seed++, DType::BF16));
      tensors.emplace_back(
          block + name + ".lora_B.weight",
          random_tensor({out, rank}, 0.0f, 0.02f / std::sqrt(float(rank)), seed++, DType::BF16));
    }
  }
  return tensors;
}

}  // namespace mmgen::dit
