// The Unicode data of the NFC and Lowercase normalizers (nfc_lowercase.h), generated into
// clip_normalizer_tables.cpp by gen_clip_normalizer_tables.py. Every table is sorted.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mmgen::tokenizers::clip_tables {

struct CombiningClassRange {
  char32_t first, last;
  uint8_t combining_class;
};
// A one-level canonical decomposition: `code` → first (+ second when not 0).
struct Decomposition {
  char32_t code, first, second;
};
// first + second → composite, for the primary composites NFC composes.
struct Composition {
  char32_t first, second, composite;
};
// first..last (every `stride`-th code point) lowercase to code + delta.
struct LowercaseRun {
  char32_t first, last;
  int32_t delta;
  uint32_t stride;
};

extern const CombiningClassRange kCombiningClasses[];
extern const size_t kCombiningClassesCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionsCount;
extern const Composition kCompositions[];
extern const size_t kCompositionsCount;
extern const LowercaseRun kLowercaseRuns[];
extern const size_t kLowercaseRunsCount;

}  // namespace mmgen::tokenizers::clip_tables
