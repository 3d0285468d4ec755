// The methods of str, dict and list that templates call, the global functions, and the
// iteration and size rules shared with the filters. Declared in jinja_builtins.h.
#include <cctype>
#include <cstring>
#include <ctime>

#include "core/error.h"
#include "core/limits.h"
#include "text/jinja_builtins.h"
#include "text/jinja_format.h"
#include "text/utf8.h"

namespace mmgen::tokenizers::jinja {
namespace {

// Python's str.strip() with no argument strips whitespace; ASCII whitespace is what prompts and
// templates put there.
constexpr const char* kWhitespace = " \t\n\r\f\v";

const std::string& string_argument(const CallArgs& args, size_t position, const char* keyword,
                                   const char* method) {
  static const Value absent;
  const Value& value = argument(args, position, keyword, absent);
  check(value.is_string(), "{}() needs a string argument, not {}", method, value.type_name());
  return value.as_string();
}

// The characters of `chars` (code points, not bytes, so multi-byte characters strip whole).
std::vector<std::string> char_set(const Value& chars) {
  std::vector<std::string> set;
  const std::string text = chars.is_string() ? chars.as_string() : kWhitespace;
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    next_codepoint(text, pos);
    set.push_back(text.substr(start, pos - start));
  }
  return set;
}

std::string strip(const std::string& text, const Value& chars, bool left, bool right) {
  check(chars.is_undefined() || chars.is_none() || chars.is_string(),
        "strip() takes a string of characters, not {}", chars.type_name());
  const std::vector<std::string> set = char_set(chars);
  size_t begin = 0, end = text.size();
  for (bool changed = left; changed;) {
    changed = false;
    for (const std::string& c : set)
      if (!c.empty() && begin + c.size() <= end && text.compare(begin, c.size(), c) == 0) {
        begin += c.size();
        changed = true;
      }
  }
  for (bool changed = right; changed;) {
    changed = false;
    for (const std::string& c : set)
      if (!c.empty() && end >= begin + c.size() && text.compare(end - c.size(), c.size(), c) == 0) {
        end -= c.size();
        changed = true;
      }
  }
  return text.substr(begin, end - begin);
}

// Python's str.split(sep=None, maxsplit=-1) and str.rsplit.
Value split(const std::string& text, const CallArgs& args, bool from_right) {
  static const Value absent, minus_one(int64_t(-1));
  const Value& sep = argument(args, 0, "sep", absent);
  const Value& max_value = argument(args, 1, "maxsplit", minus_one);
  check(max_value.is_int(), "split() maxsplit should be an integer");
  int64_t max_split = max_value.as_int();
  std::vector<std::string> parts;
  if (sep.is_undefined() || sep.is_none()) {
    // Runs of whitespace separate; empty pieces are dropped.
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t i = 0; i < text.size();) {
      i = text.find_first_not_of(kWhitespace, i);
      if (i == std::string::npos) break;
      size_t end = text.find_first_of(kWhitespace, i);
      if (end == std::string::npos) end = text.size();
      words.emplace_back(i, end);
      i = end;
    }
    if (max_split < 0 || size_t(max_split) + 1 >= words.size()) {
      for (auto [b, e] : words) parts.push_back(text.substr(b, e - b));
    } else if (!from_right) {
      for (size_t i = 0; i < size_t(max_split); ++i)
        parts.push_back(text.substr(words[i].first, words[i].second - words[i].first));
      parts.push_back(strip(text.substr(words[size_t(max_split)].first), absent, false, true));
    } else {
      const size_t first = words.size() - size_t(max_split);
      parts.push_back(strip(text.substr(0, words[first - 1].second), absent, true, false));
      for (size_t i = first; i < words.size(); ++i)
        parts.push_back(text.substr(words[i].first, words[i].second - words[i].first));
    }
  } else {
    check(sep.is_string(), "split() separator should be a string, not {}", sep.type_name());
    const std::string& s = sep.as_string();
    check(!s.empty(), "split(): empty separator");
    if (!from_right) {
      size_t start = 0;
      for (size_t at; (max_split < 0 || int64_t(parts.size()) < max_split) &&
                      (at = text.find(s, start)) != std::string::npos;
           start = at + s.size())
        parts.push_back(text.substr(start, at - start));
      parts.push_back(text.substr(start));
    } else {
      size_t end = text.size();
      std::vector<std::string> reversed;
      while (max_split < 0 || int64_t(reversed.size()) < max_split) {
        if (end < s.size()) break;
        const size_t at = text.rfind(s, end - s.size());
        if (at == std::string::npos) break;
        reversed.push_back(text.substr(at + s.size(), end - at - s.size()));
        end = at;
      }
      parts.push_back(text.substr(0, end));
      parts.insert(parts.end(), reversed.rbegin(), reversed.rend());
    }
  }
  check_list_size(parts.size());
  Array items;
  for (std::string& part : parts) items.emplace_back(std::move(part));
  return Value::array(std::move(items));
}

std::string replace_all(const std::string& text, const std::string& old_text,
                        const std::string& new_text, int64_t count) {
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  if (old_text.empty()) {  // Python inserts the new text between characters and at both ends
    for (size_t pos = 0; pos <= text.size() && (count < 0 || done < count); ++done) {
      out += new_text;
      check_string_size(out.size());
      if (pos == text.size()) {
        start = pos;
        break;
      }
      const size_t from = pos;
      next_codepoint(text, pos);
      out.append(text, from, pos - from);
      start = pos;
    }
    return out + text.substr(start);
  }
  for (size_t at;
       (count < 0 || done < count) && (at = text.find(old_text, start)) != std::string::npos;
       ++done) {
    out.append(text, start, at - start);
    out += new_text;
    check_string_size(out.size());
    start = at + old_text.size();
  }
  return out + text.substr(start);
}

std::string ascii_case(std::string text, bool upper) {
  for (char& c : text)
    if (upper ? (c >= 'a' && c <= 'z') : (c >= 'A' && c <= 'Z')) c = char(c ^ 0x20);
  return text;
}

Value string_method(const std::string& text, const std::string& name, const CallArgs& args) {
  static const Value absent;
  if (name == "startswith" || name == "endswith") {
    const Value& what = argument(args, 0, "prefix", absent);
    std::vector<std::string> options;
    if (what.is_string())
      options.push_back(what.as_string());
    else if (what.is_array())
      for (const Value& option : what.items()) {
        check(option.is_string(), "{}() takes strings", name);
        options.push_back(option.as_string());
      }
    else
      fail("{}() needs a string argument, not {}", name, what.type_name());
    for (const std::string& option : options) {
      if (option.size() > text.size()) continue;
      if (name == "startswith"
              ? text.compare(0, option.size(), option) == 0
              : text.compare(text.size() - option.size(), option.size(), option) == 0)
        return Value(true);
    }
    return Value(false);
  }
  if (name == "strip") return Value(strip(text, argument(args, 0, "chars", absent), true, true));
  if (name == "lstrip") return Value(strip(text, argument(args, 0, "chars", absent), true, false));
  if (name == "rstrip") return Value(strip(text, argument(args, 0, "chars", absent), false, true));
  if (name == "split") return split(text, args, false);
  if (name == "rsplit") return split(text, args, true);
  if (name == "upper") return Value(ascii_case(text, true));
  if (name == "lower") return Value(ascii_case(text, false));
  if (name == "capitalize" || name == "title") {
    std::string out = ascii_case(text, false);
    bool word_start = true;
    for (char& c : out) {
      if (word_start && c >= 'a' && c <= 'z') c = char(c ^ 0x20);
      word_start = name == "title" ? !std::isalpha(static_cast<unsigned char>(c)) : false;
    }
    return Value(out);
  }
  if (name == "replace") {
    static const Value all(int64_t(-1));
    const Value& count = argument(args, 2, "count", all);
    check(count.is_int(), "replace() count should be an integer");
    return Value(replace_all(text, string_argument(args, 0, "old", "replace"),
                             string_argument(args, 1, "new", "replace"), count.as_int()));
  }
  if (name == "find" || name == "rfind") {
    const std::string& what = string_argument(args, 0, "sub", name.c_str());
    const size_t at = name == "find" ? text.find(what) : text.rfind(what);
    if (at == std::string::npos) return Value(int64_t(-1));
    return Value(int64_t(to_codepoints(std::string_view(text).substr(0, at)).size()));
  }
  if (name == "count") {
    const std::string& what = string_argument(args, 0, "sub", "count");
    if (what.empty()) return Value(int64_t(to_codepoints(text).size()) + 1);
    int64_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos;
         at = text.find(what, at + what.size()))
      ++n;
    return Value(n);
  }
  if (name == "join") {
    std::string out;
    const Array items = iterate(argument(args, 0, "iterable", absent));
    for (size_t i = 0; i < items.size(); ++i) {
      check(items[i].is_string(), "join() takes strings, not {}", items[i].type_name());
      if (i) out += text;
      out += items[i].as_string();
      check_string_size(out.size());
    }
    return Value(out);
  }
  if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum") {
    if (text.empty()) return Value(false);
    for (unsigned char c : text) {
      const bool ok = name == "isspace"   ? std::strchr(kWhitespace, c) != nullptr && c != 0
                      : name == "isdigit" ? std::isdigit(c) != 0
                      : name == "isalpha" ? std::isalpha(c) != 0
                                          : std::isalnum(c) != 0;
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  fail("str has no method '{}' that mmgen implements", name);
}

Value dict_method(const Value& object, const std::string& name, const CallArgs& args) {
  static const Value absent;
  if (name == "items" || name == "keys" || name == "values") {
    Array out;
    for (const auto& [key, value] : object.fields().entries()) {
      if (name == "items")
        out.push_back(Value::tuple({Value(key), value}));
      else
        out.push_back(name == "keys" ? Value(key) : value);
    }
    return Value::array(std::move(out));
  }
  if (name == "get") {
    const Value& key = argument(args, 0, "key", absent);
    check(key.is_string(), "get() takes a string key, not {}", key.type_name());
    const Value* found = object.fields().find(key.as_string());
    if (found) return *found;
    const Value& fallback = argument(args, 1, "default", absent);
    return fallback.is_undefined() ? Value::none() : fallback;
  }
  fail("dict has no method '{}' that mmgen implements", name);
}

bool is_string_method(const std::string& name) {
  static const char* const kNames[] = {"startswith", "endswith", "strip",   "lstrip",  "rstrip",
                                       "split",      "rsplit",   "upper",   "lower",   "title",
                                       "capitalize", "replace",  "find",    "rfind",   "count",
                                       "join",       "isspace",  "isdigit", "isalpha", "isalnum"};
  for (const char* known : kNames)
    if (name == known) return true;
  return false;
}

// strftime_now(format): transformers' helper for templates that print today's date.
Value strftime_now(const CallArgs& args) {
  const std::string& format = string_argument(args, 0, "format", "strftime_now");
  check(format.size() < 256, "strftime_now(): the format is too long");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[1024];
  const size_t written = std::strftime(buffer, sizeof buffer, format.c_str(), &local);
  return Value(std::string(buffer, written));
}

Value range(const CallArgs& args) {
  check(!args.positional.empty() && args.positional.size() <= 3 && args.keyword.empty(),
        "range() takes one to three integers");
  for (const Value& v : args.positional)
    check(v.is_int(), "range() takes integers, not {}", v.type_name());
  int64_t start = 0, stop, step = 1;
  if (args.positional.size() == 1) {
    stop = args.positional[0].as_int();
  } else {
    start = args.positional[0].as_int();
    stop = args.positional[1].as_int();
    if (args.positional.size() == 3) step = args.positional[2].as_int();
  }
  check(step != 0, "range() step must not be zero");
  Array items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    items.emplace_back(i);
    check_list_size(items.size());
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  return Value::array(std::move(items));
}

}  // namespace

void check_string_size(size_t bytes) {
  check(bytes <= Limits::kMaxTemplateStringBytes, "a string grew past {} MiB",
        Limits::kMaxTemplateStringBytes >> 20);
}

void check_list_size(size_t items) {
  check(items <= Limits::kMaxTemplateListItems, "a list grew past {} items",
        Limits::kMaxTemplateListItems);
}

Value bound_method(const Value& object, const std::string& name) {
  if (object.is_string() && is_string_method(name)) {
    // The value, not a copy of its text: a string is shared however long it is.
    return Value::function(name, [object, name](const CallArgs& args) {
      return string_method(object.as_string(), name, args);
    });
  }
  if (object.is_object() && !object.is_namespace() &&
      (name == "items" || name == "keys" || name == "values" || name == "get")) {
    return Value::function(
        name, [object, name](const CallArgs& args) { return dict_method(object, name, args); });
  }
  return Value();
}

Value global_function(const std::string& name) {
  if (name == "range") return Value::function(name, range);
  if (name == "strftime_now") return Value::function(name, strftime_now);
  if (name == "raise_exception") {
    return Value::function(name, [](const CallArgs& args) -> Value {
      static const Value absent;
      const Value& message = argument(args, 0, "message", absent);
      fail("the template raised an error: {}", to_str(message));
    });
  }
  if (name == "namespace" || name == "dict") {
    return Value::function(name, [name](const CallArgs& args) {
      Value object = name == "namespace" ? Value::namespace_object() : Value::object();
      for (const Value& initial : args.positional) {
        check(initial.is_object(), "{}() takes a dict or keyword arguments", name);
        for (const auto& [key, value] : initial.fields().entries()) object.fields().set(key, value);
      }
      for (const auto& [key, value] : args.keyword) object.fields().set(key, value);
      return object;
    });
  }
  return Value();
}

const Value& argument(const CallArgs& args, size_t position, const char* keyword,
                      const Value& fallback) {
  if (position < args.positional.size()) return args.positional[position];
  for (const auto& [key, value] : args.keyword)
    if (key == keyword) return value;
  return fallback;
}

int64_t length_of(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::Undefined:
      return 0;
    case Value::Kind::String:
      return int64_t(to_codepoints(value.as_string()).size());
    case Value::Kind::Array:
      return int64_t(value.items().size());
    case Value::Kind::Object:
      return int64_t(value.fields().size());
    default:
      fail("object of type '{}' has no len()", value.type_name());
  }
}

Array iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::Array:
      return value.items();
    case Value::Kind::Object: {
      Array keys;
      for (const auto& entry : value.fields().entries()) keys.emplace_back(entry.first);
      return keys;
    }
    case Value::Kind::String: {
      Array chars;
      const std::string& text = value.as_string();
      for (size_t pos = 0; pos < text.size();) {
        const size_t start = pos;
        next_codepoint(text, pos);
        chars.emplace_back(text.substr(start, pos - start));
      }
      return chars;
    }
    default:
      fail("'{}' object is not iterable", value.type_name());
  }
}

}  // namespace mmgen::tokenizers::jinja
