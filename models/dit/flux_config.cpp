#include "models/dit/flux_config.h"

#include "core/config_fields.h"
#include "core/error.h"
#include "core/json.h"

namespace mmgen::dit {

using nlohmann::json;

void FluxConfig::validate(const std::string& where) const {
  for (const auto& [name, value] : {std::pair{"in_channels", in_channels},
                                    {"out_channels", out_channels},
                                    {"num_attention_heads", num_attention_heads},
                                    {"attention_head_dim", attention_head_dim},
                                    {"joint_attention_dim", joint_attention_dim},
                                    {"pooled_projection_dim", pooled_projection_dim},
                                    {"patch_size", patch_size}})
    check(value > 0, "{}: '{}' must be positive, got {}", where, name, value);
  check(patch_size == 1,
        "{}: 'patch_size' is {}: FLUX transformers take packed tokens (patch_size 1, as every "
        "released FLUX.1 checkpoint)",
        where, patch_size);
  check(attention_head_dim % 2 == 0, "{}: 'attention_head_dim' {} must be even (RoPE pairs)", where,
        attention_head_dim);
  const int64_t axes = axes_dims_rope[0] + axes_dims_rope[1] + axes_dims_rope[2];
  check(axes == attention_head_dim && axes_dims_rope[0] % 2 == 0 && axes_dims_rope[1] % 2 == 0 &&
            axes_dims_rope[2] % 2 == 0,
        "{}: 'axes_dims_rope' [{}, {}, {}] must be even and sum to attention_head_dim {}", where,
        axes_dims_rope[0], axes_dims_rope[1], axes_dims_rope[2], attention_head_dim);
}

FluxConfig FluxConfig::from_json(const json& config, const std::string& where) {
  check(config.is_object(), "{}: expected a JSON object", where);
  if (config.contains("_class_name")) {
    const json& name = config.at("_class_name");
    check(name.is_string() && name.get<std::string>() == "FluxTransformer2DModel",
          "{}: _class_name is {}, expected \"FluxTransformer2DModel\"", where, name.dump());
  }
  FluxConfig result;
  result.patch_size = config_integer(config, "patch_size", result.patch_size, where);
  result.in_channels = config_integer(config, "in_channels", result.in_channels, where);
  result.out_channels = config_integer(config, "out_channels", result.in_channels, where);
  result.num_layers = config_integer(config, "num_layers", result.num_layers, where);
  result.num_single_layers =
      config_integer(config, "num_single_layers", result.num_single_layers, where);
  result.attention_head_dim =
      config_integer(config, "attention_head_dim", result.attention_head_dim, where);
  result.num_attention_heads =
      config_integer(config, "num_attention_heads", result.num_attention_heads, where);
  result.joint_attention_dim =
      config_integer(config, "joint_attention_dim", result.joint_attention_dim, where);
  result.pooled_projection_dim =
      config_integer(config, "pooled_projection_dim", result.pooled_projection_dim, where);
  if (config_has(config, "guidance_embeds")) {
    const json& value = config.at("guidance_embeds");
    check(value.is_boolean(), "{}: 'guidance_embeds' must be true or false, got {}", where,
          value.dump());
    result.guidance_embeds = value.get<bool>();
  }
  if (config_has(config, "axes_dims_rope")) {
    const json& value = config.at("axes_dims_rope");
    check(value.is_array() && value.size() == 3 && value[0].is_number_integer() &&
              value[1].is_number_integer() && value[2].is_number_integer(),
          "{}: 'axes_dims_rope' must be a list of 3 integers (text/frame, row, column), got {}",
          where, value.dump());
    for (size_t a = 0; a < 3; ++a) result.axes_dims_rope[a] = value[a].get<int64_t>();
  }
  result.validate(where);
  return result;
}

FluxConfig FluxConfig::from_file(const fs::path& config_json) {
  return from_json(read_json_object(config_json), config_json.string());
}

}  // namespace mmgen::dit
