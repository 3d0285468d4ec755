#include "pipeline/schedulers/config_reader.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace mmgen::schedulers {
namespace {

// A JSON whole number (or whole float: Python writes 1000.0 at times) within int's range; past
// it, converting a float is undefined and an int64 would silently wrap.
std::optional<int> as_int(const nlohmann::json& value) {
  if (!value.is_number()) return std::nullopt;
  const double number = value.get<double>();
  if (value.is_number_float() && std::floor(number) != number) return std::nullopt;
  if (number < std::numeric_limits<int>::min() || number > std::numeric_limits<int>::max())
    return std::nullopt;
  return value.is_number_integer() ? int(value.get<int64_t>()) : int(number);
}

}  // namespace

ConfigReader::ConfigReader(const nlohmann::json& config, std::string class_name)
    : config_(config), class_name_(std::move(class_name)) {
  check(config.is_object(), "{}: the scheduler config must be a JSON object", class_name_);
}

const nlohmann::json* ConfigReader::find(const std::string& key) const {
  auto it = config_.find(key);
  if (it == config_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool ConfigReader::is_set(const std::string& key) const {
  return find(key) != nullptr;
}

void ConfigReader::wrong_type(const std::string& key, const char* expected) const {
  fail("{} in scheduler_config.json: '{}' must be {} (got {}); fix the config file", class_name_,
       key, expected, config_.at(key).dump());
}

void ConfigReader::unsupported(const std::string& message) const {
  fail("{} in scheduler_config.json: {}", class_name_, message);
}

double ConfigReader::number(const std::string& key, double fallback) const {
  const nlohmann::json* value = find(key);
  if (!value) return fallback;
  if (!value->is_number()) wrong_type(key, "a number");
  return value->get<double>();
}

std::optional<double> ConfigReader::optional_number(const std::string& key) const {
  if (!find(key)) return std::nullopt;
  return number(key, 0.0);
}

int ConfigReader::integer(const std::string& key, int fallback) const {
  const nlohmann::json* value = find(key);
  if (!value) return fallback;
  const std::optional<int> number = as_int(*value);
  if (!number) wrong_type(key, "a whole number from -2^31 to 2^31 - 1");
  return *number;
}

bool ConfigReader::boolean(const std::string& key, bool fallback) const {
  const nlohmann::json* value = find(key);
  if (!value) return fallback;
  if (!value->is_boolean()) wrong_type(key, "true or false");
  return value->get<bool>();
}

std::string ConfigReader::string(const std::string& key, const std::string& fallback) const {
  const nlohmann::json* value = find(key);
  if (!value) return fallback;
  if (!value->is_string()) wrong_type(key, "a string");
  return value->get<std::string>();
}

std::vector<int> ConfigReader::integers(const std::string& key) const {
  const nlohmann::json* value = find(key);
  if (!value) return {};
  if (!value->is_array()) wrong_type(key, "a list of whole numbers");
  std::vector<int> out;
  for (const auto& item : *value) {
    const std::optional<int> number = item.is_number_integer() ? as_int(item) : std::nullopt;
    if (!number) wrong_type(key, "a list of whole numbers from -2^31 to 2^31 - 1");
    out.push_back(*number);
  }
  return out;
}

}  // namespace mmgen::schedulers
