#include "core/config_fields.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"

namespace mmgen {

namespace {

std::string with_fix(std::string_view fix) {
  return fix.empty() ? std::string() : "; " + std::string(fix);
}

// Whether `value` is an integer from `minimum` to Limits::kMaxConfigInteger; an unsigned value
// past int64's range is refused by the range check, read as unsigned.
bool integer_in_range(const nlohmann::json& value, int64_t minimum) {
  if (value.is_number_unsigned())
    return value.get<uint64_t>() <= uint64_t(Limits::kMaxConfigInteger) &&
           int64_t(value.get<uint64_t>()) >= minimum;
  return value.is_number_integer() && value.get<int64_t>() >= minimum &&
         value.get<int64_t>() <= Limits::kMaxConfigInteger;
}

}  // namespace

nlohmann::json read_config_file(const std::filesystem::path& path, std::string_view fix) {
  nlohmann::json config = parse_json(read_text_file(path), path.string(), fix);
  check(config.is_object(), "{}: expected a JSON object{}", path.string(), with_fix(fix));
  return config;
}

void check_config_class(const nlohmann::json& config, std::string_view expected,
                        const std::string& where) {
  check(config.is_object(), "{}: expected a JSON object", where);
  if (!config.contains("_class_name")) return;
  const nlohmann::json& name = config.at("_class_name");
  check(name.is_string() && name.get<std::string>() == expected,
        "{}: _class_name is {}, expected \"{}\"", where, json_for_message(name), expected);
}

bool config_has(const nlohmann::json& config, const char* key) {
  return config.is_object() && config.contains(key) && !config.at(key).is_null();
}

int64_t config_integer(const nlohmann::json& config, const char* key, int64_t fallback,
                       const std::string& where, int64_t minimum, std::string_view fix) {
  if (!config_has(config, key)) return fallback;
  const nlohmann::json& value = config.at(key);
  check(integer_in_range(value, minimum), "{}: \"{}\" must be an integer from {} to {}, got {}{}",
        where, key, minimum, Limits::kMaxConfigInteger, json_for_message(value), with_fix(fix));
  return value.get<int64_t>();
}

void read_config_integers(const nlohmann::json& config, std::initializer_list<IntegerField> fields,
                          const std::string& where, int64_t minimum, std::string_view fix) {
  for (const IntegerField& field : fields)
    field.value = config_integer(config, field.key, field.value, where, minimum, fix);
}

void config_integers(const nlohmann::json& config, const char* key, std::span<int64_t> values,
                     const std::string& where, std::string_view meaning, int64_t minimum,
                     std::string_view fix) {
  if (!config_has(config, key)) return;
  const nlohmann::json& list = config.at(key);
  bool valid = list.is_array() && list.size() == values.size();
  for (size_t i = 0; valid && i < values.size(); ++i) valid = integer_in_range(list[i], minimum);
  check(valid, "{}: \"{}\" must be a list of {} integers from {} to {} ({}), got {}{}", where, key,
        values.size(), minimum, Limits::kMaxConfigInteger, meaning, json_for_message(list),
        with_fix(fix));
  for (size_t i = 0; i < values.size(); ++i) values[i] = list[i].get<int64_t>();
}

std::string config_string(const nlohmann::json& config, const char* key, std::string fallback,
                          const std::string& where, std::string_view fix) {
  if (!config_has(config, key)) return fallback;
  const nlohmann::json& value = config.at(key);
  check(value.is_string(), "{}: \"{}\" must be a string, got {}{}", where, key,
        json_for_message(value), with_fix(fix));
  return value.get<std::string>();
}

bool config_boolean(const nlohmann::json& config, const char* key, bool fallback,
                    const std::string& where, std::string_view fix) {
  if (!config_has(config, key)) return fallback;
  const nlohmann::json& value = config.at(key);
  check(value.is_boolean(), "{}: \"{}\" must be true or false, got {}{}", where, key,
        json_for_message(value), with_fix(fix));
  return value.get<bool>();
}

double config_number(const nlohmann::json& config, const char* key, double fallback,
                     const std::string& where, NumberRule rule, std::string_view fix) {
  if (!config_has(config, key)) return fallback;
  const nlohmann::json& value = config.at(key);
  const double number = value.is_number() ? value.get<double>() : NAN;
  const bool positive = rule == NumberRule::Positive;
  check(std::isfinite(number) && (!positive || number > 0),
        "{}: \"{}\" must be a {} number, got {}{}", where, key, positive ? "positive" : "finite",
        json_for_message(value), with_fix(fix));
  return number;
}

float config_float(const nlohmann::json& config, const char* key, float fallback,
                   const std::string& where, NumberRule rule, std::string_view fix) {
  const double number = config_number(config, key, double(fallback), where, rule, fix);
  // A positive number below float32's smallest is refused too: it would become 0.
  check(std::abs(number) <= double(std::numeric_limits<float>::max()) &&
            (rule != NumberRule::Positive || float(number) > 0),
        "{}: \"{}\" must be a float32 number{}, got {:g}{}", where, key,
        rule == NumberRule::Positive ? " above 0" : "", number, with_fix(fix));
  return float(number);
}

}  // namespace mmgen
