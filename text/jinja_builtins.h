// The filters, tests, methods and global functions chat templates call: what Jinja provides,
// what transformers adds (`tojson` as json.dumps, `raise_exception`, `strftime_now`), and the
// Python str / dict methods templates reach through Jinja's sandbox (`.startswith()`,
// `.split()`, `.strip()`, `.items()`, `.get()`, ...). Each throws Error (without a location; the
// evaluator adds the template's line) on bad arguments.
#pragma once

#include <string>

#include "text/jinja_value.h"

namespace mmgen::tokenizers::jinja {

// Strings and lists past Limits::kMaxTemplateStringBytes / kMaxTemplateListItems are refused:
// doubling a string in a loop would otherwise exhaust memory.
void check_string_size(size_t bytes);
void check_list_size(size_t items);

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);
bool apply_test(const std::string& name, const Value& input, const CallArgs& args);

// `object.name` for a method of str, dict or list, bound to `object`; undefined when there is
// none.
Value bound_method(const Value& object, const std::string& name);
// range, namespace, dict, raise_exception, strftime_now; undefined for any other name.
Value global_function(const std::string& name);

// The argument a call passes at `position` or as `keyword`, else `fallback`: how Python binds
// a filter's or method's parameters.
const Value& argument(const CallArgs& args, size_t position, const char* keyword,
                      const Value& fallback);

// Python's len(): code points of a string, items of a list or dict.
int64_t length_of(const Value& value);
// Python's iteration: a list's items, a dict's keys, a string's characters; undefined is empty.
Array iterate(const Value& value);

}  // namespace mmgen::tokenizers::jinja
