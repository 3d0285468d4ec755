#include "text/nfc_lowercase.h"

#include <algorithm>
#include <string>
#include <vector>

#include "text/clip_normalizer_tables.h"
#include "text/utf8.h"

namespace mmgen::tokenizers {
namespace {

using namespace clip_tables;

bool is_ascii(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; });
}

// Hangul syllables decompose and compose algorithmically (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t c) {
  if (c < 0x300) return 0;
  const CombiningClassRange* end = kCombiningClasses + kCombiningClassesCount;
  const CombiningClassRange* it =
      std::upper_bound(kCombiningClasses, end, c,
                       [](char32_t v, const CombiningClassRange& r) { return v < r.first; });
  if (it == kCombiningClasses) return 0;
  --it;
  return c <= it->last ? it->combining_class : 0;
}

void decompose(char32_t c, std::u32string& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    char32_t s = c - kSBase;
    out += kLBase + s / kNCount;
    out += kVBase + (s % kNCount) / kTCount;
    if (s % kTCount) out += kTBase + s % kTCount;
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionsCount;
  const Decomposition* it = std::lower_bound(
      kDecompositions, end, c, [](const Decomposition& d, char32_t v) { return d.code < v; });
  if (it == end || it->code != c) {
    out += c;
    return;
  }
  decompose(it->first, out);
  if (it->second) decompose(it->second, out);
}

// The primary composite of a + b, or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* end = kCompositions + kCompositionsCount;
  const Composition* it =
      std::lower_bound(kCompositions, end, std::pair{a, b}, [](const Composition& c, auto key) {
        return std::pair{c.first, c.second} < key;
      });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

std::string nfc(const std::string& text) {
  if (is_ascii(text)) return text;
  std::u32string chars;
  for (char32_t c : to_codepoints(text)) decompose(c, chars);
  // Canonical order: each run of non-starters sorted by combining class, stably.
  for (size_t i = 0; i < chars.size();) {
    size_t j = i;
    while (j < chars.size() && combining_class(chars[j]) != 0) ++j;
    if (j - i > 1)
      std::stable_sort(
          chars.begin() + std::ptrdiff_t(i), chars.begin() + std::ptrdiff_t(j),
          [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j == i ? i + 1 : j;
  }
  // Composition: a character joins the last starter unless a character between them is a
  // starter or has a combining class at least its own (it is "blocked").
  std::u32string out;
  size_t starter = std::u32string::npos;
  uint8_t last_class = 0;
  for (char32_t c : chars) {
    uint8_t cls = combining_class(c);
    if (starter != std::u32string::npos) {
      bool adjacent = starter + 1 == out.size();
      if (adjacent || (last_class != 0 && last_class < cls)) {
        if (char32_t composite = compose(out[starter], c)) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (cls == 0) starter = out.size();
    last_class = cls;
    out += c;
  }
  std::string result;
  for (char32_t c : out) append_utf8(result, c);
  return result;
}

void append_lowercase(char32_t c, std::string& out) {
  if (c == 0x130) {  // İ: the one unconditional mapping to two characters
    out += 'i';
    append_utf8(out, 0x307);
    return;
  }
  const LowercaseRun* end = kLowercaseRuns + kLowercaseRunsCount;
  const LowercaseRun* it = std::upper_bound(
      kLowercaseRuns, end, c, [](char32_t v, const LowercaseRun& r) { return v < r.first; });
  if (it != kLowercaseRuns) {
    --it;
    if (c <= it->last && (c - it->first) % it->stride == 0) {
      append_utf8(out, char32_t(int64_t(c) + it->delta));
      return;
    }
  }
  append_utf8(out, c);
}

class NfcNormalizer final : public Normalizer {
 public:
  // Composition never removes the first character, so the start stays.
  std::string normalize(std::string text, bool*) const override { return nfc(text); }
};

class LowercaseNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string text, bool*) const override {
    if (is_ascii(text)) {
      for (char& c : text)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
      return text;
    }
    std::string out;
    out.reserve(text.size());
    for (char32_t c : to_codepoints(text)) append_lowercase(c, out);
    return out;
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_nfc_normalizer() {
  return std::make_unique<NfcNormalizer>();
}
std::unique_ptr<Normalizer> make_lowercase_normalizer() {
  return std::make_unique<LowercaseNormalizer>();
}

}  // namespace mmgen::tokenizers
