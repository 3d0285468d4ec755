// A text encoder's config.json fields, read by core/config_fields.h with the message's fix
// naming the file to correct.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/config_fields.h"

namespace mmgen::text_encoders {

inline constexpr const char* kEncoderConfigFix = "fix the text encoder's config.json";

inline int64_t positive_int(const nlohmann::json& json, const char* key, int64_t fallback,
                            const std::string& where) {
  return config_integer(json, key, fallback, where, 1, kEncoderConfigFix);
}

inline int64_t non_negative_int(const nlohmann::json& json, const char* key, int64_t fallback,
                                const std::string& where) {
  return config_integer(json, key, fallback, where, 0, kEncoderConfigFix);
}

inline double positive_number(const nlohmann::json& json, const char* key, double fallback,
                              const std::string& where) {
  return config_number(json, key, fallback, where, NumberRule::Positive, kEncoderConfigFix);
}

// A layer-norm epsilon and the like: positive, held as float32.
inline float positive_float(const nlohmann::json& json, const char* key, float fallback,
                            const std::string& where) {
  return config_float(json, key, fallback, where, NumberRule::Positive, kEncoderConfigFix);
}

inline bool boolean(const nlohmann::json& json, const char* key, bool fallback,
                    const std::string& where) {
  return config_boolean(json, key, fallback, where, kEncoderConfigFix);
}

inline std::string string_field(const nlohmann::json& json, const char* key, std::string fallback,
                                const std::string& where) {
  return config_string(json, key, std::move(fallback), where, kEncoderConfigFix);
}

// The config file, parsed; errors say to re-download it.
inline nlohmann::json read_encoder_config(const std::filesystem::path& path) {
  return read_config_file(path, "re-download the text encoder's config.json");
}

}  // namespace mmgen::text_encoders
