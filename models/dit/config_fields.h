// Reading a DiT's config.json fields: absent or null keys take the caller's default (diffusers'
// own), and a value of the wrong type or range is one line naming the key and the file.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/limits.h"

namespace mmgen::dit {

inline bool is_set(const nlohmann::json& config, const char* key) {
  return config.contains(key) && !config.at(key).is_null();
}

inline int64_t read_int(const nlohmann::json& config, const char* key, int64_t fallback,
                        const std::string& where) {
  if (!is_set(config, key)) return fallback;
  const nlohmann::json& value = config.at(key);
  check(value.is_number_integer() && value.get<int64_t>() >= 0 &&
            value.get<int64_t>() <= Limits::kMaxConfigInteger,
        "{}: '{}' must be an integer from 0 to {}, got {}", where, key, Limits::kMaxConfigInteger,
        value.dump());
  return value.get<int64_t>();
}

}  // namespace mmgen::dit
