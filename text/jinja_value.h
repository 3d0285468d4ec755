// The values a chat template computes with: Jinja's (Python's) undefined, none, booleans,
// integers, floats, strings, lists, dicts, namespaces and callables. Lists and dicts are shared
// (Python's reference semantics: `set ns.x = ...` on a namespace is seen by every holder), and
// dicts keep insertion order, since `tojson` must print tools and messages in the caller's order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mmgen::tokenizers::jinja {

class Value;
class Object;
using Array = std::vector<Value>;

// The arguments of a call, as Python passes them.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<Value(const CallArgs&)>;

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, Array, Object, Function };

  Value() = default;  // undefined
  static Value none();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(int64_t(i)) {}
  Value(double f);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value array(Array items = {});
  // A list that prints as Python's tuple: `(a, b)` literals and the pairs of `.items()`.
  static Value tuple(Array items);
  static Value object();
  // A `namespace(...)`: the one kind of object whose attributes `set` may assign.
  static Value namespace_object();
  static Value function(std::string name, Function function);
  // JSON null → none; objects keep their key order.
  static Value from_json(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_namespace() const { return kind_ == Kind::Object && namespace_; }
  bool is_tuple() const { return kind_ == Kind::Array && tuple_; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }
  // Int, Float and Bool as a double (Python's bool is an int).
  double as_double() const;
  const std::string& as_string() const { return *string_; }
  Array& items() const { return *array_; }
  Object& fields() const { return *object_; }
  const std::string& function_name() const { return function_name_; }
  Value call(const CallArgs& args) const { return (*function_)(args); }

  // Python's truth value (undefined is false).
  bool truthy() const;
  // Python's type name, for error messages ("str", "list", "dict", ...).
  std::string type_name() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool bool_ = false;
  bool namespace_ = false;
  bool tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  // Shared, as Python's immutable str: copying a value (a lookup, a list repeated) never copies
  // its text, so memory grows only with strings a template builds.
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<Array> array_;
  std::shared_ptr<Object> object_;
  std::string function_name_;
  std::shared_ptr<Function> function_;
};

// A dict: insertion-ordered, string keys (all that JSON-like chat data has).
class Object {
 public:
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  void clear() {
    entries_.clear();
    index_.clear();
  }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace mmgen::tokenizers::jinja
