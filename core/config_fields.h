// Reading a model's config.json (or any untrusted JSON object) one field at a time: an absent or
// null key takes the caller's default (diffusers' or transformers' own), and a value of the wrong
// type or range is one line naming the key and the file. nlohmann's json::value() would throw a
// type_error with neither, or convert 1e30 to an integer (or 1e300 to a float) undefinedly; every
// config key of every model (DiTs, text encoders, VAEs) is read through these instead.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "core/limits.h"

namespace mmgen {

// A config file parsed and checked to be an object; errors name the file and end in `fix`
// ("re-download the VAE's config.json").
nlohmann::json read_config_file(const std::filesystem::path& path, std::string_view fix);

// Refuses anything but an object, then a `_class_name` other than `expected` where one is given.
void check_config_class(const nlohmann::json& config, std::string_view expected,
                        const std::string& where);

// Whether `key` is present and not null.
bool config_has(const nlohmann::json& config, const char* key);

// An integer from `minimum` to Limits::kMaxConfigInteger, else `fallback` when absent. Errors read
// `<where>: "<key>" must be an integer from <minimum> to <max>, got <value>[; <fix>]`.
int64_t config_integer(const nlohmann::json& config, const char* key, int64_t fallback,
                       const std::string& where, int64_t minimum = 0, std::string_view fix = {});

// One integer field of a config structure: its key, and the member it is read into (which holds
// the default).
struct IntegerField {
  const char* key;
  int64_t& value;
};

// Each field read by config_integer, in order: a config lists its integer keys once.
void read_config_integers(const nlohmann::json& config, std::initializer_list<IntegerField> fields,
                          const std::string& where, int64_t minimum = 0, std::string_view fix = {});

// A list of exactly `values.size()` integers from `minimum` to Limits::kMaxConfigInteger, read
// into `values`, which keep the caller's defaults when the key is absent. `meaning` says what the
// entries are ("one per RoPE axis") in the error.
void config_integers(const nlohmann::json& config, const char* key, std::span<int64_t> values,
                     const std::string& where, std::string_view meaning, int64_t minimum = 0,
                     std::string_view fix = {});

// A string, else `fallback` when absent.
std::string config_string(const nlohmann::json& config, const char* key, std::string fallback,
                          const std::string& where, std::string_view fix = {});

// true or false, else `fallback` when absent.
bool config_boolean(const nlohmann::json& config, const char* key, bool fallback,
                    const std::string& where, std::string_view fix = {});

enum class NumberRule { Finite, Positive };

// A finite number (above 0 with NumberRule::Positive), else `fallback` when absent.
double config_number(const nlohmann::json& config, const char* key, double fallback,
                     const std::string& where, NumberRule rule = NumberRule::Finite,
                     std::string_view fix = {});

// config_number within float32's range (converting a larger double to float is undefined), as
// torch rounds a Python float to a float32 tensor's value.
float config_float(const nlohmann::json& config, const char* key, float fallback,
                   const std::string& where, NumberRule rule = NumberRule::Finite,
                   std::string_view fix = {});

}  // namespace mmgen
