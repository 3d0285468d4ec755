#include "text/jinja_template.h"

#include "core/error.h"
#include "text/jinja_builtins.h"
#include "text/jinja_eval.h"
#include "text/jinja_parser.h"

namespace mmgen::tokenizers::jinja {
namespace {

// Filters and tests are known by name before rendering, so a template that uses one mmgen lacks
// is refused when it is loaded, even when the branch that uses it would not run for this prompt.
void check_names(const Expr* expr, const std::string& origin) {
  if (!expr) return;
  if (expr->kind == Expr::Kind::Filter && !is_known_filter(expr->name))
    fail("{}:{}: unknown filter '{}' (mmgen does not implement it)", origin, expr->line,
         expr->name);
  if (expr->kind == Expr::Kind::Test && !is_known_test(expr->name))
    fail("{}:{}: unknown test '{}' (mmgen does not implement it)", origin, expr->line, expr->name);
  check_names(expr->object.get(), origin);
  for (const auto& item : expr->items) check_names(item.get(), origin);
  for (const auto& value : expr->values) check_names(value.get(), origin);
  for (const auto& keyword : expr->keywords) check_names(keyword.second.get(), origin);
}

void check_names(const Body& body, const std::string& origin) {
  for (const auto& stmt : body) {
    check_names(stmt->expr.get(), origin);
    check_names(stmt->condition.get(), origin);
    for (const auto& param : stmt->params) check_names(param.second.get(), origin);
    check_names(stmt->body, origin);
    check_names(stmt->else_body, origin);
  }
}

}  // namespace

Template::Template(std::string_view source, std::string origin)
    : origin_(std::move(origin)),
      body_(std::make_shared<const Body>(parse_template(source, origin_))) {
  check_names(*body_, origin_);
}

std::string Template::render(const Value& context) const {
  return render_body(*body_, context, origin_);
}

}  // namespace mmgen::tokenizers::jinja
