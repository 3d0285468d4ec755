// A parsed Jinja template and its renderer: `Template(source, origin).render(context)`. Rendering
// is bounded (evaluation steps, nesting of calls, output and value sizes: core/limits.h), so a
// hostile template ends in an Error rather than a hang, a stack overflow or exhausted memory;
// every error names the template and the line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "text/jinja_ast.h"
#include "text/jinja_value.h"

namespace mmgen::tokenizers::jinja {

class Template {
 public:
  // Parses `source`; throws Error naming `origin` and the line for anything mmgen cannot render
  // (an unknown tag, filter or test) or for a syntax error.
  Template(std::string_view source, std::string origin);

  // The template rendered with the variables of `context` (a dict).
  std::string render(const Value& context) const;
  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  std::shared_ptr<const Body> body_;
};

}  // namespace mmgen::tokenizers::jinja
