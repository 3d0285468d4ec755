// Jinja's filters and tests, those chat templates use. Declared in jinja_builtins.h.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/error.h"
#include "text/jinja_builtins.h"
#include "text/jinja_format.h"
#include "text/utf8.h"

namespace mmgen::tokenizers::jinja {
namespace {

const char* const kFilters[] = {
    "length", "count",   "tojson",    "trim",       "upper",      "lower",   "capitalize",
    "title",  "default", "d",         "join",       "first",      "last",    "list",
    "string", "int",     "float",     "abs",        "replace",    "reverse", "sort",
    "unique", "items",   "dictsort",  "selectattr", "rejectattr", "select",  "reject",
    "map",    "safe",    "e",         "escape",     "round",      "min",     "max",
    "sum",    "indent",  "wordcount", "attr"};
const char* const kTests[] = {"defined",     "undefined", "none",  "string",  "number",  "integer",
                              "float",       "boolean",   "true",  "false",   "mapping", "iterable",
                              "sequence",    "callable",  "eq",    "equalto", "==",      "ne",
                              "!=",          "lt",        "<",     "le",      "<=",      "gt",
                              ">",           "ge",        ">=",    "in",      "odd",     "even",
                              "divisibleby", "lower",     "upper", "sameas"};

int64_t int_argument(const CallArgs& args, size_t position, const char* keyword, int64_t fallback,
                     const char* filter) {
  static const Value absent;
  const Value& value = argument(args, position, keyword, absent);
  if (value.is_undefined() || value.is_none()) return fallback;
  check(value.is_int(), "{}: '{}' should be an integer, not {}", filter, keyword,
        value.type_name());
  return value.as_int();
}

// attribute="a.b" as Jinja reads it: dict keys (or list indexes) one dot at a time.
Value lookup_path(const Value& value, const std::string& path) {
  Value current = value;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    if (current.is_object()) {
      const Value* found = current.fields().find(part);
      current = found ? *found : Value();
    } else if (current.is_array() && !part.empty() &&
               part.find_first_not_of("0123456789") == std::string::npos && part.size() < 10) {
      const size_t index = std::stoul(part);
      current = index < current.items().size() ? current.items()[index] : Value();
    } else {
      return Value();
    }
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

std::string escape_html(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// select / reject / selectattr / rejectattr: the test named by the first argument after the
// attribute (truthiness without one), with the rest as its arguments.
Value filter_by_test(const Value& input, const CallArgs& args, bool by_attribute, bool keep) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    check(!args.positional.empty() && args.positional[0].is_string(),
          "selectattr / rejectattr need an attribute name");
    attribute = args.positional[next++].as_string();
  }
  std::string test;
  if (next < args.positional.size()) {
    check(args.positional[next].is_string(), "select: the test should be named by a string");
    test = args.positional[next++].as_string();
    check(is_known_test(test), "unknown test '{}'", test);
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + std::ptrdiff_t(next),
                              args.positional.end());
  Array out;
  for (const Value& item : iterate(input)) {
    const Value subject = by_attribute ? lookup_path(item, attribute) : item;
    const bool passes = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (passes == keep) out.push_back(item);
  }
  return Value::array(std::move(out));
}

Value map_filter(const Value& input, const CallArgs& args) {
  static const Value absent;
  const Value& attribute = argument(args, 99, "attribute", absent);
  Array out;
  if (attribute.is_string()) {
    const Value& fallback = argument(args, 99, "default", absent);
    for (const Value& item : iterate(input)) {
      Value found = lookup_path(item, attribute.as_string());
      out.push_back(found.is_undefined() ? fallback : found);
    }
    return Value::array(std::move(out));
  }
  check(!args.positional.empty() && args.positional[0].is_string(),
        "map needs a filter name or attribute=");
  const std::string filter = args.positional[0].as_string();
  check(is_known_filter(filter) && filter != "map", "map: unknown filter '{}'", filter);
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : iterate(input)) out.push_back(apply_filter(filter, item, rest));
  return Value::array(std::move(out));
}

Value sort_filter(const Value& input, const CallArgs& args) {
  static const Value absent, no(false);
  const bool reverse = argument(args, 0, "reverse", no).truthy();
  const bool case_sensitive = argument(args, 1, "case_sensitive", no).truthy();
  const Value& attribute = argument(args, 2, "attribute", absent);
  const Array items = iterate(input);
  // Each key made once (a lowered copy of a string), not once per comparison.
  std::vector<std::pair<Value, size_t>> keyed;
  size_t key_bytes = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    Value key = attribute.is_string() ? lookup_path(items[i], attribute.as_string()) : items[i];
    if (!case_sensitive && key.is_string()) {
      std::string lower = key.as_string();
      for (char& c : lower)
        if (c >= 'A' && c <= 'Z') c = char(c ^ 0x20);
      key_bytes += lower.size();
      check_string_size(key_bytes);
      key = Value(std::move(lower));
    }
    keyed.emplace_back(std::move(key), i);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  Array out;
  for (const auto& entry : keyed) out.push_back(items[entry.second]);
  return Value::array(std::move(out));
}

std::string indent_filter(const std::string& text, const CallArgs& args) {
  static const Value four(int64_t(4)), no(false);
  const Value& width = argument(args, 0, "width", four);
  check(width.is_string() || width.is_int(), "indent: width should be a number or a string");
  const std::string pad =
      width.is_string() ? width.as_string()
                        : std::string(size_t(std::clamp<int64_t>(width.as_int(), 0, 1024)), ' ');
  const bool first = argument(args, 1, "first", no).truthy();
  const bool blank = argument(args, 2, "blank", no).truthy();
  std::string out;
  size_t start = 0;
  bool first_line = true;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    const bool last = end == std::string::npos;
    if (last) end = text.size();
    const std::string line = text.substr(start, end - start);
    if ((first_line ? first : true) && (blank || !line.empty())) out += pad;
    out += line;
    check_string_size(out.size());
    if (last) break;
    out += '\n';
    start = end + 1;
    first_line = false;
  }
  return out;
}

}  // namespace

bool is_known_filter(const std::string& name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool is_known_test(const std::string& name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args) {
  static const Value absent, empty_string{std::string()};
  if (name == "length" || name == "count") return Value(length_of(input));
  if (name == "tojson") {
    const int64_t indent = int_argument(args, 0, "indent", -1, "tojson");
    check(indent <= 64, "tojson: indent {} is too large", indent);
    static const Value no(false);
    return Value(to_json(input, int(indent), argument(args, 99, "sort_keys", no).truthy()));
  }
  if (name == "string") return Value(to_str(input));
  if (name == "safe") return input;
  if (name == "e" || name == "escape") return Value(escape_html(to_str(input)));
  if (name == "trim" || name == "upper" || name == "lower" || name == "capitalize" ||
      name == "title" || name == "replace") {
    const std::string method = name == "trim" ? "strip" : name;
    return bound_method(Value(to_str(input)), method).call(args);
  }
  if (name == "default" || name == "d") {
    static const Value no(false);
    const bool boolean = argument(args, 1, "boolean", no).truthy();
    const bool use_default = input.is_undefined() || (boolean && !input.truthy());
    return use_default ? argument(args, 0, "default_value", empty_string) : input;
  }
  if (name == "join") {
    const Value& separator = argument(args, 0, "d", empty_string);
    const Value& attribute = argument(args, 1, "attribute", absent);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(input)) {
      if (!first) out += to_str(separator);
      out += to_str(attribute.is_string() ? lookup_path(item, attribute.as_string()) : item);
      first = false;
      check_string_size(out.size());
    }
    return Value(out);
  }
  if (name == "first" || name == "last") {
    const Array items = iterate(input);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::array(iterate(input));
  if (name == "reverse") {
    if (input.is_string()) {
      const std::u32string chars = to_codepoints(input.as_string());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) append_utf8(out, *it);
      return Value(out);
    }
    Array items = iterate(input);
    std::reverse(items.begin(), items.end());
    return Value::array(std::move(items));
  }
  if (name == "int") {
    if (input.is_int()) return input;
    if (input.is_bool()) return Value(int64_t(input.as_bool()));
    if (input.is_number() && std::isfinite(input.as_double()) && std::abs(input.as_double()) < 9e18)
      return Value(int64_t(input.as_double()));
    if (input.is_string()) {
      try {
        size_t used = 0;
        const int64_t parsed = std::stoll(input.as_string(), &used);
        if (used == input.as_string().size()) return Value(parsed);
      } catch (const std::exception&) {
      }
    }
    return argument(args, 0, "default", Value(int64_t(0)));
  }
  if (name == "float") {
    if (input.is_number() || input.is_bool()) return Value(input.as_double());
    if (input.is_string()) {
      try {
        size_t used = 0;
        const double parsed = std::stod(input.as_string(), &used);
        if (used == input.as_string().size()) return Value(parsed);
      } catch (const std::exception&) {
      }
    }
    return argument(args, 0, "default", Value(0.0));
  }
  if (name == "abs") {
    check(input.is_number(), "abs: {} is not a number", input.type_name());
    if (input.is_int()) {
      check(input.as_int() != INT64_MIN, "abs: integer overflow");
      return Value(input.as_int() < 0 ? -input.as_int() : input.as_int());
    }
    return Value(std::abs(input.as_double()));
  }
  if (name == "round") {
    check(input.is_number(), "round: {} is not a number", input.type_name());
    const int64_t precision =
        std::clamp<int64_t>(int_argument(args, 0, "precision", 0, "round"), 0, 15);
    static const Value common("common");
    const std::string method = to_str(argument(args, 1, "method", common));
    check(method == "common" || method == "ceil" || method == "floor",
          "round: method should be 'common', 'ceil' or 'floor'");
    // Python's round() of an integer is the integer; of a float it rounds half to even.
    if (method == "common" && input.is_int()) return input;
    const double scale = std::pow(10.0, double(precision));
    const double x = input.as_double() * scale;
    const double r = method == "ceil"    ? std::ceil(x)
                     : method == "floor" ? std::floor(x)
                                         : std::nearbyint(x);
    return Value(r / scale);
  }
  if (name == "sort") return sort_filter(input, args);
  if (name == "unique") {
    // Scalars by a key (Python's 1 == 1.0 == True share one); lists and dicts compared pairwise,
    // few enough that the quadratic walk stays short.
    Array out, compound;
    std::unordered_set<std::string> seen;
    for (const Value& item : iterate(input)) {
      if (item.is_array() || item.is_object()) {
        check(compound.size() < 4096, "unique: more than 4096 lists or dicts");
        bool found = false;
        for (const Value& kept : compound) found = found || equals(kept, item);
        if (!found) {
          compound.push_back(item);
          out.push_back(item);
        }
        continue;
      }
      const std::string key = item.is_string() ? "s" + item.as_string()
                              : item.is_number() || item.is_bool()
                                  ? fmt::format("n{}", item.as_double())
                                  : "k" + item.type_name();
      if (seen.insert(key).second) out.push_back(item);
    }
    return Value::array(std::move(out));
  }
  if (name == "items" || name == "dictsort") {
    if (input.is_undefined()) return Value::array();
    check(input.is_object(), "{}: {} is not a dict", name, input.type_name());
    Value items = bound_method(input, "items").call({});
    if (name == "dictsort") return sort_filter(items, {});
    return items;
  }
  if (name == "selectattr" || name == "rejectattr")
    return filter_by_test(input, args, true, name == "selectattr");
  if (name == "select" || name == "reject")
    return filter_by_test(input, args, false, name == "select");
  if (name == "map") return map_filter(input, args);
  if (name == "attr") {
    check(!args.positional.empty() && args.positional[0].is_string(), "attr needs a name");
    return lookup_path(input, args.positional[0].as_string());
  }
  if (name == "min" || name == "max") {
    const Array items = iterate(input);
    if (items.empty()) return Value();
    Value best = items[0];
    for (const Value& item : items)
      if (name == "min" ? less(item, best) : less(best, item)) best = item;
    return best;
  }
  if (name == "sum") {
    Value total = argument(args, 1, "start", Value(int64_t(0)));
    for (const Value& item : iterate(input)) {
      check(item.is_number() && total.is_number(), "sum: {} is not a number", item.type_name());
      total = item.is_int() && total.is_int() ? Value(total.as_int() + item.as_int())
                                              : Value(total.as_double() + item.as_double());
    }
    return total;
  }
  if (name == "indent") return Value(indent_filter(to_str(input), args));
  if (name == "wordcount")
    return Value(int64_t(iterate(bound_method(Value(to_str(input)), "split").call({})).size()));
  fail("unknown filter '{}'", name);
}

bool apply_test(const std::string& name, const Value& input, const CallArgs& args) {
  static const Value absent;
  const Value& other = argument(args, 0, "value", absent);
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.is_none();
  if (name == "string") return input.is_string();
  if (name == "number") return input.is_number();
  if (name == "integer") return input.is_int();
  if (name == "float") return input.kind() == Value::Kind::Float;
  if (name == "boolean") return input.is_bool();
  if (name == "true") return input.is_bool() && input.as_bool();
  if (name == "false") return input.is_bool() && !input.as_bool();
  if (name == "mapping") return input.is_object();
  if (name == "iterable") return input.is_array() || input.is_object() || input.is_string();
  if (name == "sequence") return input.is_array() || input.is_object() || input.is_string();
  if (name == "callable") return input.is_function();
  if (name == "eq" || name == "equalto" || name == "==") return equals(input, other);
  if (name == "ne" || name == "!=") return !equals(input, other);
  if (name == "lt" || name == "<") return less(input, other);
  if (name == "le" || name == "<=") return !less(other, input);
  if (name == "gt" || name == ">") return less(other, input);
  if (name == "ge" || name == ">=") return !less(input, other);
  if (name == "sameas") return equals(input, other) && input.kind() == other.kind();
  if (name == "lower" || name == "upper") {
    if (!input.is_string()) return false;
    for (char c : input.as_string())
      if (name == "lower" ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z')) return false;
    return true;
  }
  if (name == "in") {
    if (other.is_string()) {
      check(input.is_string(), "'in <string>' needs a string on the left, not {}",
            input.type_name());
      return other.as_string().find(input.as_string()) != std::string::npos;
    }
    for (const Value& item : iterate(other))
      if (equals(item, input)) return true;
    return false;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    check(input.is_int(), "the {} test needs an integer, not {}", name, input.type_name());
    if (name == "divisibleby") {
      check(other.is_int() && other.as_int() != 0, "divisibleby needs a non-zero integer");
      return other.as_int() == -1 || input.as_int() % other.as_int() == 0;
    }
    return (input.as_int() % 2 != 0) == (name == "odd");
  }
  fail("unknown test '{}'", name);
}

}  // namespace mmgen::tokenizers::jinja
