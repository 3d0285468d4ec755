// Reading tokenizer.json fields with errors that say which file and which field is wrong.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace mmgen::tokenizers {

using Json = nlohmann::json;

// `where` is "<file>: <json path>", e.g. "tok/tokenizer.json: normalizer.normalizers[1]".
inline const Json& field(const Json& object, const char* key, const std::string& where) {
  check(object.is_object(), "{} is not a JSON object; the tokenizer.json is malformed", where);
  auto it = object.find(key);
  check(it != object.end(),
        "{} has no '{}' field; the tokenizer.json is malformed or from an "
        "unsupported version",
        where, key);
  return *it;
}

inline std::string string_field(const Json& object, const char* key, const std::string& where) {
  const Json& value = field(object, key, where);
  check(value.is_string(), "{}.{} should be a string; the tokenizer.json is malformed", where, key);
  return value.get<std::string>();
}

inline bool bool_field_or(const Json& object, const char* key, bool fallback,
                          const std::string& where) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return fallback;
  check(object[key].is_boolean(), "{}.{} should be true or false; the tokenizer.json is malformed",
        where, key);
  return object[key].get<bool>();
}

inline std::string string_field_or(const Json& object, const char* key, const std::string& fallback,
                                   const std::string& where) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return fallback;
  check(object[key].is_string(), "{}.{} should be a string; the tokenizer.json is malformed", where,
        key);
  return object[key].get<std::string>();
}

inline int64_t integer_field(const Json& object, const char* key, const std::string& where) {
  const Json& value = field(object, key, where);
  check(value.is_number_integer(), "{}.{} should be an integer; the tokenizer.json is malformed",
        where, key);
  return value.get<int64_t>();
}

inline const Json& array_field(const Json& object, const char* key, const std::string& where) {
  const Json& value = field(object, key, where);
  check(value.is_array(), "{}.{} should be a list; the tokenizer.json is malformed", where, key);
  return value;
}

}  // namespace mmgen::tokenizers
