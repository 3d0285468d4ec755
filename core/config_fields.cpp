#include "core/config_fields.h"

#include "core/error.h"
#include "core/json.h"

namespace mmgen {

namespace {

std::string with_fix(std::string_view fix) {
  return fix.empty() ? std::string() : "; " + std::string(fix);
}

}  // namespace

bool config_has(const nlohmann::json& config, const char* key) {
  return config.is_object() && config.contains(key) && !config.at(key).is_null();
}

int64_t config_integer(const nlohmann::json& config, const char* key, int64_t fallback,
                       const std::string& where, int64_t minimum, std::string_view fix) {
  if (!config_has(config, key)) return fallback;
  const nlohmann::json& value = config.at(key);
  // An unsigned value past int64's range is refused by the range check, read as unsigned.
  const bool in_range = value.is_number_unsigned()
                            ? value.get<uint64_t>() <= uint64_t(Limits::kMaxConfigInteger) &&
                                  int64_t(value.get<uint64_t>()) >= minimum
                            : value.is_number_integer() && value.get<int64_t>() >= minimum &&
                                  value.get<int64_t>() <= Limits::kMaxConfigInteger;
  check(in_range, "{}: \"{}\" must be an integer from {} to {}, got {}{}", where, key, minimum,
        Limits::kMaxConfigInteger, json_for_message(value), with_fix(fix));
  return value.get<int64_t>();
}

std::string config_string(const nlohmann::json& config, const char* key, std::string fallback,
                          const std::string& where, std::string_view fix) {
  if (!config_has(config, key)) return fallback;
  const nlohmann::json& value = config.at(key);
  check(value.is_string(), "{}: \"{}\" must be a string, got {}{}", where, key,
        json_for_message(value), with_fix(fix));
  return value.get<std::string>();
}

}  // namespace mmgen
