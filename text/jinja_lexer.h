// Splits a Jinja template into tokens: literal text, the `{{ }}` and `{% %}` delimiters, and the
// names, literals and operators between them. Comments are dropped here, and whitespace control
// is applied here, as Jinja's own lexer does: `{%-`/`-%}` strip the whitespace beside a tag, and
// transformers renders chat templates with trim_blocks (the newline after a block tag goes) and
// lstrip_blocks (spaces before a block tag at the start of a line go), so those are on too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mmgen::tokenizers::jinja {

struct Token {
  enum class Kind {
    Text,        // literal template text
    PrintBegin,  // {{
    PrintEnd,    // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,
    String,  // text holds the decoded string
    Int,
    Float,
    Operator,  // text holds it: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { }
    End,
  };
  Kind kind;
  std::string text;
  int line;  // 1-based, where the token starts
  int64_t int_value = 0;
  double float_value = 0;
};

// `origin` names the template (its file) in error messages: "<origin>:<line>: ...".
std::vector<Token> tokenize(std::string_view source, const std::string& origin);

}  // namespace mmgen::tokenizers::jinja
