#include "text/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "core/error.h"
#include "core/limits.h"
#include "text/jinja_lexer.h"

namespace mmgen::tokenizers::jinja {
namespace {

using K = Token::Kind;

// Whether `loop` is read anywhere in a body (nested loops included: a conservative answer costs
// only the object's construction).
bool mentions_loop(const Expr* expr) {
  if (!expr) return false;
  if (expr->kind == Expr::Kind::Name && expr->name == "loop") return true;
  if (mentions_loop(expr->object.get())) return true;
  for (const auto& item : expr->items)
    if (mentions_loop(item.get())) return true;
  for (const auto& value : expr->values)
    if (mentions_loop(value.get())) return true;
  for (const auto& keyword : expr->keywords)
    if (mentions_loop(keyword.second.get())) return true;
  return false;
}

bool mentions_loop(const Body& body) {
  for (const auto& stmt : body) {
    if (mentions_loop(stmt->expr.get()) || mentions_loop(stmt->condition.get()) ||
        mentions_loop(stmt->body) || mentions_loop(stmt->else_body))
      return true;
    for (const auto& param : stmt->params)
      if (mentions_loop(param.second.get())) return true;
  }
  return false;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin)
      : tokens_(std::move(tokens)), origin_(origin) {}

  Body parse() {
    std::string end;
    Body body = parse_body({}, "", 0, end);
    return body;
  }

 private:
  // Counts nesting on the way down and back, so recursion is bounded by
  // Limits::kMaxTemplateNesting.
  struct Nest {
    Parser& parser;
    Nest(Parser& p, int line) : parser(p) { parser.enter(line); }
    ~Nest() { --parser.depth_; }
  };
  // The links of a chain a loop builds (a + b + c, x.a[0](), x | f is t): each wraps the tree
  // built so far in one more node, so each counts as one more level of nesting until the chain's
  // parse returns. Without it a 64 KB chain built a tree thousands of levels deep, which the
  // recursive name check, evaluation and destruction then overflowed the stack on.
  struct Chain {
    Parser& parser;
    int links = 0;
    explicit Chain(Parser& p) : parser(p) {}
    void link(int line) {
      ++links;
      parser.enter(line);
    }
    ~Chain() { parser.depth_ -= links; }
  };
  void enter(int line) {
    if (++depth_ > Limits::kMaxTemplateNesting)
      error(line, "the template nests deeper than " + std::to_string(Limits::kMaxTemplateNesting) +
                      " levels");
  }

  [[noreturn]] void error(int line, const std::string& message) const {
    fail("{}:{}: {}", origin_, line, message);
  }

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& token = peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return token;
  }
  bool at_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == K::Operator && peek(ahead).text == op;
  }
  bool at_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == K::Name && peek(ahead).text == name;
  }
  static std::string describe(const Token& token) {
    switch (token.kind) {
      case K::End:
        return "the end of the template";
      case K::Text:
        return "text";
      case K::String:
        return "a string";
      default:
        return "'" + token.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!at_op(op))
      error(peek().line, std::string("expected '") + op + "' but found " + describe(peek()));
    next();
  }
  void expect_block_end(const char* tag) {
    if (peek().kind != K::BlockEnd)
      error(peek().line,
            std::string("expected '%}' to close '") + tag + "' but found " + describe(peek()));
    next();
  }
  std::string expect_name(const char* what) {
    if (peek().kind != K::Name)
      error(peek().line, std::string("expected ") + what + " but found " + describe(peek()));
    return next().text;
  }

  // Statements up to one of `ends` (a block tag); `found` receives which, the tag's name then
  // consumed. At the top level `ends` is empty and the template's end stops it.
  Body parse_body(std::initializer_list<const char*> ends, const char* opener, int opener_line,
                  std::string& found) {
    Nest nest(*this, opener_line);
    Body body;
    while (true) {
      const Token& token = peek();
      if (token.kind == K::End) {
        if (ends.size() == 0) return body;
        error(opener_line, std::string("'{% ") + opener + " %}' is never closed (expected '{% " +
                               *(ends.end() - 1) + " %}')");
      }
      if (token.kind == K::Text) {
        auto stmt = make(Stmt::Kind::Text, token.line);
        stmt->text = next().text;
        body.push_back(std::move(stmt));
      } else if (token.kind == K::PrintBegin) {
        next();
        auto stmt = make(Stmt::Kind::Print, token.line);
        stmt->expr = parse_expression();
        if (peek().kind != K::PrintEnd)
          error(peek().line, "expected '}}' but found " + describe(peek()));
        next();
        body.push_back(std::move(stmt));
      } else if (token.kind == K::BlockBegin) {
        const Token& tag = peek(1);
        for (const char* end : ends) {
          if (tag.kind == K::Name && tag.text == end) {
            next();
            found = next().text;
            return body;
          }
        }
        next();
        body.push_back(parse_statement());
      } else {
        error(token.line, "unexpected " + describe(token));
      }
    }
  }

  std::unique_ptr<Stmt> make(Stmt::Kind kind, int line) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = kind;
    stmt->line = line;
    return stmt;
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token& tag = peek();
    if (tag.kind != K::Name) error(tag.line, "expected a tag name after '{%'");
    const std::string name = next().text;
    const int line = tag.line;
    if (name == "if") return parse_if(line);
    if (name == "for") return parse_for(line);
    if (name == "set") return parse_set(line);
    if (name == "macro") return parse_macro(line);
    if (name == "break" || name == "continue") {
      expect_block_end(name.c_str());
      return make(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
    }
    if (name == "generation") {
      expect_block_end("generation");
      auto stmt = make(Stmt::Kind::Generation, line);
      std::string found;
      stmt->body = parse_body({"endgeneration"}, "generation", line, found);
      expect_block_end("endgeneration");
      return stmt;
    }
    static const char* const kEnds[] = {"endif", "endfor", "endset",       "endmacro",
                                        "else",  "elif",   "endgeneration"};
    if (std::find(std::begin(kEnds), std::end(kEnds), name) != std::end(kEnds))
      error(line, "'{% " + name + " %}' has no matching opening tag");
    error(line, "unsupported tag '{% " + name + " %}' (mmgen renders if, for, set, macro, break, " +
                    "continue and generation)");
  }

  std::unique_ptr<Stmt> parse_if(int line) {
    auto stmt = make(Stmt::Kind::If, line);
    stmt->expr = parse_expression();
    expect_block_end("if");
    std::string found;
    stmt->body = parse_body({"elif", "else", "endif"}, "if", line, found);
    if (found == "elif") {
      stmt->else_body.push_back(parse_if(peek().line));
      return stmt;  // the nested if consumed the endif
    }
    if (found == "else") {
      expect_block_end("else");
      stmt->else_body = parse_body({"endif"}, "if", line, found);
    }
    expect_block_end("endif");
    return stmt;
  }

  std::unique_ptr<Stmt> parse_for(int line) {
    auto stmt = make(Stmt::Kind::For, line);
    do {
      stmt->targets.push_back(expect_name("a loop variable"));
    } while (at_op(",") && (next(), true));
    if (!at_name("in")) error(peek().line, "expected 'in' but found " + describe(peek()));
    next();
    stmt->expr = parse_expression(/*conditional=*/false);
    if (at_name("if")) {
      next();
      stmt->condition = parse_expression(/*conditional=*/false);
    }
    if (at_name("recursive")) error(peek().line, "recursive for loops are not supported");
    expect_block_end("for");
    std::string found;
    stmt->body = parse_body({"else", "endfor"}, "for", line, found);
    if (found == "else") {
      expect_block_end("else");
      stmt->else_body = parse_body({"endfor"}, "for", line, found);
    }
    expect_block_end("endfor");
    stmt->uses_loop = mentions_loop(stmt->body);
    return stmt;
  }

  std::unique_ptr<Stmt> parse_set(int line) {
    auto stmt = make(Stmt::Kind::Set, line);
    stmt->targets.push_back(expect_name("a variable name"));
    if (at_op(".")) {
      next();
      stmt->attribute = expect_name("an attribute name");
    } else {
      while (at_op(",")) {
        next();
        stmt->targets.push_back(expect_name("a variable name"));
      }
    }
    if (peek().kind == K::BlockEnd && stmt->attribute.empty() && stmt->targets.size() == 1) {
      next();
      stmt->kind = Stmt::Kind::SetBlock;
      std::string found;
      stmt->body = parse_body({"endset"}, "set", line, found);
      expect_block_end("endset");
      return stmt;
    }
    expect_op("=");
    stmt->expr = parse_expression();
    if (at_op(",")) {  // set a, b = 1, 2
      auto tuple = make_expr(Expr::Kind::Tuple, stmt->expr->line);
      tuple->items.push_back(std::move(stmt->expr));
      while (at_op(",")) {
        next();
        tuple->items.push_back(parse_expression());
      }
      stmt->expr = std::move(tuple);
    }
    expect_block_end("set");
    return stmt;
  }

  std::unique_ptr<Stmt> parse_macro(int line) {
    auto stmt = make(Stmt::Kind::Macro, line);
    stmt->name = expect_name("a macro name");
    expect_op("(");
    while (!at_op(")")) {
      std::string param = expect_name("a parameter name");
      ExprPtr fallback;
      if (at_op("=")) {
        next();
        fallback = parse_expression();
      }
      stmt->params.emplace_back(std::move(param), std::move(fallback));
      if (!at_op(")")) expect_op(",");
    }
    next();
    expect_block_end("macro");
    std::string found;
    stmt->body = parse_body({"endmacro"}, "macro", line, found);
    expect_block_end("endmacro");
    return stmt;
  }

  ExprPtr make_expr(Expr::Kind kind, int line) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->line = line;
    return expr;
  }
  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    auto expr = make_expr(Expr::Kind::Binary, line);
    expr->name = std::move(op);
    expr->items.push_back(std::move(left));
    expr->items.push_back(std::move(right));
    return expr;
  }

  ExprPtr parse_expression(bool conditional = true) {
    Nest nest(*this, peek().line);
    ExprPtr value = parse_or();
    if (!conditional || !at_name("if")) return value;
    const int line = next().line;
    auto expr = make_expr(Expr::Kind::Conditional, line);
    expr->items.push_back(std::move(value));
    expr->items.push_back(parse_or());
    if (at_name("else")) {
      next();
      expr->items.push_back(parse_expression());
    } else {
      expr->items.push_back(nullptr);
    }
    return expr;
  }

  ExprPtr parse_or() {
    Chain chain(*this);
    ExprPtr left = parse_and();
    while (at_name("or")) {
      const int line = next().line;
      chain.link(line);
      left = binary("or", std::move(left), parse_and(), line);
    }
    return left;
  }
  ExprPtr parse_and() {
    Chain chain(*this);
    ExprPtr left = parse_not();
    while (at_name("and")) {
      const int line = next().line;
      chain.link(line);
      left = binary("and", std::move(left), parse_not(), line);
    }
    return left;
  }
  ExprPtr parse_not() {
    if (!at_name("not")) return parse_compare();
    Nest nest(*this, peek().line);
    auto expr = make_expr(Expr::Kind::Not, next().line);
    expr->object = parse_not();
    return expr;
  }

  // One comparison: Python chains `a < b < c`, which chat templates do not use; refused rather
  // than read differently.
  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    bool compared = false;
    while (true) {
      std::string op;
      const int line = peek().line;
      if (peek().kind == K::Operator &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
           peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        return left;
      }
      if (compared) error(line, "chained comparisons (a < b < c) are not supported");
      compared = true;
      left = binary(op, std::move(left), parse_math1(), line);
    }
  }
  ExprPtr parse_math1() {
    Chain chain(*this);
    ExprPtr left = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& op = next();
      chain.link(op.line);
      left = binary(op.text, std::move(left), parse_concat(), op.line);
    }
    return left;
  }
  ExprPtr parse_concat() {
    Chain chain(*this);
    ExprPtr left = parse_math2();
    while (at_op("~")) {
      const int line = next().line;
      chain.link(line);
      left = binary("~", std::move(left), parse_math2(), line);
    }
    return left;
  }
  ExprPtr parse_math2() {
    Chain chain(*this);
    ExprPtr left = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& op = next();
      chain.link(op.line);
      left = binary(op.text, std::move(left), parse_pow(), op.line);
    }
    return left;
  }
  ExprPtr parse_pow() {
    Chain chain(*this);
    ExprPtr left = parse_unary(true);
    while (at_op("**")) {
      const int line = next().line;
      chain.link(line);
      left = binary("**", std::move(left), parse_unary(true), line);
    }
    return left;
  }
  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this, peek().line);
    ExprPtr expr;
    if (at_op("-") || at_op("+")) {
      const Token& op = next();
      ExprPtr operand = parse_unary(false);
      if (op.text == "-") {
        expr = make_expr(Expr::Kind::Negate, op.line);
        expr->object = std::move(operand);
      } else {
        expr = std::move(operand);
      }
    } else {
      expr = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(std::move(expr)) : std::move(expr);
  }

  ExprPtr parse_primary() {
    const Token& token = peek();
    switch (token.kind) {
      case K::Name: {
        next();
        if (token.text == "true" || token.text == "True") return literal(Value(true), token.line);
        if (token.text == "false" || token.text == "False")
          return literal(Value(false), token.line);
        if (token.text == "none" || token.text == "None") return literal(Value::none(), token.line);
        auto expr = make_expr(Expr::Kind::Name, token.line);
        expr->name = token.text;
        return expr;
      }
      case K::String: {
        std::string text = next().text;
        while (peek().kind == K::String) text += next().text;  // 'a' 'b' is 'ab', as in Python
        return literal(Value(std::move(text)), token.line);
      }
      case K::Int:
        next();
        return literal(Value(token.int_value), token.line);
      case K::Float:
        next();
        return literal(Value(token.float_value), token.line);
      case K::Operator:
        if (token.text == "(") return parse_parenthesized();
        if (token.text == "[") return parse_list();
        if (token.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    error(token.line, "expected an expression but found " + describe(token));
  }

  ExprPtr literal(Value value, int line) {
    auto expr = make_expr(Expr::Kind::Literal, line);
    expr->value = std::move(value);
    return expr;
  }

  ExprPtr parse_parenthesized() {
    const int line = next().line;
    if (at_op(")")) {
      next();
      return make_expr(Expr::Kind::Tuple, line);
    }
    ExprPtr first = parse_expression();
    if (!at_op(",")) {
      expect_op(")");
      return first;
    }
    auto tuple = make_expr(Expr::Kind::Tuple, line);
    tuple->items.push_back(std::move(first));
    while (at_op(",")) {
      next();
      if (at_op(")")) break;
      tuple->items.push_back(parse_expression());
    }
    expect_op(")");
    return tuple;
  }

  ExprPtr parse_list() {
    auto list = make_expr(Expr::Kind::List, next().line);
    while (!at_op("]")) {
      list->items.push_back(parse_expression());
      if (!at_op("]")) expect_op(",");
    }
    next();
    return list;
  }

  ExprPtr parse_dict() {
    auto dict = make_expr(Expr::Kind::Dict, next().line);
    while (!at_op("}")) {
      dict->items.push_back(parse_expression());
      expect_op(":");
      dict->values.push_back(parse_expression());
      if (!at_op("}")) expect_op(",");
    }
    next();
    return dict;
  }

  void parse_call_arguments(Expr& call) {
    expect_op("(");
    while (!at_op(")")) {
      if (peek().kind == K::Name && at_op("=", 1)) {
        std::string key = next().text;
        next();
        call.keywords.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.keywords.empty())
          error(peek().line, "a positional argument follows a keyword argument");
        call.items.push_back(parse_expression());
      }
      if (!at_op(")")) expect_op(",");
    }
    next();
  }

  ExprPtr parse_postfix(ExprPtr expr) {
    Chain chain(*this);
    while (true) {
      const int line = peek().line;
      if (at_op(".") || at_op("[") || at_op("(")) chain.link(line);
      if (at_op(".")) {
        next();
        if (peek().kind == K::Int) {  // x.0 is x[0] in Jinja
          auto index = make_expr(Expr::Kind::Index, line);
          index->object = std::move(expr);
          index->items.push_back(literal(Value(next().int_value), line));
          expr = std::move(index);
          continue;
        }
        auto attribute = make_expr(Expr::Kind::Attribute, line);
        attribute->object = std::move(expr);
        attribute->name = expect_name("an attribute name after '.'");
        expr = std::move(attribute);
      } else if (at_op("[")) {
        next();
        expr = parse_subscript(std::move(expr), line);
      } else if (at_op("(")) {
        auto call = make_expr(Expr::Kind::Call, line);
        call->object = std::move(expr);
        parse_call_arguments(*call);
        expr = std::move(call);
      } else {
        return expr;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object, int line) {
    ExprPtr parts[3];
    int colons = 0;
    for (int part = 0; part < 3; ++part) {
      if (!at_op(":") && !at_op("]")) parts[part] = parse_expression();
      if (part < 2 && at_op(":")) {
        next();
        ++colons;
      } else {
        break;
      }
    }
    expect_op("]");
    if (colons == 0) {
      if (!parts[0]) error(line, "empty subscript '[]'");
      auto index = make_expr(Expr::Kind::Index, line);
      index->object = std::move(object);
      index->items.push_back(std::move(parts[0]));
      return index;
    }
    auto slice = make_expr(Expr::Kind::Slice, line);
    slice->object = std::move(object);
    for (auto& part : parts) slice->items.push_back(std::move(part));
    return slice;
  }

  // `| filter`, `| filter(args)`, `is [not] test`, `is test(args)` or `is test arg`.
  ExprPtr parse_filters(ExprPtr expr) {
    Chain chain(*this);
    while (true) {
      const int line = peek().line;
      if (at_op("|") || at_name("is")) chain.link(line);
      if (at_op("|")) {
        next();
        auto filter = make_expr(Expr::Kind::Filter, line);
        filter->object = std::move(expr);
        filter->name = expect_name("a filter name after '|'");
        if (at_op("(")) parse_call_arguments(*filter);
        expr = parse_postfix(std::move(filter));
      } else if (at_name("is")) {
        next();
        auto test = make_expr(Expr::Kind::Test, line);
        test->object = std::move(expr);
        if (at_name("not")) {
          next();
          test->negated = true;
        }
        test->name = expect_name("a test name after 'is'");
        if (at_op("(")) {
          parse_call_arguments(*test);
        } else if (starts_test_argument()) {
          test->items.push_back(parse_postfix(parse_primary()));
        }
        expr = std::move(test);
      } else {
        return expr;
      }
    }
  }

  // `x is divisibleby 3`: a test takes one argument without parentheses when a primary follows.
  bool starts_test_argument() const {
    const Token& token = peek();
    if (token.kind == K::String || token.kind == K::Int || token.kind == K::Float) return true;
    if (token.kind != K::Name) return false;
    static const char* const kKeywords[] = {"and", "or", "not", "in", "is", "if", "else"};
    return std::find(std::begin(kKeywords), std::end(kKeywords), token.text) == std::end(kKeywords);
  }

  std::vector<Token> tokens_;
  std::string origin_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_template(std::string_view source, const std::string& origin) {
  return Parser(tokenize(source, origin), origin).parse();
}

}  // namespace mmgen::tokenizers::jinja
