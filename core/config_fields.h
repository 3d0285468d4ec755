// Reading a model's config.json (or any untrusted JSON object) one field at a time: an absent or
// null key takes the caller's default (diffusers' or transformers' own), and a value of the wrong
// type or range is one line naming the key and the file. nlohmann's json::value() would throw a
// type_error with neither, or convert 1e30 to an integer undefinedly; every config key is read
// through these instead.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/limits.h"

namespace mmgen {

// Whether `key` is present and not null.
bool config_has(const nlohmann::json& config, const char* key);

// An integer from `minimum` to Limits::kMaxConfigInteger, else `fallback` when absent. Errors read
// `<where>: "<key>" must be an integer from <minimum> to <max>, got <value>[; <fix>]`.
int64_t config_integer(const nlohmann::json& config, const char* key, int64_t fallback,
                       const std::string& where, int64_t minimum = 0, std::string_view fix = {});

// A string, else `fallback` when absent.
std::string config_string(const nlohmann::json& config, const char* key, std::string fallback,
                          const std::string& where, std::string_view fix = {});

}  // namespace mmgen
