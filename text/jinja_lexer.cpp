#include "text/jinja_lexer.h"

#include <cctype>
#include <cstring>

#include "core/error.h"
#include "text/utf8.h"

namespace mmgen::tokenizers::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// Jinja reads the source with every \r\n and \r as \n, and drops one trailing newline
// (keep_trailing_newline=False, as transformers leaves it).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& origin)
      : src_(normalize_newlines(source)), origin_(origin) {}

  std::vector<Token> run() {
    std::string text;
    int text_line = line_;
    bool text_at_line_start = true;  // the text follows the template start or a newline
    while (pos_ < src_.size()) {
      const size_t open = next_tag(pos_);
      if (open == std::string::npos) {
        text += advance_to(src_.size());
        break;
      }
      text += advance_to(open);
      const char kind = src_[open + 1];
      const int tag_line = line_;
      pos_ = open + 2;
      char sign = 0;
      if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) sign = src_[pos_++];
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind != '{' && sign != '+') {
        lstrip_block(text, text_at_line_start);
      }
      if (!text.empty()) out_.push_back({Token::Kind::Text, std::move(text), text_line});
      text.clear();
      if (kind == '#') {
        skip_comment(tag_line);
      } else {
        out_.push_back({kind == '{' ? Token::Kind::PrintBegin : Token::Kind::BlockBegin,
                        kind == '{' ? "{{" : "{%", tag_line});
        lex_tag(kind == '{' ? '}' : '%', tag_line);
      }
      text_line = line_;
      text_at_line_start = ended_with_newline_;
    }
    if (!text.empty()) out_.push_back({Token::Kind::Text, std::move(text), text_line});
    out_.push_back({Token::Kind::End, "", line_});
    return std::move(out_);
  }

 private:
  [[noreturn]] void error(int line, const std::string& message) const {
    fail("{}:{}: {}", origin_, line, message);
  }

  size_t next_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && std::strchr("{%#", src_[i + 1])) return i;
    return std::string::npos;
  }

  std::string advance_to(size_t end) {
    std::string piece = src_.substr(pos_, end - pos_);
    for (char c : piece) line_ += c == '\n';
    pos_ = end;
    return piece;
  }

  // lstrip_blocks: spaces and tabs between a line's start and a block tag go.
  static void lstrip_block(std::string& text, bool at_line_start) {
    const size_t newline = text.rfind('\n');
    if (newline == std::string::npos && !at_line_start) return;
    const size_t start = newline == std::string::npos ? 0 : newline + 1;
    for (size_t i = start; i < text.size(); ++i)
      if (text[i] != ' ' && text[i] != '\t') return;
    text.erase(start);
  }

  // After a tag's closing delimiter: `-` strips all whitespace, trim_blocks one newline (block
  // tags and comments, not `}}`), `+` keeps it.
  void after_close(char sign, bool trim) {
    ended_with_newline_ = false;
    if (sign == '-') {
      while (pos_ < src_.size() && is_space(src_[pos_])) {
        ended_with_newline_ = src_[pos_] == '\n';
        line_ += src_[pos_++] == '\n';
      }
    } else if (trim && sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
      ended_with_newline_ = true;
    }
  }

  void skip_comment(int tag_line) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) error(tag_line, "unterminated comment '{#' (no '#}')");
    const char sign =
        close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    advance_to(close);
    pos_ += 2;
    after_close(sign, /*trim=*/true);
  }

  // The tokens of one `{{ ... }}` or `{% ... %}` up to and including its closing delimiter.
  void lex_tag(char closer, int tag_line) {
    const bool print = closer == '}';
    // `}}` inside a dict literal ({{ {'a': {'b': 1}} }}) closes the dict, not the tag, as in Jinja.
    int braces = 0;
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size())
        error(tag_line, print ? "unterminated '{{' (no '}}')" : "unterminated '{%' (no '%}')");
      char sign = 0;
      size_t at = pos_;
      if ((src_[at] == '-' || src_[at] == '+') && at + 1 < src_.size() && src_[at + 1] == closer)
        sign = src_[at++];
      if (braces == 0 && src_[at] == closer && at + 1 < src_.size() && src_[at + 1] == '}') {
        out_.push_back(
            {print ? Token::Kind::PrintEnd : Token::Kind::BlockEnd, print ? "}}" : "%}", line_});
        pos_ = at + 2;
        after_close(sign, /*trim=*/!print);
        return;
      }
      lex_one();
      const Token& last = out_.back();
      if (last.kind == Token::Kind::Operator && last.text == "{") ++braces;
      if (last.kind == Token::Kind::Operator && last.text == "}" && braces > 0) --braces;
    }
  }

  void lex_one() {
    const char c = src_[pos_];
    const int line = line_;
    if (is_name_start(c)) {
      const size_t start = pos_;
      while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
      out_.push_back({Token::Kind::Name, src_.substr(start, pos_ - start), line});
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number();
    } else if (c == '\'' || c == '"') {
      lex_string();
    } else {
      static const char* const kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
      for (const char* op : kTwo) {
        if (src_.compare(pos_, 2, op) == 0) {
          out_.push_back({Token::Kind::Operator, op, line});
          pos_ += 2;
          return;
        }
      }
      if (!std::strchr("+-*/%~<>=.,:|()[]{}", c) || c == 0)
        error(line, "unexpected character '" + std::string(1, c) + "' in a tag");
      out_.push_back({Token::Kind::Operator, std::string(1, c), line});
      ++pos_;
    }
  }

  void lex_number() {
    const size_t start = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (pos_ < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
        ++pos_;
    };
    digits();
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        pos_ = p;
        digits();
      }
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i)
      if (src_[i] != '_') text += src_[i];
    Token token{is_float ? Token::Kind::Float : Token::Kind::Int, text, line_};
    try {
      if (is_float)
        token.float_value = std::stod(text);
      else
        token.int_value = std::stoll(text);
    } catch (const std::exception&) {
      error(line_, "number '" + text + "' is out of range");
    }
    out_.push_back(std::move(token));
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Python's string literal escapes; an unknown one stays as written, as in Python.
  void lex_string() {
    const char quote = src_[pos_++];
    const int line = line_;
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) error(line, "unterminated string literal");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (pos_ >= src_.size()) error(line, "unterminated string literal");
      const char e = src_[pos_++];
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '0':
          value += '\0';
          break;
        case '\\':
        case '\'':
        case '"':
          value += e;
          break;
        case '\n':
          ++line_;  // a line continuation
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t count = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t code = 0;
          for (size_t i = 0; i < count; ++i) {
            const int digit = pos_ + i < src_.size() ? hex_value(src_[pos_ + i]) : -1;
            if (digit < 0) error(line, std::string("bad \\") + e + " escape in a string literal");
            code = code * 16 + char32_t(digit);
          }
          if (code > 0x10FFFF) error(line, "bad \\U escape in a string literal");
          pos_ += count;
          append_utf8(value, code);
          break;
        }
        default:
          value += '\\';
          value += e;
      }
    }
    out_.push_back({Token::Kind::String, std::move(value), line});
  }

  std::string src_;
  std::string origin_;
  size_t pos_ = 0;
  int line_ = 1;
  bool ended_with_newline_ = false;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& origin) {
  return Lexer(source, origin).run();
}

}  // namespace mmgen::tokenizers::jinja
