// A text encoder's config.json integers are positive (core/config_fields.h reads them).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/config_fields.h"

namespace mmgen::text_encoders {

inline int64_t positive_int(const nlohmann::json& json, const char* key, int64_t fallback,
                            const std::string& where) {
  return config_integer(json, key, fallback, where, 1, "fix the text encoder's config.json");
}

}  // namespace mmgen::text_encoders
