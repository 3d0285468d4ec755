#include "models/dit/zimage/zimage_random_checkpoint.h"

#include <cmath>
#include <string>

#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/zimage/zimage_weights.h"

namespace mmgen::dit {

NamedTensors zimage_random_checkpoint(const ZImageConfig& config, DType dtype) {
  const int64_t d = config.dim, f = config.ffn_dim(), adaln = config.adaln_dim();
  NamedTensors tensors;
  uint64_t seed = 1;
  const auto add = [&](const std::string& name, const Shape& shape, float center, float spread) {
    tensors.emplace_back(name, random_tensor(shape, center, spread, seed++, dtype));
  };
  const auto weight = [&](const std::string& name, int64_t out, int64_t in) {
    add(name, {out, in}, 0.0f, float(1.0 / std::sqrt(double(in))));
  };
  const auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    weight(name + ".weight", out, in);
    add(name + ".bias", {out}, 0.0f, 0.02f);
  };
  const auto norm = [&](const std::string& name, int64_t size) { add(name, {size}, 1.0f, 0.1f); };
  const std::string patch =
      std::to_string(config.patch_size) + "-" + std::to_string(config.f_patch_size);
  linear("all_x_embedder." + patch, d, config.patch_values());
  linear("all_final_layer." + patch + ".linear", config.patch_values(), d);
  linear("all_final_layer." + patch + ".adaLN_modulation.1", d, adaln);
  linear("t_embedder.mlp.0", 1024, 256);
  linear("t_embedder.mlp.2", adaln, 1024);
  norm("cap_embedder.0.weight", config.cap_feat_dim);
  linear("cap_embedder.1", d, config.cap_feat_dim);
  add("x_pad_token", {1, d}, 0.0f, 1.0f);
  add("cap_pad_token", {1, d}, 0.0f, 1.0f);
  const auto block = [&](const std::string& prefix, bool modulated) {
    for (const char* projection : {"to_q", "to_k", "to_v", "to_out.0"})
      weight(prefix + "attention." + projection + ".weight", d, d);
    norm(prefix + "attention.norm_q.weight", config.head_dim());
    norm(prefix + "attention.norm_k.weight", config.head_dim());
    for (const char* name : {"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"})
      norm(prefix + name + ".weight", d);
    weight(prefix + "feed_forward.w1.weight", f, d);
    weight(prefix + "feed_forward.w2.weight", d, f);
    weight(prefix + "feed_forward.w3.weight", f, d);
    if (modulated) linear(prefix + "adaLN_modulation.0", 4 * d, adaln);
  };
  for (int64_t layer = 0; layer < config.n_refiner_layers; ++layer) {
    block(zimage_block_prefix("noise_refiner", layer), true);
    block(zimage_block_prefix("context_refiner", layer), false);
  }
  for (int64_t layer = 0; layer < config.n_layers; ++layer)
    block(zimage_block_prefix("layers", layer), true);
  return tensors;
}

}  // namespace mmgen::dit
