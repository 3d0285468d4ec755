#include "text/jinja_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/limits.h"

namespace mmgen::tokenizers::jinja {
namespace {

// JSON's nesting bound: deeper than any real message or tool schema, and a self-holding
// namespace reaches it at once.
constexpr int kMaxDepth = Limits::kMaxJsonDepth;

void check_depth(int depth) {
  check(depth <= kMaxDepth,
        "chat template: a value nests deeper than {} levels (does it hold itself?)", kMaxDepth);
}

// A list of a million references to one long string prints as a much longer one.
void check_size(size_t bytes) {
  check(bytes <= Limits::kMaxTemplateStringBytes, "chat template: a printed value grew past {} MiB",
        Limits::kMaxTemplateStringBytes >> 20);
}

// Python's repr(float): the shortest text that reads back, with ".0" on whole numbers.
std::string float_text(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  std::string text = fmt::format("{}", f);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

std::string string_repr(const std::string& s) {
  const char quote =
      (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += char(c);
    }
  }
  return out + quote;
}

std::string repr(const Value& value, int depth) {
  check_depth(depth);
  switch (value.kind()) {
    case Value::Kind::String:
      return string_repr(value.as_string());
    case Value::Kind::Array: {
      const bool tuple = value.is_tuple();
      std::string out = tuple ? "(" : "[";
      for (size_t i = 0; i < value.items().size(); ++i) {
        out += (i ? ", " : "") + repr(value.items()[i], depth + 1);
        check_size(out.size());
      }
      if (tuple && value.items().size() == 1) out += ",";  // Python's (x,)
      return out + (tuple ? ")" : "]");
    }
    case Value::Kind::Object: {
      std::string out = value.is_namespace() ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [key, item] : value.fields().entries()) {
        out += (first ? "" : ", ") + string_repr(key) + ": " + repr(item, depth + 1);
        check_size(out.size());
        first = false;
      }
      return out + (value.is_namespace() ? "}>" : "}");
    }
    default:
      return to_str(value);
  }
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20)
          out += fmt::format("\\u{:04x}", c);
        else
          out += char(c);
    }
  }
  return out + "\"";
}

void json(const Value& value, int indent, bool sort_keys, int depth, std::string& out) {
  check_depth(depth);
  const std::string newline =
      indent < 0 ? "" : "\n" + std::string(size_t(indent) * size_t(depth + 1), ' ');
  const std::string closing =
      indent < 0 ? "" : "\n" + std::string(size_t(indent) * size_t(depth), ' ');
  // Python's separators: ", " without indent, "," with it (the newline follows).
  const char* comma = indent < 0 ? ", " : ",";
  switch (value.kind()) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += value.as_bool() ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(value.as_int());
      return;
    case Value::Kind::Float: {
      const double f = value.as_double();
      out += std::isnan(f)   ? "NaN"
             : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                             : float_text(f);
      return;
    }
    case Value::Kind::String:
      out += json_string(value.as_string());
      return;
    case Value::Kind::Array: {
      if (value.items().empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (size_t i = 0; i < value.items().size(); ++i) {
        out += (i ? comma : "") + newline;
        json(value.items()[i], indent, sort_keys, depth + 1, out);
        check_size(out.size());
      }
      out += closing + "]";
      return;
    }
    case Value::Kind::Object: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : value.fields().entries()) entries.push_back(&entry);
      if (sort_keys)
        std::sort(entries.begin(), entries.end(),
                  [](const auto* a, const auto* b) { return a->first < b->first; });
      if (entries.empty()) {
        out += "{}";
        return;
      }
      out += "{";
      for (size_t i = 0; i < entries.size(); ++i) {
        out += (i ? comma : "") + newline + json_string(entries[i]->first) + ": ";
        json(entries[i]->second, indent, sort_keys, depth + 1, out);
        check_size(out.size());
      }
      out += closing + "}";
      return;
    }
    default:
      fail("chat template: tojson cannot serialize a value of type {}", value.type_name());
  }
}

bool equal(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  const bool a_numeric = a.is_number() || a.is_bool(), b_numeric = b.is_number() || b.is_bool();
  if (a_numeric || b_numeric) {
    if (!a_numeric || !b_numeric) return false;
    if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool()))
      return (a.is_int() ? a.as_int() : int64_t(a.as_bool())) ==
             (b.is_int() ? b.as_int() : int64_t(b.as_bool()));
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::Array:
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equal(a.items()[i], b.items()[i], depth + 1)) return false;
      return true;
    case Value::Kind::Object:
      if (a.is_namespace() || b.is_namespace()) return &a.fields() == &b.fields();
      if (a.fields().size() != b.fields().size()) return false;
      for (const auto& [key, item] : a.fields().entries()) {
        const Value* other = b.fields().find(key);
        if (!other || !equal(item, *other, depth + 1)) return false;
      }
      return true;
    case Value::Kind::Function:
      return a.function_name() == b.function_name();
    default:
      return false;
  }
}

bool less_than(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool()))
    return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // code point order
  if (a.is_array() && b.is_array()) {
    const Array &x = a.items(), &y = b.items();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (less_than(x[i], y[i], depth + 1)) return true;
      if (less_than(y[i], x[i], depth + 1)) return false;
    }
    return x.size() < y.size();
  }
  fail("chat template: '<' is not supported between {} and {}", a.type_name(), b.type_name());
}

}  // namespace

std::string to_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::None:
      return "None";
    case Value::Kind::Bool:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::Int:
      return std::to_string(value.as_int());
    case Value::Kind::Float:
      return float_text(value.as_double());
    case Value::Kind::String:
      return value.as_string();
    case Value::Kind::Function:
      return "<function " + value.function_name() + ">";
    default:
      return repr(value, 0);
  }
}

std::string to_repr(const Value& value) {
  return repr(value, 0);
}

std::string to_json(const Value& value, int indent, bool sort_keys) {
  std::string out;
  json(value, indent, sort_keys, 0, out);
  return out;
}

bool equals(const Value& a, const Value& b) {
  return equal(a, b, 0);
}

bool less(const Value& a, const Value& b) {
  return less_than(a, b, 0);
}

}  // namespace mmgen::tokenizers::jinja
