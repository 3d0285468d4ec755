// Parses a chat template's tokens into its syntax tree: the statements real chat templates use
// (if/elif/else, for with else and an inline filter, set and namespace attributes, block set,
// macro, break, continue, transformers' generation block) and Jinja's expression grammar. A
// construct outside that subset is refused in one line naming it and its line.
#pragma once

#include <string>
#include <string_view>

#include "text/jinja_ast.h"

namespace mmgen::tokenizers::jinja {

// `origin` names the template (its file) in error messages.
Body parse_template(std::string_view source, const std::string& origin);

}  // namespace mmgen::tokenizers::jinja
