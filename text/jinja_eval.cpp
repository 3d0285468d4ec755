#include "text/jinja_eval.h"

#include <fmt/format.h>

#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "core/limits.h"
#include "text/jinja_builtins.h"
#include "text/jinja_format.h"
#include "text/utf8.h"

namespace mmgen::tokenizers::jinja {
namespace {

// An Error that already names the template and line, passed through unchanged by outer frames
// (a macro's body fails inside the call expression's frame).
class LocatedError : public Error {
 public:
  using Error::Error;
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

class Evaluator {
 public:
  explicit Evaluator(const std::string& origin) : origin_(origin) {}

  std::string run(const Body& body, const Value& context) {
    check(context.is_object(), "chat template: the context should be a dict");
    auto globals = std::make_shared<Scope>();
    for (const auto& [key, value] : context.fields().entries()) globals->vars[key] = value;
    auto root = std::make_shared<Scope>();
    root->parent = globals;
    // A namespace may be made to hold itself (`set ns.me = ns`), a cycle of shared pointers that
    // would never be freed; emptying every namespace of this render when it ends, however it
    // ends, breaks them all.
    struct EmptyNamespaces {
      std::vector<Value>& namespaces;
      ~EmptyNamespaces() {
        for (const Value& ns : namespaces) ns.fields().clear();
        namespaces.clear();
      }
    } empty_namespaces{namespaces_};
    std::string out;
    const Flow flow = exec(body, out, root);
    if (flow != Flow::Normal) error(0, "'break' or 'continue' outside a for loop");
    return out;
  }

 private:
  enum class Flow { Normal, Break, Continue };

  // One step of the budget and one level of depth, for as long as it lives.
  struct Frame {
    Evaluator& evaluator;
    Frame(Evaluator& e, int line) : evaluator(e) {
      if (++evaluator.steps_ > Limits::kMaxTemplateSteps)
        evaluator.error(line, fmt::format("rendering took more than {} steps (an endless loop?)",
                                          Limits::kMaxTemplateSteps));
      if (++evaluator.depth_ > Limits::kMaxTemplateEvalDepth)
        evaluator.error(line, fmt::format("rendering nested deeper than {} levels (endless "
                                          "macro recursion?)",
                                          Limits::kMaxTemplateEvalDepth));
    }
    ~Frame() { --evaluator.depth_; }
  };

  [[noreturn]] void error(int line, const std::string& message) const {
    throw LocatedError(line > 0 ? fmt::format("{}:{}: {}", origin_, line, message)
                                : fmt::format("{}: {}", origin_, message));
  }

  // Runs `action`, giving an unlocated Error (from a filter, test or method) the line.
  template <typename Action>
  auto at_line(int line, Action&& action) -> decltype(action()) {
    try {
      return action();
    } catch (const LocatedError&) {
      throw;
    } catch (const Error& e) {
      error(line, e.what());
    }
  }

  Flow exec(const Body& body, std::string& out, const ScopePtr& scope) {
    for (const auto& stmt : body) {
      const Flow flow = exec(*stmt, out, scope);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  void emit(std::string& out, const std::string& text, int line) {
    out += text;
    if (out.size() > Limits::kMaxTemplateStringBytes)
      error(line,
            fmt::format("the output grew past {} MiB", Limits::kMaxTemplateStringBytes >> 20));
  }

  Flow exec(const Stmt& stmt, std::string& out, const ScopePtr& scope) {
    Frame frame(*this, stmt.line);
    switch (stmt.kind) {
      case Stmt::Kind::Text:
        emit(out, stmt.text, stmt.line);
        return Flow::Normal;
      case Stmt::Kind::Print: {
        const Value value = eval(*stmt.expr, scope);
        emit(out, at_line(stmt.line, [&] { return to_str(value); }), stmt.line);
      }
        return Flow::Normal;
      case Stmt::Kind::If:
        return exec(eval(*stmt.expr, scope).truthy() ? stmt.body : stmt.else_body, out, scope);
      case Stmt::Kind::For:
        return exec_for(stmt, out, scope);
      case Stmt::Kind::Set:
        exec_set(stmt, scope);
        return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        std::string captured;
        const Flow flow = exec(stmt.body, captured, scope);
        scope->vars[stmt.targets[0]] = Value(std::move(captured));
        return flow;
      }
      case Stmt::Kind::Macro:
        scope->vars[stmt.name] = make_macro(stmt, scope);
        return Flow::Normal;
      case Stmt::Kind::Break:
        return Flow::Break;
      case Stmt::Kind::Continue:
        return Flow::Continue;
      case Stmt::Kind::Generation:
        return exec(stmt.body, out, scope);
    }
    return Flow::Normal;
  }

  // Binds a loop's or set's names to `value`: one name takes it whole, several unpack it.
  void bind(Scope& scope, const std::vector<std::string>& names, const Value& value, int line) {
    if (names.size() == 1) {
      scope.vars[names[0]] = value;
      return;
    }
    const Array items = at_line(line, [&] { return iterate(value); });
    if (items.size() != names.size())
      error(line,
            fmt::format("cannot unpack {} value(s) into {} names", items.size(), names.size()));
    for (size_t i = 0; i < names.size(); ++i) scope.vars[names[i]] = items[i];
  }

  Flow exec_for(const Stmt& stmt, std::string& out, const ScopePtr& scope) {
    const Value iterable = eval(*stmt.expr, scope);
    if (!iterable.is_undefined() && !iterable.is_array() && !iterable.is_object() &&
        !iterable.is_string())
      error(stmt.line, fmt::format("cannot loop over a {}", iterable.type_name()));
    Array items = at_line(stmt.line, [&] { return iterate(iterable); });
    if (stmt.condition) {  // `for x in xs if cond`: filtered before loop.length is known
      Array kept;
      for (const Value& item : items) {
        Frame frame(*this, stmt.line);
        auto test_scope = std::make_shared<Scope>();
        test_scope->parent = scope;
        bind(*test_scope, stmt.targets, item, stmt.line);
        if (eval(*stmt.condition, test_scope).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(stmt.else_body, out, scope);
    const int64_t length = int64_t(items.size());
    for (int64_t i = 0; i < length; ++i) {
      Frame frame(*this, stmt.line);
      auto body_scope = std::make_shared<Scope>();
      body_scope->parent = scope;
      bind(*body_scope, stmt.targets, items[size_t(i)], stmt.line);
      if (stmt.uses_loop) body_scope->vars["loop"] = loop_variable(items, i);
      if (exec(stmt.body, out, body_scope) == Flow::Break) break;
    }
    return Flow::Normal;
  }

  static Value loop_variable(const Array& items, int64_t i) {
    const int64_t length = int64_t(items.size());
    Value loop = Value::object();
    Object& fields = loop.fields();
    fields.set("index0", Value(i));
    fields.set("index", Value(i + 1));
    fields.set("revindex0", Value(length - 1 - i));
    fields.set("revindex", Value(length - i));
    fields.set("first", Value(i == 0));
    fields.set("last", Value(i == length - 1));
    fields.set("length", Value(length));
    fields.set("previtem", i > 0 ? items[size_t(i - 1)] : Value());
    fields.set("nextitem", i + 1 < length ? items[size_t(i + 1)] : Value());
    fields.set("cycle", Value::function("cycle", [i](const CallArgs& args) {
                 check(!args.positional.empty(), "loop.cycle() needs at least one value");
                 return args.positional[size_t(i) % args.positional.size()];
               }));
    return loop;
  }

  void exec_set(const Stmt& stmt, const ScopePtr& scope) {
    const Value value = eval(*stmt.expr, scope);
    if (stmt.attribute.empty()) {
      bind(*scope, stmt.targets, value, stmt.line);
      return;
    }
    const Value target = lookup(stmt.targets[0], scope);
    if (!target.is_namespace())
      error(stmt.line,
            fmt::format("cannot set '{}.{}': '{}' is a {}, not a namespace()", stmt.targets[0],
                        stmt.attribute, stmt.targets[0], target.type_name()));
    target.fields().set(stmt.attribute, value);
  }

  // The macro holds its defining scope weakly: the scope holds the macro, and a strong
  // reference both ways would never be freed.
  Value make_macro(const Stmt& stmt, const ScopePtr& scope) {
    std::weak_ptr<Scope> defined_in = scope;
    const Stmt* macro = &stmt;
    return Value::function(stmt.name, [this, macro, defined_in](const CallArgs& args) {
      ScopePtr parent = defined_in.lock();
      if (!parent) error(macro->line, "macro '" + macro->name + "' is called outside its scope");
      auto call_scope = std::make_shared<Scope>();
      call_scope->parent = parent;
      if (args.positional.size() > macro->params.size())
        error(macro->line, fmt::format("macro '{}' takes {} argument(s), {} given", macro->name,
                                       macro->params.size(), args.positional.size()));
      for (const auto& [key, value] : args.keyword) {
        bool known = false;
        for (const auto& param : macro->params) known = known || param.first == key;
        if (!known)
          error(macro->line, fmt::format("macro '{}' has no parameter '{}'", macro->name, key));
      }
      for (size_t i = 0; i < macro->params.size(); ++i) {
        const auto& [param, fallback] = macro->params[i];
        Value value;
        if (i < args.positional.size()) {
          value = args.positional[i];
        } else {
          bool given = false;
          for (const auto& [key, keyword_value] : args.keyword)
            if (key == param) value = keyword_value, given = true;
          if (!given && fallback) value = eval(*fallback, call_scope);
        }
        call_scope->vars[param] = value;
      }
      std::string out;
      exec(macro->body, out, call_scope);
      return Value(std::move(out));
    });
  }

  Value lookup(const std::string& name, const ScopePtr& scope) {
    for (const Scope* s = scope.get(); s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return it->second;
    }
    if (name == "namespace") {
      return Value::function(name, [this](const CallArgs& args) {
        Value ns = global_function("namespace").call(args);
        namespaces_.push_back(ns);
        return ns;
      });
    }
    return global_function(name);
  }

  CallArgs eval_args(const Expr& expr, const ScopePtr& scope) {
    CallArgs args;
    for (const auto& item : expr.items) args.positional.push_back(eval(*item, scope));
    for (const auto& [key, value] : expr.keywords)
      args.keyword.emplace_back(key, eval(*value, scope));
    return args;
  }

  // `object.name`: as Jinja, a method first, then a dict's key.
  Value attribute(const Value& object, const std::string& name, int line) {
    if (object.is_undefined())
      error(line, fmt::format("cannot read '.{}' of an undefined value", name));
    Value method = bound_method(object, name);
    if (method.is_function()) return method;
    if (object.is_object()) {
      const Value* found = object.fields().find(name);
      if (found) return *found;
    }
    return Value();
  }

  // `object[key]`: a list's item (negative counts from the end), a dict's key, a string's
  // character; undefined when absent, as in Jinja.
  Value item(const Value& object, const Value& key, int line) {
    if (object.is_undefined()) error(line, "cannot index an undefined value");
    if (object.is_object()) {
      if (!key.is_string()) return Value();
      const Value* found = object.fields().find(key.as_string());
      return found ? *found : bound_method(object, key.as_string());
    }
    if (object.is_array() || object.is_string()) {
      if (key.is_string() && object.is_string()) return bound_method(object, key.as_string());
      if (!key.is_int()) {
        if (key.is_bool()) return item(object, Value(int64_t(key.as_bool())), line);
        error(line, fmt::format("indices must be integers, not {}", key.type_name()));
      }
      const Array items = object.is_array() ? Array() : iterate(object);
      const Array& seq = object.is_array() ? object.items() : items;
      int64_t index = key.as_int();
      if (index < 0) index += int64_t(seq.size());
      if (index < 0 || index >= int64_t(seq.size())) return Value();
      return seq[size_t(index)];
    }
    return Value();
  }

  // Python's slice semantics, on lists and strings (by code point).
  Value slice(const Value& object, const Expr& expr, const ScopePtr& scope) {
    if (!object.is_array() && !object.is_string())
      error(expr.line, fmt::format("cannot slice a {}", object.type_name()));
    int64_t parts[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int i = 0; i < 3; ++i) {
      if (!expr.items[size_t(i)]) continue;
      const Value v = eval(*expr.items[size_t(i)], scope);
      if (v.is_none()) continue;
      if (!v.is_int()) error(expr.line, "slice indices must be integers");
      parts[i] = v.as_int();
      given[i] = true;
    }
    const int64_t step = parts[2];
    if (step == 0) error(expr.line, "slice step cannot be zero");
    const Array chars = object.is_string() ? iterate(object) : Array();
    const Array& seq = object.is_array() ? object.items() : chars;
    const int64_t n = int64_t(seq.size());
    auto clamp_index = [&](int64_t v, bool is_given, int64_t fallback) {
      if (!is_given) return fallback;
      if (v < 0) v += n;
      if (step > 0) return std::clamp<int64_t>(v, 0, n);
      return std::clamp<int64_t>(v, -1, n - 1);
    };
    const int64_t start = clamp_index(parts[0], given[0], step > 0 ? 0 : n - 1);
    const int64_t stop = clamp_index(parts[1], given[1], step > 0 ? n : -1);
    Array out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      out.push_back(seq[size_t(i)]);
      if (__builtin_add_overflow(i, step, &i)) break;  // a huge step leaves the range at once
    }
    if (object.is_array()) return Value::array(std::move(out));
    std::string text;
    for (const Value& c : out) text += c.as_string();
    return Value(std::move(text));
  }

  Value arithmetic(const std::string& op, const Value& a, const Value& b, int line) {
    auto unsupported = [&]() -> Value {
      error(line, fmt::format("unsupported operand types for {}: '{}' and '{}'", op, a.type_name(),
                              b.type_name()));
    };
    const bool numbers = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
    const bool ints =
        numbers && !(a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float);
    auto int_of = [](const Value& v) { return v.is_int() ? v.as_int() : int64_t(v.as_bool()); };
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        check_size(a.as_string().size() + b.as_string().size(), line);
        return Value(a.as_string() + b.as_string());
      }
      if (a.is_array() && b.is_array()) {
        at_line(line, [&] { check_list_size(a.items().size() + b.items().size()); });
        Array joined = a.items();
        joined.insert(joined.end(), b.items().begin(), b.items().end());
        return Value::array(std::move(joined));
      }
    }
    if (op == "*") {
      const Value* repeated = a.is_string() || a.is_array() ? &a : &b;
      const Value* count = repeated == &a ? &b : &a;
      if ((repeated->is_string() || repeated->is_array()) &&
          (count->is_int() || count->is_bool())) {
        const int64_t times = std::max<int64_t>(int_of(*count), 0);
        const size_t unit =
            repeated->is_string() ? repeated->as_string().size() : repeated->items().size();
        if (unit != 0 && uint64_t(times) > (repeated->is_string() ? Limits::kMaxTemplateStringBytes
                                                                  : Limits::kMaxTemplateListItems) /
                                               unit)
          error(line, "a repeated string or list would be too large");
        if (repeated->is_string()) {
          std::string out;
          out.reserve(unit * size_t(times));
          for (int64_t i = 0; i < times; ++i) out += repeated->as_string();
          return Value(std::move(out));
        }
        Array out;
        for (int64_t i = 0; i < times; ++i)
          out.insert(out.end(), repeated->items().begin(), repeated->items().end());
        return Value::array(std::move(out));
      }
    }
    if (!numbers) return unsupported();
    if (op == "/") {
      if (b.as_double() == 0) error(line, "division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (ints) {
      const int64_t x = int_of(a), y = int_of(b);
      int64_t r = 0;
      bool overflow = false;
      if (op == "+") {
        overflow = __builtin_add_overflow(x, y, &r);
      } else if (op == "-") {
        overflow = __builtin_sub_overflow(x, y, &r);
      } else if (op == "*") {
        overflow = __builtin_mul_overflow(x, y, &r);
      } else if (op == "//" || op == "%") {
        if (y == 0) error(line, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) error(line, "integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors
          --q;
          m += y;
        }
        r = op == "//" ? q : m;
      } else if (op == "**") {
        if (y < 0) return Value(std::pow(double(x), double(y)));
        r = 1;
        for (int64_t i = 0; i < y && !overflow; ++i) {
          overflow = __builtin_mul_overflow(r, x, &r);
          if (r == 0 || r == 1) break;
        }
        if (x == -1) r = (y % 2) ? -1 : 1;
      }
      if (overflow) error(line, fmt::format("integer overflow in {}", op));
      return Value(r);
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0) error(line, "float division or modulo by zero");
    if (op == "//") return Value(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }

  // A list a function or filter made costs a step per item, so that range(1000000) in a loop
  // runs out of budget as quickly as the loop would.
  Value charged(Value value, int line) {
    charge(value, line);
    return value;
  }

  // A list costs a step per item and a string one per 256 bytes: the work of a function, filter
  // or test is linear in what it is given and returns, so charging both bounds a render's time
  // (a million-item list handed to `|last` in a loop, a long string rebuilt in one) and the bytes
  // it builds.
  void charge(const Value& value, int line) {
    if (value.is_array()) steps_ += int64_t(value.items().size());
    if (value.is_object()) steps_ += int64_t(value.fields().size());
    if (value.is_string()) steps_ += int64_t(value.as_string().size() / 256);
    if (steps_ > Limits::kMaxTemplateSteps)
      error(line, fmt::format("rendering took more than {} steps (an endless loop?)",
                              Limits::kMaxTemplateSteps));
  }

  void charge(const CallArgs& args, int line) {
    for (const Value& value : args.positional) charge(value, line);
    for (const auto& keyword : args.keyword) charge(keyword.second, line);
  }

  void check_size(size_t bytes, int line) {
    at_line(line, [&] { check_string_size(bytes); });
  }

  Value eval_binary(const Expr& expr, const ScopePtr& scope) {
    const std::string& op = expr.name;
    const Value a = eval(*expr.items[0], scope);
    if (op == "and") return a.truthy() ? eval(*expr.items[1], scope) : a;
    if (op == "or") return a.truthy() ? a : eval(*expr.items[1], scope);
    const Value b = eval(*expr.items[1], scope);
    if (op == "==" || op == "!=")
      return Value(at_line(expr.line, [&] { return equals(a, b); }) == (op == "=="));
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      return at_line(expr.line, [&] {
        if (op == "<") return Value(less(a, b));
        if (op == ">") return Value(less(b, a));
        if (op == "<=") return Value(!less(b, a));
        return Value(!less(a, b));
      });
    }
    if (op == "in" || op == "not in") {
      charge(b, expr.line);
      CallArgs args;
      args.positional.push_back(b);
      const bool found = at_line(expr.line, [&] { return apply_test("in", a, args); });
      return Value(op == "in" ? found : !found);
    }
    if (op == "~") {
      std::string text = at_line(expr.line, [&] { return to_str(a) + to_str(b); });
      check_size(text.size(), expr.line);
      return charged(Value(std::move(text)), expr.line);
    }
    if (a.is_undefined() || b.is_undefined())
      error(expr.line, fmt::format("'{}' on an undefined value", op));
    return charged(arithmetic(op, a, b, expr.line), expr.line);
  }

  Value eval_call(const Expr& expr, const ScopePtr& scope) {
    Value callee;
    if (expr.object->kind == Expr::Kind::Attribute) {
      const Value receiver = eval(*expr.object->object, scope);
      charge(receiver, expr.line);  // a method walks its string or dict
      callee = attribute(receiver, expr.object->name, expr.line);
      if (!callee.is_function())
        error(expr.line, fmt::format("{} has no method '{}' (mmgen implements the str and dict "
                                     "methods chat templates use)",
                                     receiver.type_name(), expr.object->name));
    } else {
      callee = eval(*expr.object, scope);
      if (!callee.is_function()) {
        const std::string what = expr.object->kind == Expr::Kind::Name
                                     ? "'" + expr.object->name + "'"
                                     : "a " + callee.type_name();
        error(expr.line, fmt::format("{} is not a function mmgen knows", what));
      }
    }
    const CallArgs args = eval_args(expr, scope);
    charge(args, expr.line);
    return charged(at_line(expr.line, [&] { return callee.call(args); }), expr.line);
  }

  Value eval(const Expr& expr, const ScopePtr& scope) {
    Frame frame(*this, expr.line);
    switch (expr.kind) {
      case Expr::Kind::Literal:
        return expr.value;
      case Expr::Kind::Name:
        return lookup(expr.name, scope);
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        Array items;
        for (const auto& item : expr.items) items.push_back(eval(*item, scope));
        if (expr.kind == Expr::Kind::Tuple) return Value::tuple(std::move(items));
        return Value::array(std::move(items));
      }
      case Expr::Kind::Dict: {
        Value dict = Value::object();
        for (size_t i = 0; i < expr.items.size(); ++i) {
          const Value key = eval(*expr.items[i], scope);
          if (!key.is_string())
            error(expr.line,
                  fmt::format("dict keys must be strings here, not {}", key.type_name()));
          dict.fields().set(key.as_string(), eval(*expr.values[i], scope));
        }
        return dict;
      }
      case Expr::Kind::Attribute:
        return attribute(eval(*expr.object, scope), expr.name, expr.line);
      case Expr::Kind::Index:
        return item(eval(*expr.object, scope), eval(*expr.items[0], scope), expr.line);
      case Expr::Kind::Slice:
        return slice(eval(*expr.object, scope), expr, scope);
      case Expr::Kind::Call:
        return eval_call(expr, scope);
      case Expr::Kind::Filter: {
        const Value input = eval(*expr.object, scope);
        const CallArgs args = eval_args(expr, scope);
        // These look at their input without walking it (real templates take `messages|length`
        // once per message).
        if (expr.name != "length" && expr.name != "count" && expr.name != "default" &&
            expr.name != "d" && expr.name != "safe")
          charge(input, expr.line);
        charge(args, expr.line);
        return charged(at_line(expr.line, [&] { return apply_filter(expr.name, input, args); }),
                       expr.line);
      }
      case Expr::Kind::Test: {
        const Value input = eval(*expr.object, scope);
        const CallArgs args = eval_args(expr, scope);
        charge(args, expr.line);
        const bool result = at_line(expr.line, [&] { return apply_test(expr.name, input, args); });
        return Value(result != expr.negated);
      }
      case Expr::Kind::Not:
        return Value(!eval(*expr.object, scope).truthy());
      case Expr::Kind::Negate: {
        const Value v = eval(*expr.object, scope);
        if (v.is_int() && v.as_int() != INT64_MIN) return Value(-v.as_int());
        if (v.is_bool()) return Value(-int64_t(v.as_bool()));
        if (v.kind() == Value::Kind::Float) return Value(-v.as_double());
        error(expr.line, fmt::format("bad operand type for unary -: '{}'", v.type_name()));
      }
      case Expr::Kind::Binary:
        return eval_binary(expr, scope);
      case Expr::Kind::Conditional:
        if (eval(*expr.items[1], scope).truthy()) return eval(*expr.items[0], scope);
        return expr.items[2] ? eval(*expr.items[2], scope) : Value();
    }
    return Value();
  }

  std::string origin_;
  int64_t steps_ = 0;
  std::vector<Value> namespaces_;  // every namespace() this render made
  int depth_ = 0;
};

}  // namespace

std::string render_body(const Body& body, const Value& context, const std::string& origin) {
  return Evaluator(origin).run(body, context);
}

}  // namespace mmgen::tokenizers::jinja
