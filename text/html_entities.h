// Tables behind Python's html.unescape (generated into html_entities.cpp).
#pragma once

#include <cstddef>

namespace mmgen::tokenizers::html_tables {

struct NamedEntity {
  const char* name;   // without the leading '&'; some names end with ';', some do not
  const char* value;  // UTF-8
};

struct CharrefFix {
  char32_t codepoint;
  const char* value;  // UTF-8
};

extern const NamedEntity kNamedEntities[];
extern const size_t kNamedEntitiesCount;
extern const CharrefFix kInvalidCharrefs[];
extern const size_t kInvalidCharrefsCount;
extern const char32_t kInvalidCodepoints[];
extern const size_t kInvalidCodepointsCount;

}  // namespace mmgen::tokenizers::html_tables
