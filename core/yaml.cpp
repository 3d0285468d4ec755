#include "core/yaml.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "core/error.h"
#include "core/limits.h"
#include "core/text.h"

namespace mmgen {

using json = nlohmann::json;

namespace {

// Text from the file must be UTF-8: yaml-cpp passes any bytes through, and a JSON string that is
// not UTF-8 makes nlohmann::json throw when it is printed (in an error message, say).
const std::string& checked_utf8(const std::string& text, const YAML::Node& node,
                                const std::string& where) {
  const size_t bad = invalid_utf8_offset(text);
  check(bad == std::string::npos,
        "{}: line {}, column {}: the text is not valid UTF-8 (byte {} of the value); save the "
        "file as UTF-8",
        where, node.Mark().line + 1, node.Mark().column + 1, bad + 1);
  return text;
}

// Aliases let a few lines of YAML stand for billions of values (each *alias is the whole anchored
// node again), so the values converted are counted against Limits::kMaxYamlValues.
constexpr size_t kMaxYamlValues = Limits::kMaxYamlValues;

// The deepest nesting of flow brackets ([ and {) outside quotes and comments: yaml-cpp recurses
// once per level and gives up on a deep file with "bad file", which names nothing.
size_t flow_depth(const std::string& text) {
  size_t depth = 0, deepest = 0;
  char quote = 0;
  bool comment = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (comment) {
      comment = c != '\n';
    } else if (quote) {
      if (c == '\\' && quote == '"')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\n')) {
      comment = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

json yaml_node_to_json(const YAML::Node& node, const std::string& where, size_t& budget,
                       int depth = 0) {
  check(depth <= Limits::kMaxJsonDepth, "{}: line {}: YAML nested deeper than {} levels", where,
        node.Mark().line + 1, Limits::kMaxJsonDepth);
  check(budget > 0,
        "{}: more than {} values once YAML aliases are expanded; write the values out or use "
        "fewer aliases",
        where, kMaxYamlValues);
  --budget;
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Sequence: {
      json list = json::array();
      for (const auto& item : node)
        list.push_back(yaml_node_to_json(item, where, budget, depth + 1));
      return list;
    }
    case YAML::NodeType::Map: {
      json object = json::object();
      for (const auto& item : node) {
        const std::string key = checked_utf8(item.first.as<std::string>(), item.first, where);
        // yaml-cpp keeps both; which one a reader takes is a guess, so neither is taken.
        check(!object.contains(key), "{}: line {}: the key '{}' appears twice in one mapping",
              where, item.first.Mark().line + 1, text_for_message(key));
        object[key] = yaml_node_to_json(item.second, where, budget, depth + 1);
      }
      return object;
    }
    case YAML::NodeType::Scalar: {
      const std::string& text = checked_utf8(node.Scalar(), node, where);
      if (node.Tag() != "?") return text;  // quoted: always a string
      // Numbers out of range stay text, for the option's conversion to reject by name.
      if (is_integer_text(text)) {
        try {
          return std::stoll(text);
        } catch (const std::out_of_range&) {
          return text;
        }
      }
      if (is_decimal_text(text)) {
        try {
          return std::stod(text);
        } catch (const std::out_of_range&) {
          return text;
        }
      }
      if (text == "true" || text == "True" || text == "TRUE") return true;
      if (text == "false" || text == "False" || text == "FALSE") return false;
      if (text == "null" || text == "~" || text == "Null" || text == "NULL") return nullptr;
      return text;
    }
  }
  return nullptr;
}

}  // namespace

json yaml_to_json(const std::string& text, const std::string& where) {
  // The whole file, comments too: a file that is not UTF-8 is the wrong file, or saved wrong. (The
  // values are checked again as they are read: an escape such as "\ud800" can make one invalid.)
  if (const size_t bad = invalid_utf8_offset(text); bad != std::string::npos) {
    const size_t line = size_t(std::count(text.begin(), text.begin() + std::ptrdiff_t(bad), '\n'));
    const size_t line_start = bad == 0 ? 0 : text.rfind('\n', bad - 1) + 1;  // npos + 1 = 0
    fail(
        "{}: line {}, column {}: the text is not valid UTF-8 (byte {} of the file); save the file "
        "as UTF-8",
        where, line + 1, bad - line_start + 1, bad + 1);
  }
  check(flow_depth(text) <= size_t(Limits::kMaxJsonDepth),
        "{}: YAML nested deeper than {} levels; flatten it", where, Limits::kMaxJsonDepth);
  try {
    size_t budget = kMaxYamlValues;
    return yaml_node_to_json(YAML::Load(text), where, budget);
  } catch (const YAML::Exception& e) {
    fail("{}: malformed YAML at line {}, column {}: {}", where, e.mark.line + 1, e.mark.column + 1,
         e.msg);
  }
}

}  // namespace mmgen
