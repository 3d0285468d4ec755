// A VAE's config.json integers (core/config_fields.h reads them; the message says which file to
// fix).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/config_fields.h"

namespace mmgen::vae {

inline int64_t vae_integer(const nlohmann::json& config, const char* key, int64_t fallback,
                           int64_t minimum, const std::string& where) {
  return config_integer(config, key, fallback, where, minimum, "fix the VAE's config.json");
}

}  // namespace mmgen::vae
