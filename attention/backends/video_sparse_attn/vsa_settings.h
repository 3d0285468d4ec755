// video_sparse_attn's settings, read once from the validated --attention-backend-config (the
// schema and defaults are in video_sparse_attn.cpp's descriptor) and shared by the CPU and the
// CUDA implementation.
#pragma once

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace mmgen::attention::video_sparse_attn {

struct Settings {
  double sparsity = 0;  // fraction of key cubes dropped, in [0, 1)

  // `settings` as validate_backend_config returns them.
  static Settings from(const nlohmann::json& settings) {
    Settings result;
    result.sparsity = settings.at("sparsity").get<double>();
    // Validation already refused this; kept because the kernels index by it.
    check(result.sparsity >= 0.0 && result.sparsity < 1.0,
          "video_sparse_attn: sparsity must be in [0, 1), got {}", result.sparsity);
    return result;
  }
};

}  // namespace mmgen::attention::video_sparse_attn
