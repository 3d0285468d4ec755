#include "models/dit/wan/wan_transformer_config.h"

#include <nlohmann/json.hpp>

#include "core/config_fields.h"
#include "core/error.h"
#include "core/json.h"
#include "core/limits.h"

namespace mmgen::dit {
using nlohmann::json;

WanTransformerConfig WanTransformerConfig::from_json(const json& config, const std::string& where) {
  check_config_class(config, "WanTransformer3DModel", where);

  // Image-to-video and Wan2.2 S2V/VACE variants add weights and inputs this model does not have.
  for (const char* key : {"image_dim", "added_kv_proj_dim", "pos_embed_seq_len"})
    if (config_has(config, key))
      fail(
          "{}: '{}' is set ({}): image-conditioned Wan transformers (I2V) are not supported; use "
          "a text-to-video checkpoint",
          where, key, config.at(key).dump());

  WanTransformerConfig result;
  config_integers(config, "patch_size", result.patch_size, where, "frames, rows, columns");
  read_config_integers(config,
                       {{"num_attention_heads", result.num_attention_heads},
                        {"attention_head_dim", result.attention_head_dim},
                        {"in_channels", result.in_channels},
                        {"text_dim", result.text_dim},
                        {"freq_dim", result.freq_dim},
                        {"ffn_dim", result.ffn_dim},
                        {"num_layers", result.num_layers},
                        {"rope_max_seq_len", result.rope_max_seq_len}},
                       where);
  // diffusers: `out_channels = out_channels or in_channels`.
  result.out_channels = config_integer(config, "out_channels", 0, where);
  if (result.out_channels == 0) result.out_channels = result.in_channels;
  result.cross_attn_norm = config_boolean(config, "cross_attn_norm", result.cross_attn_norm, where);
  result.eps = config_float(config, "eps", result.eps, where, NumberRule::Positive);
  // The default is "rms_norm_across_heads"; null (no q/k norm) and per-head norms are other models.
  const json qk_norm =
      config.contains("qk_norm") ? config.at("qk_norm") : json("rms_norm_across_heads");
  check(qk_norm.is_string() && qk_norm.get<std::string>() == "rms_norm_across_heads",
        "{}: qk_norm {} is not supported (only \"rms_norm_across_heads\", the Wan2.1/2.2 setting)",
        where, qk_norm.dump());

  result.validate(where);
  return result;
}

WanTransformerConfig WanTransformerConfig::from_file(const fs::path& config_json) {
  return from_json(read_config_file(config_json, "re-download the transformer's config.json"),
                   config_json.string());
}

void WanTransformerConfig::validate(const std::string& where) const {
  for (int64_t p : patch_size)
    check(p >= 1 && p <= 64, "{}: patch_size entries must be in 1..64, got {}", where, p);
  check(num_attention_heads >= 1, "{}: num_attention_heads must be positive", where);
  // RoPE rotates pairs of channels, so the head and each of its t/h/w parts must be even.
  check(attention_head_dim >= 6 && attention_head_dim % 2 == 0,
        "{}: attention_head_dim must be even and at least 6, got {}", where, attention_head_dim);
  check(in_channels >= 1 && out_channels >= 1, "{}: in_channels/out_channels must be positive",
        where);
  check(text_dim >= 1, "{}: text_dim must be positive", where);
  check(freq_dim >= 2 && freq_dim % 2 == 0, "{}: freq_dim must be even and positive, got {}", where,
        freq_dim);
  check(ffn_dim >= 1, "{}: ffn_dim must be positive", where);
  check(num_layers >= 0, "{}: num_layers must not be negative", where);
  check(eps > 0.0f, "{}: eps must be positive", where);
  check(rope_max_seq_len >= 1 && rope_max_seq_len <= (1 << 16),
        "{}: rope_max_seq_len must be in 1..65536, got {}", where, rope_max_seq_len);
}

}  // namespace mmgen::dit
