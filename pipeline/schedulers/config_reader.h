// Typed access to scheduler_config.json values with the class defaults: a missing key or a JSON
// null gives the default; a value of the wrong type is an Error naming the key.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace mmgen::schedulers {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& config, std::string class_name);

  double number(const std::string& key, double fallback) const;
  std::optional<double> optional_number(const std::string& key) const;
  int integer(const std::string& key, int fallback) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  std::vector<int> integers(const std::string& key) const;  // a list; missing or null → empty
  bool is_set(const std::string& key) const;                // present and not null

  // Errors "<class> in scheduler_config.json: <message>".
  [[noreturn]] void unsupported(const std::string& message) const;

 private:
  const nlohmann::json* find(const std::string& key) const;
  [[noreturn]] void wrong_type(const std::string& key, const char* expected) const;

  const nlohmann::json& config_;
  std::string class_name_;
};

}  // namespace mmgen::schedulers
