#include "text/jinja_value.h"

#include "core/error.h"

namespace mmgen::tokenizers::jinja {

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value::Value(bool b) : kind_(Kind::Bool), bool_(b) {}
Value::Value(int64_t i) : kind_(Kind::Int), int_(i) {}
Value::Value(double f) : kind_(Kind::Float), float_(f) {}
Value::Value(std::string s)
    : kind_(Kind::String), string_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::array(Array items) {
  Value v;
  v.kind_ = Kind::Array;
  v.array_ = std::make_shared<Array>(std::move(items));
  return v;
}

Value Value::tuple(Array items) {
  Value v = array(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::object() {
  Value v;
  v.kind_ = Kind::Object;
  v.object_ = std::make_shared<Object>();
  return v;
}

Value Value::namespace_object() {
  Value v = object();
  v.namespace_ = true;
  return v;
}

Value Value::function(std::string name, Function function) {
  Value v;
  v.kind_ = Kind::Function;
  v.function_name_ = std::move(name);
  v.function_ = std::make_shared<Function>(std::move(function));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      check(u <= uint64_t(INT64_MAX), "chat template input: integer {} is too large", u);
      return Value(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array items;
      for (const auto& item : json) items.push_back(from_json(item));
      return array(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value v = object();
      for (const auto& [key, item] : json.items()) v.fields().set(key, from_json(item));
      return v;
    }
    default:
      fail("chat template input: a JSON value of type {} cannot be passed to a template",
           json.type_name());
  }
}

double Value::as_double() const {
  if (kind_ == Kind::Int) return double(int_);
  if (kind_ == Kind::Bool) return bool_ ? 1.0 : 0.0;
  return float_;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return bool_;
    case Kind::Int:
      return int_ != 0;
    case Kind::Float:
      return float_ != 0;
    case Kind::String:
      return !string_->empty();
    case Kind::Array:
      return !array_->empty();
    case Kind::Object:
      return namespace_ || object_->size() != 0;
    case Kind::Function:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::Array:
      return "list";
    case Kind::Object:
      return namespace_ ? "Namespace" : "dict";
    case Kind::Function:
      return "function";
  }
  return "?";
}

const Value* Object::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Object::set(const std::string& key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(key, std::move(value));
}

}  // namespace mmgen::tokenizers::jinja
