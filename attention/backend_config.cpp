#include "attention/backend_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "core/text.h"
#include "core/yaml.h"

namespace mmgen::attention {

using json = nlohmann::json;

namespace {

std::string trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(begin, end - begin + 1));
}

std::string lower(std::string_view text) {
  std::string out;
  for (char c : text) out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string format_number(double value) {
  if (std::floor(value) == value && std::abs(value) < 1e15)
    return fmt::format("{}", int64_t(value));
  return fmt::format("{}", value);
}

// ------------------------------------------------------------------ key=value pairs

// Splits at commas that are outside quotes and brackets.
std::vector<std::string> split_top_level(std::string_view text, const std::string& where) {
  std::vector<std::string> items;
  std::string current;
  char quote = 0;
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      current += c;
      if (c == '\\' && i + 1 < text.size()) {
        current += text[++i];
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '"' || c == '\'') quote = c;
    if (c == '[') ++depth;
    if (c == ']') {
      check(depth > 0, "{}: unmatched ']' in '{}'", where, text);
      --depth;
    }
    if (c == ',' && depth == 0) {
      items.push_back(current);
      current.clear();
      continue;
    }
    current += c;
  }
  check(!quote, "{}: unterminated quote in '{}'; close it with {}", where, text, quote);
  check(depth == 0, "{}: unclosed '[' in '{}'; close the list with ']'", where, text);
  items.push_back(current);
  return items;
}

// Finds the first '=' outside quotes.
size_t find_equals(std::string_view text) {
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (quote) {
      if (text[i] == '\\')
        ++i;
      else if (text[i] == quote)
        quote = 0;
    } else if (text[i] == '"' || text[i] == '\'') {
      quote = text[i];
    } else if (text[i] == '=') {
      return i;
    }
  }
  return std::string_view::npos;
}

// Types one value of a key=value pair; `depth` counts the lists around it.
json coerce_value(const std::string& raw, const std::string& where, int depth = 0) {
  const std::string text = trim(raw);
  if (text.size() >= 2 && (text.front() == '"' || text.front() == '\'') &&
      text.back() == text.front()) {
    std::string out;
    for (size_t i = 1; i + 1 < text.size(); ++i) {
      if (text[i] == '\\' && i + 2 < text.size()) ++i;
      out += text[i];
    }
    return out;
  }
  if (!text.empty() && text.front() == '[') {
    check(text.back() == ']', "{}: the list '{}' must end with ']'", where, text);
    // Each level copies the text and recurses: bounded as JSON nesting is (core/json.h).
    check(depth < kMaxJsonDepth, "{}: lists nested deeper than {} levels; no setting takes that",
          where, kMaxJsonDepth);
    json list = json::array();
    const std::string inside = trim(std::string_view(text).substr(1, text.size() - 2));
    if (inside.empty()) return list;
    for (const auto& item : split_top_level(inside, where)) {
      check(!trim(item).empty(), "{}: empty item in the list '{}'", where, text);
      list.push_back(coerce_value(item, where, depth + 1));
    }
    return list;
  }
  const std::string folded = lower(text);
  if (folded == "true") return true;
  if (folded == "false") return false;
  // A number past double's range stays text: validation then rejects it by name.
  if (is_integer_text(text)) {
    try {
      return int64_t(std::stoll(text));
    } catch (const std::out_of_range&) {
    }
  }
  if (is_decimal_text(text)) {
    try {
      return std::stod(text);
    } catch (const std::out_of_range&) {
    }
  }
  return text;
}

// Sets `object[a][b]...` for a dotted key, refusing to set a key twice.
void set_dotted(json& object, const std::string& key, json value, const std::string& where) {
  // Each dot nests an object, and printing or copying JSON recurses per level (core/json.h).
  check(std::count(key.begin(), key.end(), '.') < kMaxJsonDepth,
        "{}: a key with more than {} dots; settings nest one or two levels deep", where,
        kMaxJsonDepth - 1);
  json* node = &object;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    const std::string part = trim(key.substr(start, dot == std::string::npos ? dot : dot - start));
    check(!part.empty(), "{}: empty name in the key '{}'", where, key);
    if (dot == std::string::npos) {
      check(!node->contains(part), "{}: '{}' is given twice; give each key once", where, key);
      (*node)[part] = std::move(value);
      return;
    }
    if (!node->contains(part)) (*node)[part] = json::object();
    check((*node)[part].is_object(), "{}: '{}' is given both as a value and as a group", where,
          key);
    node = &(*node)[part];
    start = dot + 1;
  }
}

json parse_key_value_pairs(const std::string& text, const std::string& where) {
  json result = json::object();
  for (const auto& item : split_top_level(text, where)) {
    if (trim(item).empty()) continue;  // "a=1," : a trailing comma is harmless
    const size_t equals = find_equals(item);
    check(equals != std::string::npos,
          "{}: '{}' is not key=value; write settings as key=value[,key=value] (or give a "
          ".json/.yaml file or a JSON object)",
          where, trim(item));
    const std::string key = trim(std::string_view(item).substr(0, equals));
    check(!key.empty(), "{}: '{}' has no key before '='", where, trim(item));
    set_dotted(result, key, coerce_value(item.substr(equals + 1), where), where);
  }
  return result;
}

bool has_config_extension(const std::string& text) {
  const std::string extension = lower(fs::path(text).extension().string());
  return extension == ".json" || extension == ".yaml" || extension == ".yml";
}

// Whether some DiT backend has a file setting called `name` (or with that alias).
bool is_path_setting(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  for (const auto& backend : backend_catalogue()) {
    if (backend.family != Family::Dit) continue;
    for (const auto& key : backend.config) {
      if (key.type != ConfigType::Path) continue;
      if (key.name == name) return true;
      for (auto alias : key.aliases)
        if (alias == name) return true;
    }
  }
  return false;
}

// Makes the relative file settings of `settings` (and of its groups) relative to `base`.
json resolve_relative_paths(json settings, const fs::path& base) {
  if (base.empty() || !settings.is_object()) return settings;
  for (auto it = settings.begin(); it != settings.end(); ++it) {
    if (it->is_object()) {
      *it = resolve_relative_paths(*it, base);
    } else if (it->is_string() && !it->get<std::string>().empty() && is_path_setting(it.key()) &&
               fs::path(it->get<std::string>()).is_relative()) {
      *it = (base / it->get<std::string>()).lexically_normal().string();
    }
  }
  return settings;
}

json parse_file(const fs::path& path, const std::string& where) {
  const std::string extension = lower(path.extension().string());
  check(extension == ".json" || extension == ".yaml" || extension == ".yml",
        "{} {}: backend config files must end in .json, .yaml or .yml", where, path.string());
  check(fs::is_regular_file(path), "{} {}: not a regular file", where, path.string());
  // A file named in the file is read from the file's folder, as SGLang's config loaders do.
  fs::path folder = path.parent_path();
  if (folder.empty()) folder = ".";
  if (extension == ".json")
    return resolve_relative_paths(read_json_object(path, /*unique_keys=*/true), folder);
  json document = yaml_to_json(read_text_file(path), path.string());
  if (document.is_null()) return json::object();  // an empty file sets nothing
  check(document.is_object(), "{}: expected a mapping of setting names to values", path.string());
  return resolve_relative_paths(std::move(document), folder);
}

// ------------------------------------------------------------------ validation

const ConfigKey* find_key(const BackendInfo& backend, const std::string& name) {
  for (const auto& key : backend.config) {
    if (key.name == name) return &key;
    for (auto alias : key.aliases)
      if (alias == name) return &key;
  }
  return nullptr;
}

std::vector<std::string> key_names(const BackendInfo& backend) {
  std::vector<std::string> names;
  for (const auto& key : backend.config) names.emplace_back(key.name);
  return names;
}

// The catalogue's DiT backends that have a setting called `name`.
std::vector<std::string> owners_of(const std::string& name) {
  std::vector<std::string> owners;
  for (const auto& backend : backend_catalogue())
    if (backend.family == Family::Dit && find_key(backend, name)) owners.emplace_back(backend.name);
  return owners;
}

bool in_range(const ConfigKey& key, double value) {
  if (key.min && (key.min_inclusive ? value < *key.min : value <= *key.min)) return false;
  if (key.max && (key.max_inclusive ? value > *key.max : value >= *key.max)) return false;
  return true;
}

[[noreturn]] void reject(const std::string& where, std::string_view backend, const ConfigKey& key,
                         const json& value) {
  fail("{}: {}'s {} must be {}, got {}", where, backend, key.name, describe_accepted(key),
       value.dump());
}

json coerce_setting(const ConfigKey& key, const json& value, std::string_view backend,
                    const std::string& where) {
  switch (key.type) {
    case ConfigType::Bool:
      if (!value.is_boolean()) reject(where, backend, key, value);
      return value;
    case ConfigType::Int:
      if (!value.is_number_integer() || !in_range(key, value.get<double>()))
        reject(where, backend, key, value);
      return value.get<int64_t>();
    case ConfigType::Float:
      if (!value.is_number() || !std::isfinite(value.get<double>()) ||
          !in_range(key, value.get<double>()))
        reject(where, backend, key, value);
      return value.get<double>();
    case ConfigType::String:
      if (!value.is_string()) reject(where, backend, key, value);
      return value;
    case ConfigType::Path: {
      if (!value.is_string() || value.get<std::string>().empty())
        reject(where, backend, key, value);
      const std::string path = value.get<std::string>();
      check(fs::is_regular_file(path), "{}: {}'s {}: no such file '{}'", where, backend, key.name,
            path);
      return path;
    }
    case ConfigType::Choice:
      if (value.is_string())
        for (auto choice : key.choices)
          if (lower(choice) == lower(value.get<std::string>())) return std::string(choice);
      reject(where, backend, key, value);
    case ConfigType::IntList: {
      if (!value.is_array() || value.empty() ||
          (key.list_length && value.size() != key.list_length))
        reject(where, backend, key, value);
      for (const auto& item : value)
        if (!item.is_number_integer() || !in_range(key, item.get<double>()))
          reject(where, backend, key, value);
      return value;
    }
  }
  reject(where, backend, key, value);
}

// Aliases that hold a group of settings (SGLang reads V-MoBA's from a nested `moba_config`), as
// the backend's catalogue row names them.
bool is_group_alias(const BackendInfo& backend, const std::string& name) {
  return !backend.config_group.empty() && name == backend.config_group;
}

}  // namespace

std::string describe_accepted(const ConfigKey& key) {
  auto range = [&](const char* noun) {
    if (key.min && key.max)
      return fmt::format("{} in {}{}, {}{}", noun, key.min_inclusive ? "[" : "(",
                         format_number(*key.min), format_number(*key.max),
                         key.max_inclusive ? "]" : ")");
    if (key.min)
      return fmt::format("{} {} {}", noun, key.min_inclusive ? ">=" : ">", format_number(*key.min));
    if (key.max)
      return fmt::format("{} {} {}", noun, key.max_inclusive ? "<=" : "<", format_number(*key.max));
    return std::string(noun);
  };
  switch (key.type) {
    case ConfigType::Bool:
      return "true or false";
    case ConfigType::Int:
      return range("a whole number");
    case ConfigType::Float:
      return range("a number");
    case ConfigType::String:
      return "text";
    case ConfigType::Path:
      return "the path of an existing file";
    case ConfigType::Choice:
      return fmt::format("one of {}", fmt::join(key.choices, ", "));
    case ConfigType::IntList: {
      std::string items = range("whole numbers");
      if (key.list_length)
        return fmt::format("a list of {} {}, e.g. {}", key.list_length, items,
                           key.default_value.is_null() ? "[...]" : key.default_value.dump());
      return fmt::format("a list of {}", items);
    }
  }
  return "?";
}

json parse_backend_config_spec(const json& spec, const std::string& where, const fs::path& base) {
  if (spec.is_null()) return json::object();
  if (spec.is_object()) return resolve_relative_paths(spec, base);
  // dump() only once it is known to fail: it throws on a string that is not UTF-8.
  if (!spec.is_string())
    fail("{}: expected a file, a JSON object or key=value pairs, got {}", where, spec.dump());
  const std::string text = trim(spec.get<std::string>());
  if (text.empty()) return json::object();
  // Keys and values become JSON strings, which nlohmann::json cannot print unless they are UTF-8.
  const size_t bad = invalid_utf8_offset(text);
  check(bad == std::string::npos,
        "{}: the settings are not valid UTF-8 (byte {}); write them as UTF-8 text", where, bad + 1);

  // 1. An existing file.
  std::error_code error;
  const fs::path file = base.empty() || fs::path(text).is_absolute() ? fs::path(text) : base / text;
  if (text.find('\n') == std::string::npos && fs::exists(file, error))
    return parse_file(file.lexically_normal(), where);
  // 2. A JSON object.
  if (text.front() == '{') {
    const json value = parse_json(text, where, "check the quotes and braces", /*unique_keys=*/true);
    check(value.is_object(), "{}: expected a JSON object", where);
    return resolve_relative_paths(value, base);
  }
  // 3. key=value pairs. A lone word that looks like a config file is a missing file.
  if (find_equals(text) == std::string::npos && has_config_extension(text))
    fail("{} {}: no such file", where, file.lexically_normal().string());
  return resolve_relative_paths(parse_key_value_pairs(text, where), base);
}

json validate_backend_config(const json& settings, std::string_view backend_name,
                             const std::string& where, bool ignore_unknown) {
  const BackendInfo* backend = find_backend(Family::Dit, backend_name);
  check(backend != nullptr, "{}: '{}' is not a DiT attention backend", where, backend_name);
  check(settings.is_object(), "{}: expected an object of settings, got {}", where, settings.dump());

  // Flatten groups and resolve aliases: canonical name -> (value, spelling used).
  std::vector<std::pair<std::string, json>> flat;
  for (auto it = settings.begin(); it != settings.end(); ++it) {
    std::string name = it.key();
    std::replace(name.begin(), name.end(), '-', '_');
    if (is_group_alias(*backend, name)) {
      check(it->is_object(), "{}: {} must be an object of {} settings, got {}", where, name,
            backend->config_group_label, it->dump());
      for (auto inner = it->begin(); inner != it->end(); ++inner)
        flat.emplace_back(inner.key(), *inner);
    } else {
      flat.emplace_back(name, *it);
    }
  }

  json result = json::object();
  json spelling = json::object();
  for (auto& [given, value] : flat) {
    std::string name = given;
    std::replace(name.begin(), name.end(), '-', '_');
    const ConfigKey* key = find_key(*backend, name);
    if (!key) {
      if (ignore_unknown) continue;
      const auto owners = owners_of(name);
      const std::string owned = owners.empty() ? std::string()
                                               : fmt::format(" ('{}' is a setting of {})", given,
                                                             fmt::join(owners, ", "));
      check(!backend->config.empty(), "{}: {} takes no settings, but got '{}'{}", where,
            backend->name, given, owned);
      const std::string nearest = nearest_name(name, key_names(*backend));
      fail("{}: unknown key '{}' for {}; valid keys: {}{}{}", where, given, backend->name,
           fmt::join(key_names(*backend), ", "),
           nearest.empty() ? std::string() : fmt::format(" (did you mean {}?)", nearest), owned);
    }
    const std::string canonical(key->name);
    if (result.contains(canonical))
      fail("{}: {} is given twice (as '{}' and '{}'); give it once", where, canonical,
           spelling[canonical].get<std::string>(), given);
    spelling[canonical] = given;
    result[canonical] = coerce_setting(*key, value, backend->name, where);
  }

  for (const auto& key : backend->config)
    if (!result.contains(std::string(key.name)) && !key.default_value.is_null())
      result[std::string(key.name)] = key.default_value;

  for (const auto& key : backend->config) {
    if (key.required_when.empty() || result.contains(std::string(key.name))) continue;
    const std::string condition(key.required_when);
    const size_t equals = condition.find('=');
    const std::string other = condition.substr(0, equals), wanted = condition.substr(equals + 1);
    if (result.contains(other) && result[other].is_string() && result[other] == wanted)
      fail("{}: {} with {}={} needs {} ({}); add {}=FILE, or choose another {}", where,
           backend->name, other, wanted, key.name, key.help, key.name, other);
  }
  return result;
}

std::vector<std::string> settings_unused_by(const json& settings,
                                            const std::vector<std::string>& backends) {
  std::vector<std::string> unused;
  if (!settings.is_object()) return unused;
  for (auto it = settings.begin(); it != settings.end(); ++it) {
    std::string name = it.key();
    std::replace(name.begin(), name.end(), '-', '_');
    bool known = false;
    for (const auto& backend : backends)
      if (const BackendInfo* info = find_backend(Family::Dit, backend))
        known = known || find_key(*info, name) || is_group_alias(*info, name);
    if (!known) unused.push_back(it.key());
  }
  return unused;
}

std::vector<json> validate_backend_configs(const json& settings,
                                           const std::vector<std::string>& backends,
                                           const std::string& where) {
  if (backends.size() == 1) return {validate_backend_config(settings, backends[0], where)};
  // A key must belong to one of the backends; check that with the first one that knows it so
  // its value errors are reported too.
  check(settings.is_object(), "{}: expected an object of settings, got {}", where, settings.dump());
  for (auto it = settings.begin(); it != settings.end(); ++it) {
    json single = json::object();
    single[it.key()] = *it;
    bool known = false;
    for (const auto& backend : backends) {
      const BackendInfo* info = find_backend(Family::Dit, backend);
      std::string name = it.key();
      std::replace(name.begin(), name.end(), '-', '_');
      if (info && (find_key(*info, name) || is_group_alias(*info, name))) known = true;
    }
    if (!known) {
      std::vector<std::string> valid;
      for (const auto& backend : backends)
        if (const BackendInfo* info = find_backend(Family::Dit, backend))
          for (const auto& key : info->config)
            valid.push_back(fmt::format("{} ({})", key.name, backend));
      fail("{}: unknown key '{}' for {}; valid keys: {}", where, it.key(),
           fmt::join(backends, " and "),
           valid.empty() ? "none" : fmt::format("{}", fmt::join(valid, ", ")));
    }
  }
  std::vector<json> results;
  for (const auto& backend : backends)
    results.push_back(validate_backend_config(settings, backend, where, true));
  return results;
}

}  // namespace mmgen::attention
