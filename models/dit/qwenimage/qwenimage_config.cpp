#include "models/dit/qwenimage/qwenimage_config.h"

#include "core/config_fields.h"
#include "core/error.h"
#include "core/json.h"
#include "models/dit/dit_config_checks.h"

namespace mmgen::dit {

using nlohmann::json;

void QwenImageConfig::validate(const std::string& where) const {
  check_positive(where, {{"in_channels", in_channels},
                         {"out_channels", out_channels},
                         {"num_attention_heads", num_attention_heads},
                         {"attention_head_dim", attention_head_dim},
                         {"joint_attention_dim", joint_attention_dim},
                         {"patch_size", patch_size}});
  check(patch_size == 2,
        "{}: 'patch_size' is {}: Qwen-Image transformers take 2x2-packed tokens (patch_size 2, as "
        "every released Qwen-Image checkpoint)",
        where, patch_size);
  check_rope_axes(axes_dims_rope, attention_head_dim, "axes_dims_rope", where);
}

QwenImageConfig QwenImageConfig::from_json(const json& config, const std::string& where) {
  check_config_class(config, "QwenImageTransformer2DModel", where);
  // guidance_embeds is a dead key in diffusers (QwenTimestepProjEmbeddings has no guidance
  // embedder whatever it says), read only to refuse a value that is not a boolean; the others
  // change the model.
  (void)config_boolean(config, "guidance_embeds", false, where);
  for (const char* key : {"zero_cond_t", "use_additional_t_cond", "use_layer3d_rope"})
    check(!config_boolean(config, key, false, where),
          "{}: '{}' is true: that Qwen-Image variant (Edit-2511 / Layered) is not supported; "
          "Qwen-Image and Qwen-Image-Edit checkpoints have it false",
          where, key);
  QwenImageConfig result;
  read_config_integers(config,
                       {{"patch_size", result.patch_size},
                        {"in_channels", result.in_channels},
                        {"num_layers", result.num_layers},
                        {"attention_head_dim", result.attention_head_dim},
                        {"num_attention_heads", result.num_attention_heads},
                        {"joint_attention_dim", result.joint_attention_dim}},
                       where);
  // diffusers: `out_channels or in_channels`, the default 16 when the key is absent.
  if (config.contains("out_channels"))
    result.out_channels = config_integer(config, "out_channels", result.in_channels, where);
  if (result.out_channels == 0) result.out_channels = result.in_channels;
  config_integers(config, "axes_dims_rope", result.axes_dims_rope, where, "frame, row, column");
  result.validate(where);
  return result;
}

QwenImageConfig QwenImageConfig::from_file(const fs::path& config_json) {
  return from_json(read_config_file(config_json, "re-download the transformer's config.json"),
                   config_json.string());
}

}  // namespace mmgen::dit
