// How template values print and compare, as Python does: str() for `{{ }}` output, repr() for
// lists and dicts inside it, transformers' `tojson` (json.dumps with ensure_ascii=False), and ==
// and < between values. All walk nested values to a bounded depth, so a namespace that holds
// itself (`set ns.x = ns`) fails in one line instead of recursing without end.
#pragma once

#include <string>

#include "text/jinja_value.h"

namespace mmgen::tokenizers::jinja {

// Python's str(): strings as they are, none as "None", true as "True", 1.0 as "1.0", lists and
// dicts as their repr. Undefined prints as "".
std::string to_str(const Value& value);
std::string to_repr(const Value& value);
// json.dumps(value, ensure_ascii=False, indent=indent) (no indent when indent < 0), keys in
// insertion order unless sort_keys.
std::string to_json(const Value& value, int indent = -1, bool sort_keys = false);

// Python's ==: 1 == 1.0 == True, lists element-wise, dicts by their items.
bool equals(const Value& a, const Value& b);
// Python's <, for numbers, strings and lists; throws Error for anything else.
bool less(const Value& a, const Value& b);

}  // namespace mmgen::tokenizers::jinja
