#include "models/dit/zimage/zimage_config.h"

#include <nlohmann/json.hpp>

#include "core/config_fields.h"
#include "core/error.h"
#include "core/json.h"
#include "core/limits.h"

namespace mmgen::dit {
namespace {

using nlohmann::json;

// A list of patch sizes holding exactly one entry (one x_embedder / final layer pair).
int64_t read_single_patch(const json& config, const char* key, int64_t fallback,
                          const std::string& where) {
  if (!config_has(config, key)) return fallback;
  const json& value = config.at(key);
  check(value.is_array() && value.size() == 1 && value[0].is_number_integer(),
        "{}: '{}' is {}: only a single patch size is supported (one integer in a list, as every "
        "released Z-Image checkpoint has)",
        where, key, value.dump());
  return value[0].get<int64_t>();
}

}  // namespace

ZImageConfig ZImageConfig::from_json(const json& config, const std::string& where) {
  check_config_class(config, "ZImageTransformer2DModel", where);
  // Z-Image-Omni's SigLIP branch adds an embedder, a refiner and a third token stream.
  check(!config_has(config, "siglip_feat_dim"),
        "{}: 'siglip_feat_dim' is {}: SigLIP-conditioned (Omni) Z-Image transformers are not "
        "supported; use a text-to-image checkpoint",
        where, config_has(config, "siglip_feat_dim") ? config.at("siglip_feat_dim").dump() : "");
  if (config.contains("qk_norm")) {
    const json& value = config.at("qk_norm");
    check(value.is_boolean() && value.get<bool>(),
          "{}: 'qk_norm' is {}: only true (q/k RMSNorm, every Z-Image checkpoint) is supported",
          where, value.dump());
  }

  ZImageConfig result;
  result.patch_size = read_single_patch(config, "all_patch_size", result.patch_size, where);
  result.f_patch_size = read_single_patch(config, "all_f_patch_size", result.f_patch_size, where);
  read_config_integers(config,
                       {{"in_channels", result.in_channels},
                        {"dim", result.dim},
                        {"n_layers", result.n_layers},
                        {"n_refiner_layers", result.n_refiner_layers},
                        {"n_heads", result.n_heads},
                        {"n_kv_heads", result.n_kv_heads},
                        {"cap_feat_dim", result.cap_feat_dim}},
                       where);
  result.norm_eps = config_float(config, "norm_eps", result.norm_eps, where);
  result.rope_theta = config_number(config, "rope_theta", result.rope_theta, where);
  result.t_scale = config_float(config, "t_scale", result.t_scale, where);
  // Position ids have three coordinates (caption index or frame, row, column), so three axes.
  config_integers(config, "axes_dims", result.axes_dims, where, "one per RoPE axis");
  config_integers(config, "axes_lens", result.axes_lens, where, "one per RoPE axis");
  result.validate(where);
  return result;
}

ZImageConfig ZImageConfig::from_file(const fs::path& config_json) {
  return from_json(read_config_file(config_json, "re-download the transformer's config.json"),
                   config_json.string());
}

void ZImageConfig::validate(const std::string& where) const {
  check(patch_size >= 1 && patch_size <= 64, "{}: 'all_patch_size' must be in 1..64, got {}", where,
        patch_size);
  check(f_patch_size >= 1 && f_patch_size <= 64, "{}: 'all_f_patch_size' must be in 1..64, got {}",
        where, f_patch_size);
  check(in_channels >= 1, "{}: 'in_channels' must be positive", where);
  check(n_heads >= 1, "{}: 'n_heads' must be positive", where);
  check(n_kv_heads >= 1, "{}: 'n_kv_heads' must be positive", where);
  check(dim >= 1 && dim % n_heads == 0, "{}: 'dim' {} must be a positive multiple of n_heads {}",
        where, dim, n_heads);
  check(cap_feat_dim >= 1, "{}: 'cap_feat_dim' must be positive", where);
  check(norm_eps > 0.0f, "{}: 'norm_eps' must be positive", where);
  check(rope_theta > 1.0, "{}: 'rope_theta' must be above 1, got {}", where, rope_theta);
  check(t_scale > 0.0f, "{}: 't_scale' must be positive, got {}", where, t_scale);
  int64_t rope_dims = 0;
  for (size_t axis = 0; axis < 3; ++axis) {
    // RoPE rotates pairs of channels, so each axis holds an even number of them.
    check(axes_dims[axis] >= 2 && axes_dims[axis] % 2 == 0,
          "{}: 'axes_dims' entries must be even and positive, got {}", where, axes_dims[axis]);
    check(axes_lens[axis] >= 1 && axes_lens[axis] <= (1 << 20),
          "{}: 'axes_lens' entries must be in 1..{}, got {}", where, 1 << 20, axes_lens[axis]);
    rope_dims += axes_dims[axis];
  }
  check(rope_dims == head_dim(),
        "{}: 'axes_dims' sum to {} but the head size (dim / n_heads) is {}; they must match", where,
        rope_dims, head_dim());
}

}  // namespace mmgen::dit
