// The syntax tree of a parsed template. Every node keeps its line, so that an error while
// rendering names the place in the template file.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja_value.h"

namespace mmgen::tokenizers::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,      // value
    Name,         // name
    List,         // items
    Tuple,        // items, as a list that prints as a tuple
    Dict,         // keyed: key expression in `items`, value in `values`
    Attribute,    // object.name
    Index,        // object[items[0]]
    Slice,        // object[items[0]:items[1]:items[2]], absent parts null
    Call,         // object(items..., keywords...)
    Filter,       // object | name(items..., keywords...)
    Test,         // object is [not] name(items...); negated
    Not,          // not object
    Negate,       // -object
    Binary,       // items[0] name items[1]; name is the operator, "and"/"or"/"in"/"not in" included
    Conditional,  // items[0] if items[1] else items[2] (items[2] null without else)
  };
  Kind kind;
  int line;
  std::string name;
  Value value;
  ExprPtr object;
  std::vector<ExprPtr> items;
  std::vector<ExprPtr> values;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  bool negated = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    Text,      // text
    Print,     // {{ expr }}
    If,        // if expr: body, else (elif is a nested If in else_body)
    For,       // for targets in expr [if condition]: body, else_body when nothing was iterated
    Set,       // set targets = expr; a namespace attribute when attribute is non-empty
    SetBlock,  // set targets[0] %}body{% endset
    Macro,     // macro name(params with defaults): body
    Break,
    Continue,
    Generation,  // transformers' {% generation %}body{% endgeneration %}: renders the body
  };
  Kind kind;
  int line;
  std::string text;
  std::string name;       // Macro's name
  std::string attribute;  // Set: `set ns.attribute = ...`
  ExprPtr expr;
  ExprPtr condition;  // For's inline filter
  std::vector<std::string> targets;
  bool uses_loop = false;  // For: the body reads `loop`, so it is built for each iteration
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro: name, default (or null)
  Body body;
  Body else_body;
};

}  // namespace mmgen::tokenizers::jinja
