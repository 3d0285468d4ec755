// YAML text from untrusted files (configs, backend settings), read into JSON with one set of rules:
// plain scalars typed as numbers, booleans or null, text checked to be UTF-8, and aliases
// expanded against a budget (core/limits.h), so a few lines cannot stand for billions of values.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mmgen {

// YAML text to JSON; plain scalars become numbers/booleans/null where YAML would type them.
nlohmann::json yaml_to_json(const std::string& text, const std::string& where);

}  // namespace mmgen
