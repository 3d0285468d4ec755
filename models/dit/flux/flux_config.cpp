#include "models/dit/flux/flux_config.h"

#include "core/config_fields.h"
#include "core/error.h"
#include "core/json.h"
#include "models/dit/dit_config_checks.h"

namespace mmgen::dit {

using nlohmann::json;

void FluxConfig::validate(const std::string& where) const {
  check_positive(where, {{"in_channels", in_channels},
                         {"out_channels", out_channels},
                         {"num_attention_heads", num_attention_heads},
                         {"attention_head_dim", attention_head_dim},
                         {"joint_attention_dim", joint_attention_dim},
                         {"pooled_projection_dim", pooled_projection_dim},
                         {"patch_size", patch_size}});
  check(patch_size == 1,
        "{}: 'patch_size' is {}: FLUX transformers take packed tokens (patch_size 1, as every "
        "released FLUX.1 checkpoint)",
        where, patch_size);
  check_rope_axes(axes_dims_rope, attention_head_dim, "axes_dims_rope", where);
}

FluxConfig FluxConfig::from_json(const json& config, const std::string& where) {
  check_config_class(config, "FluxTransformer2DModel", where);
  FluxConfig result;
  read_config_integers(config,
                       {{"patch_size", result.patch_size},
                        {"in_channels", result.in_channels},
                        {"num_layers", result.num_layers},
                        {"num_single_layers", result.num_single_layers},
                        {"attention_head_dim", result.attention_head_dim},
                        {"num_attention_heads", result.num_attention_heads},
                        {"joint_attention_dim", result.joint_attention_dim},
                        {"pooled_projection_dim", result.pooled_projection_dim}},
                       where);
  result.out_channels = config_integer(config, "out_channels", result.in_channels, where);
  result.guidance_embeds = config_boolean(config, "guidance_embeds", result.guidance_embeds, where);
  config_integers(config, "axes_dims_rope", result.axes_dims_rope, where,
                  "text/frame, row, column");
  result.validate(where);
  return result;
}

FluxConfig FluxConfig::from_file(const fs::path& config_json) {
  return from_json(read_config_file(config_json, "re-download the transformer's config.json"),
                   config_json.string());
}

}  // namespace mmgen::dit
