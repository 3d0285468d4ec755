// Renders a parsed template's statements over a context of variables: Jinja's scoping (a for
// loop's body has its own scope, an if does not; namespaces carry values out of loops), the
// `loop` variable, macros, and the budgets of jinja_template.h.
#pragma once

#include <string>

#include "text/jinja_ast.h"
#include "text/jinja_value.h"

namespace mmgen::tokenizers::jinja {

std::string render_body(const Body& body, const Value& context, const std::string& origin);

}  // namespace mmgen::tokenizers::jinja
