// Measurement: should PCRE2 replace text/regex.cpp, and ICU replace the hand-written
// Unicode code (NFC, Lowercase, character classes, grapheme breaks)?
//
// Built standalone by measure/CMakeLists.txt (the tokenizer sources + four core files, linked to
// pcre2-8 and icuuc), against a tree carrying measure/hooks.patch (a function-pointer hook in
// Regex::find_all and in the NFC / Lowercase normalizers, so whole tokenizers can run on PCRE2 /
// ICU for the token-id comparison). Usage:
//   tokenizer_regex_bench DATA_DIR SOURCE_DIR SHARED_DIR
// DATA_DIR holds corpus.bin, tests.bin, corpus_stress.bin (measure/gen_corpus.py), trained-*/
// (measure/hf_side.py train) and gets dump/ (our and the libraries' outputs, which
// measure/compare.py checks against hf/ from measure/hf_side.py oracle).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/brkiter.h>
#include <unicode/bytestream.h>
#include <unicode/casemap.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/utext.h>
#include <unicode/uversion.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/grapheme.h"
#include "text/nfc_lowercase.h"
#include "text/regex.h"
#include "text/tokenizer.h"
#include "text/unicode_data.h"
#include "text/utf8.h"

namespace fs = std::filesystem;
using mmgen::tokenizers::Regex;
using Matches = std::vector<Regex::Match>;
namespace tk = mmgen::tokenizers;

// ---------------------------------------------------------------------------------------------
// The patterns mmgen compiles (pre_tokenizers.cpp, qwen2_bpe_folder.cpp, clip_bpe_folder.cpp, and
// the fixtures' tokenizer.json files), plus Llama-3's for reference.
struct Pattern {
  const char* name;
  const char* where;
  const char* regex;
};
const Pattern kPatterns[] = {
    {"qwen2", "Qwen2/Qwen3/Z-Image/Qwen-Image Split (tokenizer.json, qwen2_bpe_folder.cpp)",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"gpt2", "ByteLevel use_regex (pre_tokenizers.cpp kGpt2Pattern; CLIP's ByteLevel)",
     R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"},
    {"clip", "CLIP Split (clip_bpe_folder.cpp, clip tokenizer.json)",
     R"(<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+)"},
    {"whitespace", "Whitespace pre-tokenizer (pre_tokenizers.cpp)", R"(\w+|[^\w\s]+)"},
    {"space_run", "CLIP Replace normalizer", R"(\s+)"},
    {"llama3", "Llama-3 style (no fixture uses it)",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
};

// ---------------------------------------------------------------------------------------------
// PCRE2: the same pattern text, PCRE2_UTF | PCRE2_UCP; find_all with our engine's contract
// (successive non-empty leftmost matches; after an empty match the search moves one code point).
class Pcre2Regex {
 public:
  Pcre2Regex(const std::string& pattern, bool jit) : jit_(jit) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      throw std::runtime_error("pcre2_compile: " + std::string(reinterpret_cast<char*>(message)));
    }
    if (jit_ && pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) != 0)
      throw std::runtime_error("pcre2_jit_compile failed");
    data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
    context_ = pcre2_match_context_create(nullptr);
    if (jit_) {
      stack_ = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
      pcre2_jit_stack_assign(context_, nullptr, stack_);
    }
  }
  ~Pcre2Regex() {
    pcre2_match_data_free(data_);
    pcre2_match_context_free(context_);
    if (stack_) pcre2_jit_stack_free(stack_);
    pcre2_code_free(code_);
  }
  Matches find_all(std::string_view text) const {
    Matches out;
    size_t start = 0;
    uint32_t options = 0;  // the first call checks the UTF-8, later ones skip it
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    while (start < text.size()) {
      int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), start, options, data_, context_)
                    : pcre2_match(code_, subject, text.size(), start, options, data_, context_);
      options = PCRE2_NO_UTF_CHECK;
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw std::runtime_error("pcre2_match error " + std::to_string(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data_);
      size_t b = ov[0], e = ov[1];
      if (e == b) {
        start = b + 1;
        while (start < text.size() && (uint8_t(text[start]) & 0xC0) == 0x80) ++start;
        continue;
      }
      out.push_back({b, e});
      start = e;
    }
    return out;
  }
  // Whether the pattern matches all of `text` (for the per-code-point class tables).
  bool matches_whole(std::string_view text) const {
    int rc = pcre2_jit_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                             PCRE2_ANCHORED, data_, context_);
    return rc >= 0 && pcre2_get_ovector_pointer(data_)[1] == text.size();
  }

 private:
  bool jit_;
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
  pcre2_match_context* context_ = nullptr;
  pcre2_jit_stack* stack_ = nullptr;
};

// Hooks: PCRE2 for every Regex the tokenizers build (cached by pattern text).
template <bool kJit>
Matches pcre2_hook(const std::string& pattern, std::string_view text) {
  static std::unordered_map<std::string, std::unique_ptr<Pcre2Regex>> cache;
  static const std::string* last_key = nullptr;
  static Pcre2Regex* last = nullptr;
  if (last_key != &pattern) {
    auto& slot = cache[pattern];
    if (!slot) slot = std::make_unique<Pcre2Regex>(pattern, kJit);
    last = slot.get();
    last_key = &pattern;
  }
  return last->find_all(text);
}

// ---------------------------------------------------------------------------------------------
// ICU: NFC through Normalizer2's UTF-8 API; lowercase through CaseMap (root locale: full mappings,
// with the Final_Sigma context rule) and, to mimic HF's per-character mapping, one call per code
// point.
std::string icu_nfc(const std::string& text) {
  UErrorCode err = U_ZERO_ERROR;
  static const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  std::string out;
  icu::StringByteSink<std::string> sink(&out, int32_t(text.size()));
  nfc->normalizeUTF8(0, icu::StringPiece(text.data(), int32_t(text.size())), sink, nullptr, err);
  if (U_FAILURE(err)) throw std::runtime_error("normalizeUTF8");
  return out;
}
std::string icu_nfd(const std::string& text) {
  UErrorCode err = U_ZERO_ERROR;
  static const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(err);
  std::string out;
  icu::StringByteSink<std::string> sink(&out, int32_t(text.size()));
  nfd->normalizeUTF8(0, icu::StringPiece(text.data(), int32_t(text.size())), sink, nullptr, err);
  return out;
}
std::string icu_lower(const std::string& text) {
  UErrorCode err = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, int32_t(text.size()));
  icu::CaseMap::utf8ToLower("", 0, icu::StringPiece(text.data(), int32_t(text.size())), sink,
                            nullptr, err);
  if (U_FAILURE(err)) throw std::runtime_error("utf8ToLower");
  return out;
}
std::string icu_lower_per_codepoint(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t start = pos;
    char32_t c = tk::next_codepoint(text, pos);
    if (c < 0x80) {
      out += char(c >= 'A' && c <= 'Z' ? c + 32 : c);
      continue;
    }
    UErrorCode err = U_ZERO_ERROR;
    icu::StringByteSink<std::string> sink(&out);
    icu::CaseMap::utf8ToLower("", 0, icu::StringPiece(text.data() + start, int32_t(pos - start)),
                              sink, nullptr, err);
  }
  return out;
}

// Grapheme boundaries: ours (grapheme_end) and ICU's character BreakIterator over UTF-8 UText.
std::vector<size_t> our_graphemes(std::string_view text) {
  std::vector<size_t> out;
  for (size_t pos = 0; pos < text.size();) out.push_back(pos = tk::grapheme_end(text, pos));
  return out;
}
std::vector<size_t> icu_graphemes(std::string_view text) {
  static icu::BreakIterator* bi = [] {
    UErrorCode err = U_ZERO_ERROR;
    return icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), err);
  }();
  std::vector<size_t> out;
  UErrorCode err = U_ZERO_ERROR;
  UText* ut = utext_openUTF8(nullptr, text.data(), int64_t(text.size()), &err);
  bi->setText(ut, err);
  for (int32_t p = bi->next(); p != icu::BreakIterator::DONE; p = bi->next())
    out.push_back(size_t(p));
  utext_close(ut);
  return out;
}

// ---------------------------------------------------------------------------------------------
std::vector<std::string> read_docs(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::string> docs;
  size_t at = 0;
  while (true) {
    size_t nul = all.find('\0', at);
    docs.push_back(all.substr(at, nul == std::string::npos ? std::string::npos : nul - at));
    if (nul == std::string::npos) break;
    at = nul + 1;
  }
  return docs;
}
size_t total_bytes(const std::vector<std::string>& docs) {
  size_t n = 0;
  for (const auto& d : docs) n += d.size();
  return n;
}

using Clock = std::chrono::steady_clock;
// Median seconds of `repeats` runs of f.
double median_seconds(int repeats, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

size_t g_sink = 0;  // keeps results alive

void write_matches(const fs::path& path, const std::vector<std::string>& docs,
                   const std::function<Matches(std::string_view)>& find) {
  std::ofstream out(path);
  for (const auto& d : docs) {
    Matches m = find(d);
    for (size_t i = 0; i < m.size(); ++i) out << (i ? " " : "") << m[i].begin << ',' << m[i].end;
    out << '\n';
  }
}
void write_texts(const fs::path& path, const std::vector<std::string>& docs,
                 const std::function<std::string(const std::string&)>& f) {
  std::ofstream out(path, std::ios::binary);
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i) out << '\0';
    out << f(docs[i]);
  }
}

std::string excerpt(std::string_view text, size_t at, size_t radius = 24) {
  size_t b = at > radius ? at - radius : 0, e = std::min(text.size(), at + radius);
  while (b > 0 && (uint8_t(text[b]) & 0xC0) == 0x80) --b;
  while (e < text.size() && (uint8_t(text[e]) & 0xC0) == 0x80) ++e;
  nlohmann::json j = std::string(text.substr(b, e - b));
  return j.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}
std::string cp_name(char32_t c) {
  char name[128] = "";
  UErrorCode err = U_ZERO_ERROR;
  u_charName(UChar32(c), U_UNICODE_CHAR_NAME, name, sizeof name, &err);
  UVersionInfo age;
  u_charAge(UChar32(c), age);
  char buf[200];
  std::snprintf(buf, sizeof buf, "U+%04X %s (ICU age %d.%d)", unsigned(c),
                name[0] ? name : "<unassigned in ICU 72>", age[0], age[1]);
  return buf;
}

// ---------------------------------------------------------------------------------------------
void classes_report() {
  std::printf("\n## Per-code-point classes: ours vs PCRE2 10.%d vs ICU %s (Unicode %s)\n\n",
              PCRE2_MINOR, U_ICU_VERSION, U_UNICODE_VERSION);
  struct Cls {
    const char* name;
    const char* pcre;
    bool (*ours)(char32_t);
    bool (*icu)(char32_t);
  };
  const Cls classes[] = {
      {"\\p{L}", R"(\p{L})", tk::unicode::is_letter,
       [](char32_t c) { return (U_GET_GC_MASK(c) & U_GC_L_MASK) != 0; }},
      {"\\p{N}", R"(\p{N})", tk::unicode::is_number,
       [](char32_t c) { return (U_GET_GC_MASK(c) & U_GC_N_MASK) != 0; }},
      {"\\d", R"(\d)", tk::unicode::is_decimal_digit,
       [](char32_t c) { return (U_GET_GC_MASK(c) & U_GC_ND_MASK) != 0; }},
      {"\\w", R"(\w)", tk::unicode::is_word,
       [](char32_t c) {
         return (U_GET_GC_MASK(c) & (U_GC_L_MASK | U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
       }},
      {"\\s", R"(\s)", tk::unicode::is_white_space,
       [](char32_t c) { return bool(u_isUWhiteSpace(c)); }},
  };
  std::printf(
      "| class | code points (ours) | ours != PCRE2 | ours != ICU | first differences "
      "(ours/PCRE2/ICU) |\n|---|---|---|---|---|\n");
  for (const Cls& cls : classes) {
    Pcre2Regex re(cls.pcre, true);
    size_t ours_n = 0, d_pcre = 0, d_icu = 0;
    std::vector<std::string> examples;
    std::map<std::string, size_t> by_age;
    for (char32_t c = 0; c <= 0x10FFFF; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      std::string s;
      tk::append_utf8(s, c);
      bool o = cls.ours(c), p = re.matches_whole(s), i = cls.icu(c);
      ours_n += o;
      d_pcre += o != p;
      d_icu += o != i;
      if (o != p || o != i) {
        if (examples.size() < 4)
          examples.push_back(cp_name(c) + " " + (o ? "1" : "0") + "/" + (p ? "1" : "0") + "/" +
                             (i ? "1" : "0"));
      }
    }
    std::string ex;
    for (auto& e : examples) ex += (ex.empty() ? "" : "; ") + e;
    std::printf("| `%s` | %zu | %zu | %zu | %s |\n", cls.name, ours_n, d_pcre, d_icu, ex.c_str());
  }
}

// Characters whose class differs between ours and PCRE2/ICU, as a histogram over ICU's Unicode age
// of the character (0.0 = unassigned in ICU 72) — shows whether differences are version lag.
void class_diff_ages() {
  std::printf(
      "\nWhere the \\p{L} / \\p{N} / \\w / \\s differences lie, by the character's Unicode age in "
      "ICU 72:\n\n");
  Pcre2Regex L(R"(\p{L})", true), N(R"(\p{N})", true), W(R"(\w)", true), S(R"(\s)", true);
  std::map<std::string, std::array<size_t, 8>> hist;
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string s;
    tk::append_utf8(s, c);
    UVersionInfo age;
    u_charAge(UChar32(c), age);
    char key[16];
    std::snprintf(key, sizeof key, "%d.%d", age[0], age[1]);
    uint32_t gc = U_GET_GC_MASK(c);
    bool ol = tk::unicode::is_letter(c), on = tk::unicode::is_number(c),
         ow = tk::unicode::is_word(c), os = tk::unicode::is_white_space(c);
    auto& h = hist[key];
    h[0] += ol != L.matches_whole(s);
    h[1] += ol != bool(gc & U_GC_L_MASK);
    h[2] += on != N.matches_whole(s);
    h[3] += on != bool(gc & U_GC_N_MASK);
    h[4] += ow != W.matches_whole(s);
    h[5] += ow != bool(gc & (U_GC_L_MASK | U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK));
    h[6] += os != S.matches_whole(s);
    h[7] += os != bool(u_isUWhiteSpace(c));
  }
  std::printf(
      "| ICU age | L vs PCRE2 | L vs ICU | N vs PCRE2 | N vs ICU | \\w vs PCRE2 | \\w vs ICU | \\s "
      "vs PCRE2 | \\s vs ICU |\n|---|---|---|---|---|---|---|---|---|\n");
  for (auto& [k, h] : hist) {
    size_t sum = 0;
    for (size_t v : h) sum += v;
    if (!sum) continue;
    std::printf("| %s |", k.c_str());
    for (size_t v : h) std::printf(" %zu |", v);
    std::printf("\n");
  }
}

// ---------------------------------------------------------------------------------------------
int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s DATA_DIR SOURCE_DIR SHARED_DIR [repeats]\n", argv[0]);
    return 2;
  }
  const fs::path data = argv[1], source = argv[2], shared = argv[3];
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 7;
  // "timing": only the timings (for a quiet machine); otherwise also the identity checks and dumps.
  const bool full = !(argc > 5 && std::string(argv[5]) == "timing");
  const fs::path dump = data / "dump";
  fs::create_directories(dump);
  std::map<std::string, std::vector<std::string>> sets = {
      {"corpus", read_docs(data / "corpus.bin")},
      {"tests", read_docs(data / "tests.bin")},
      {"corpus_stress", read_docs(data / "corpus_stress.bin")}};
  const auto& corpus = sets["corpus"];
  const size_t corpus_bytes = total_bytes(corpus);
  std::printf(
      "# tokenizer regex / Unicode measurement\n\nPCRE2 %d.%d, ICU %s (Unicode %s). corpus: %zu "
      "docs, %zu bytes; tests: %zu strings, %zu bytes; stress: %zu docs, %zu bytes\n",
      PCRE2_MAJOR, PCRE2_MINOR, U_ICU_VERSION, U_UNICODE_VERSION, corpus.size(), corpus_bytes,
      sets["tests"].size(), total_bytes(sets["tests"]), sets["corpus_stress"].size(),
      total_bytes(sets["corpus_stress"]));

  if (full) {
    // ---- (a) identical matches? dumps for compare.py, and a direct ours-vs-PCRE2 count here.
    std::printf("\n## Split matches: ours vs PCRE2 (same pattern text, PCRE2_UTF|PCRE2_UCP)\n\n");
    std::printf(
        "| pattern | set | docs | docs differing | first difference |\n|---|---|---|---|---|\n");
    for (const Pattern& p : kPatterns) {
      Regex ours(p.regex);
      Pcre2Regex jit(p.regex, true), interp(p.regex, false);
      for (auto& [set_name, docs] : sets) {
        size_t differing = 0;
        std::string first;
        std::ofstream o(dump / (set_name + "." + p.name + ".ours.matches")),
            q(dump / (set_name + "." + p.name + ".pcre2.matches"));
        for (const std::string& d : docs) {
          Matches a = ours.find_all(d), b = jit.find_all(d);
          if (set_name != "corpus_stress") {
            Matches c = interp.find_all(d);
            if (c.size() != b.size() ||
                !std::equal(c.begin(), c.end(), b.begin(),
                            [](auto& x, auto& y) { return x.begin == y.begin && x.end == y.end; }))
              std::printf("!! PCRE2 JIT and interpreter disagree (%s)\n", p.name);
          }
          for (size_t i = 0; i < a.size(); ++i)
            o << (i ? " " : "") << a[i].begin << ',' << a[i].end;
          o << '\n';
          for (size_t i = 0; i < b.size(); ++i)
            q << (i ? " " : "") << b[i].begin << ',' << b[i].end;
          q << '\n';
          size_t k = 0;
          while (k < a.size() && k < b.size() && a[k].begin == b[k].begin && a[k].end == b[k].end)
            ++k;
          if (k == a.size() && k == b.size()) continue;
          if (!differing++) {
            auto piece = [&](const Matches& m) {
              return k < m.size()
                         ? excerpt(std::string_view(d).substr(m[k].begin, m[k].end - m[k].begin), 0,
                                   40)
                         : std::string("(none)");
            };
            size_t at = k < a.size() ? a[k].begin : k < b.size() ? b[k].begin : d.size();
            first = "at " + excerpt(d, at, 12) + ": ours " + piece(a) + ", PCRE2 " + piece(b);
          }
        }
        std::printf("| %s | %s | %zu | %zu | %s |\n", p.name, set_name.c_str(), docs.size(),
                    differing, first.c_str());
        std::fflush(stdout);
      }
    }

  }  // full
  // ---- (b) timing of the split.
  std::printf(
      "\n## Split timing over the corpus (%zu docs, %.2f MB; median of %d; ns per byte)\n\n",
      corpus.size(), corpus_bytes / 1e6, repeats);
  std::printf(
      "| pattern | ours | PCRE2 JIT | PCRE2 interpreted | ours / JIT |\n|---|---|---|---|---|\n");
  for (const Pattern& p : kPatterns) {
    Regex ours(p.regex);
    Pcre2Regex jit(p.regex, true), interp(p.regex, false);
    auto run = [&](auto& re) {
      return median_seconds(repeats,
                            [&] {
                              for (const auto& d : corpus) g_sink += re.find_all(d).size();
                            }) *
             1e9 / double(corpus_bytes);
    };
    double t_ours = run(ours), t_jit = run(jit), t_interp = run(interp);
    std::printf("| %s | %.1f | %.1f | %.1f | %.1fx |\n", p.name, t_ours, t_jit, t_interp,
                t_ours / t_jit);
    std::fflush(stdout);
  }

  // ---- normalisation: dumps and timing.
  std::vector<std::string> corpus_nfd;
  for (const auto& d : corpus) corpus_nfd.push_back(icu_nfd(d));
  sets["corpus_nfd"] = corpus_nfd;
  auto ours_nfc = tk::make_nfc_normalizer();
  auto ours_lower = tk::make_lowercase_normalizer();
  std::function<std::string(const std::string&)> f_ours_nfc = [&](const std::string& s) {
    return ours_nfc->normalize(s);
  };
  std::function<std::string(const std::string&)> f_ours_lower = [&](const std::string& s) {
    return ours_lower->normalize(s);
  };
  struct Norm {
    const char* name;
    std::function<std::string(const std::string&)> ours, icu;
  };
  const Norm norms[] = {{"nfc", f_ours_nfc, icu_nfc},
                        {"lower", f_ours_lower, icu_lower},
                        {"lower_icu_per_codepoint", f_ours_lower, icu_lower_per_codepoint}};
  if (full) {
    std::printf(
        "\n## Normalizers: ours vs ICU (outputs identical?)\n\n| normalizer | set | docs differing "
        "| first difference |\n|---|---|---|---|\n");
    for (const Norm& n : norms) {
      for (auto& [set_name, docs] : sets) {
        size_t differing = 0;
        std::string first;
        std::ofstream o(dump / (set_name + "." + n.name + ".ours"), std::ios::binary),
            q(dump / (set_name + "." + n.name + ".icu"), std::ios::binary);
        for (size_t i = 0; i < docs.size(); ++i) {
          std::string a = n.ours(docs[i]), b = n.icu(docs[i]);
          o << (i ? std::string(1, '\0') : "") << a;
          q << (i ? std::string(1, '\0') : "") << b;
          if (a == b) continue;
          if (!differing++) {
            size_t k = std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin();
            while (k > 0 && (uint8_t(a[k]) & 0xC0) == 0x80) --k;
            first = "ours " + excerpt(a, k, 10) + " ICU " + excerpt(b, k, 10);
          }
        }
        std::printf("| %s | %s | %zu / %zu | %s |\n", n.name, set_name.c_str(), differing,
                    docs.size(), first.c_str());
      }
    }
    // Exhaustive single code points (and each code point's NFD, recomposed).
    {
      size_t nfc_diff = 0, nfc_nfd_diff = 0, lower_diff = 0, lower_ctx_diff = 0;
      std::string nfc_ex, nfd_ex, lower_ex;
      for (char32_t c = 1; c <= 0x10FFFF; ++c) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        std::string s;
        tk::append_utf8(s, c);
        if (ours_nfc->normalize(s) != icu_nfc(s) && nfc_diff++ < 3) nfc_ex += cp_name(c) + "; ";
        std::string d = icu_nfd(s);
        if (ours_nfc->normalize(d) != icu_nfc(d) && nfc_nfd_diff++ < 3) nfd_ex += cp_name(c) + "; ";
        std::string lo = ours_lower->normalize(s);
        if (lo != icu_lower_per_codepoint(s) && lower_diff++ < 3) lower_ex += cp_name(c) + "; ";
        lower_ctx_diff += lo != icu_lower(s);
      }
      std::printf(
          "\nEvery code point alone: NFC ours != ICU: %zu (%s); NFC of its NFD: %zu (%s); "
          "lowercase ours != ICU: %zu (%s) (context-mapping API alone: %zu)\n",
          nfc_diff, nfc_ex.c_str(), nfc_nfd_diff, nfd_ex.c_str(), lower_diff, lower_ex.c_str(),
          lower_ctx_diff);
    }
  }  // full
  std::printf(
      "\n## Normalizer timing (median of %d; ns per byte)\n\n| normalizer | input | ours | ICU | "
      "ours / ICU |\n|---|---|---|---|---|\n",
      repeats);
  for (const Norm& n : norms) {
    for (const char* set_name : {"corpus", "corpus_nfd"}) {
      const auto& docs = sets[set_name];
      double bytes = double(total_bytes(docs));
      auto run = [&](const std::function<std::string(const std::string&)>& f) {
        return median_seconds(repeats,
                              [&] {
                                for (const auto& d : docs) g_sink += f(d).size();
                              }) *
               1e9 / bytes;
      };
      double a = run(n.ours), b = run(n.icu);
      std::printf("| %s | %s | %.2f | %.2f | %.2fx |\n", n.name, set_name, a, b, a / b);
    }
  }

  // ---- graphemes (the Precompiled normalizer's unit).
  {
    if (full) {
      std::printf(
          "\n## Grapheme clusters: ours (grapheme.cpp) vs ICU character BreakIterator\n\n| set | "
          "docs differing | first difference |\n|---|---|---|\n");
      for (auto& [set_name, docs] : sets) {
        size_t differing = 0;
        std::string first;
        for (const auto& d : docs) {
          auto a = our_graphemes(d), b = icu_graphemes(d);
          if (a == b) continue;
          if (!differing++) {
            size_t k = std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin();
            size_t at = k < a.size() ? a[k] : b[k];
            char buf[64];
            std::snprintf(buf, sizeof buf, " (ours ends a cluster at %zu, ICU at %zu)",
                          k < a.size() ? a[k] : 0, k < b.size() ? b[k] : 0);
            first = "near " + excerpt(d, at, 12) + buf;
          }
        }
        std::printf("| %s | %zu / %zu | %s |\n", set_name.c_str(), differing, docs.size(),
                    first.c_str());
      }
    }  // full
    double bytes = double(corpus_bytes);
    double a = median_seconds(repeats,
                              [&] {
                                for (auto& d : corpus) g_sink += our_graphemes(d).size();
                              }) *
               1e9 / bytes;
    double b = median_seconds(repeats,
                              [&] {
                                for (auto& d : corpus) g_sink += icu_graphemes(d).size();
                              }) *
               1e9 / bytes;
    std::printf("\nGrapheme timing over the corpus: ours %.2f ns/B, ICU %.2f ns/B\n", a, b);
  }

  if (full) {
    classes_report();
    class_diff_ages();

  }  // full
  // ---- whole tokenizers: token ids with ours vs PCRE2 + ICU, and the tests' reference ids.
  const fs::path qwenimage_folder = data / "qwenimage-folder";
  fs::create_directories(qwenimage_folder);
  fs::copy(source / "tests/fixtures/qwenimage-tiny/model/tokenizer", qwenimage_folder,
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  fs::remove(qwenimage_folder / "tokenizer.json");
  struct Tok {
    const char* name;
    fs::path folder;
  };
  const std::vector<Tok> toks = {
      {"qwen3-tiny", shared / "fixtures/qwen3-tiny/model/tokenizer"},
      {"zimage-tiny", shared / "fixtures/zimage-tiny/model/tokenizer"},
      {"qwenimage-tiny", source / "tests/fixtures/qwenimage-tiny/model/tokenizer"},
      {"qwenimage-folder", qwenimage_folder},
      {"flux-clip-folder", source / "tests/fixtures/flux-tiny/model/tokenizer"},
      {"clip-tokenizer-json", source / "tests/data/clip_tokenizer_json"},
      {"flux-t5", source / "tests/fixtures/flux-tiny/model/tokenizer_2"},
      {"wan-tiny", shared / "fixtures/wan-tiny/model/tokenizer"},
      {"wan-shapes", source / "examples/models/wan-shapes/tokenizer"},
      {"trained-qwen2", data / "trained-qwen2"},
      {"trained-clip", data / "trained-clip"},
  };
  struct Backend {
    const char* name;
    tk::FindAllHook regex;
    tk::TextHook nfc, lower;
  };
  const Backend backends[] = {
      {"ours", nullptr, nullptr, nullptr},
      {"pcre2-jit+icu", pcre2_hook<true>, icu_nfc, icu_lower},
      {"pcre2-interp+icu", pcre2_hook<false>, icu_nfc, icu_lower},
      {"pcre2-jit+icu-per-cp-lower", pcre2_hook<true>, icu_nfc, icu_lower_per_codepoint},
      {"pcre2-jit only", pcre2_hook<true>, nullptr, nullptr},
      {"icu only", nullptr, icu_nfc, icu_lower},
  };
  auto use = [](const Backend& b) {
    tk::g_find_all_hook = b.regex;
    tk::g_nfc_hook = b.nfc;
    tk::g_lowercase_hook = b.lower;
  };

  // The reference checks of tokenizer_test, qwen2_tokenizer_folder_test, clip_text_test.
  auto json_of = [](const fs::path& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);
  };
  const auto wan_ref = json_of(shared / "fixtures/wan-tiny/reference/tokenizer.json");
  const auto qwen3_ref = json_of(shared / "fixtures/qwen3-tiny/reference/reference.json");
  const auto qi_ref = json_of(source / "tests/fixtures/qwenimage-tiny/reference/reference.json");
  const auto flux_ref = json_of(source / "tests/fixtures/flux-tiny/reference/reference.json");
  if (full) {
    std::printf(
        "\n## Tests' reference ids (the assertions of tokenizer_test, qwen2_tokenizer_folder_test, "
        "clip_text_test) per backend\n\n| backend | checks | failed | first failure "
        "|\n|---|---|---|---|\n");
    for (const Backend& b : backends) {
      use(b);
      size_t checks = 0, failed = 0;
      std::string first;
      auto expect = [&](bool ok, const std::string& what) {
        ++checks;
        if (!ok && !failed++) first = what;
      };
      using V = std::vector<int64_t>;
      {
        auto t = tk::Tokenizer::load(shared / "fixtures/wan-tiny/model/tokenizer");
        for (auto& p : wan_ref) {
          std::string text = p["text"];
          expect(t->encode(text) == p["unpadded_ids"].get<V>(), "wan " + text);
          expect(t->encode_padded(text, 24).ids == p["input_ids"].get<V>(), "wan padded " + text);
        }
      }
      {
        auto t = tk::Tokenizer::load(shared / "fixtures/qwen3-tiny/model/tokenizer");
        for (auto& p : qwen3_ref["prompts"]) {
          std::string text = p["templated"];
          expect(t->encode(text) == p["ids"].get<V>(), "qwen3 " + text);
          expect(t->encode_padded(text, qwen3_ref["max_length"]).ids == p["padded_ids"].get<V>(),
                 "qwen3 padded");
          expect(t->decode(p["ids"].get<V>(), false) == text, "qwen3 decode");
        }
      }
      {
        auto t = tk::Tokenizer::load(source / "examples/models/wan-shapes/tokenizer");
        expect(t->encode("a red circle on a blue background") == V{3, 15, 8, 4, 3, 16, 5, 1},
               "wan-shapes");
      }
      {
        auto folder = tk::Tokenizer::load(qwenimage_folder);
        auto js = tk::Tokenizer::load(source / "tests/fixtures/qwenimage-tiny/model/tokenizer");
        std::string tmpl = qi_ref["template"];
        auto prompts = qi_ref["prompts"].get<std::vector<std::string>>();
        for (size_t i = 0; i < prompts.size(); ++i) {
          std::string text = tmpl;
          text.replace(text.find("{}"), 2, prompts[i]);
          V ids = folder->encode(text);
          expect(ids == qi_ref["templated_ids"][i].get<V>(), "qwenimage folder " + prompts[i]);
          expect(ids == js->encode(text), "qwenimage json " + prompts[i]);
        }
      }
      {
        auto clip = tk::Tokenizer::load(source / "tests/fixtures/flux-tiny/model/tokenizer");
        auto clip_json = tk::Tokenizer::load(source / "tests/data/clip_tokenizer_json");
        auto t5 = tk::Tokenizer::load(source / "tests/fixtures/flux-tiny/model/tokenizer_2");
        for (size_t i = 0; i < flux_ref["prompts"].size(); ++i) {
          std::string prompt = flux_ref["prompts"][i];
          expect(clip->encode(prompt) == flux_ref["clip_unpadded_ids"][i].get<V>(),
                 "clip " + prompt);
          expect(clip->encode_padded(prompt, 77).ids == flux_ref["clip_ids"][i].get<V>(),
                 "clip padded " + prompt);
          expect(clip_json->encode_padded(prompt, 77).ids == flux_ref["clip_ids"][i].get<V>(),
                 "clip json " + prompt);
          expect(t5->encode_padded(prompt, flux_ref["t5_max_sequence_length"]).ids ==
                     flux_ref["t5_ids"][i].get<V>(),
                 "t5 " + prompt);
        }
        expect(clip->encode("CAFE\u0301  \t CRE\u0300ME") == clip->encode("café crème"),
               "clip decomposed");
      }
      {  // tokenizer_test RegexFollowsOnigurumaSemantics, clip_text_test NormalizesLikeHuggingFace
        Regex qwen(kPatterns[0].regex);
        std::string text = "it'S  a 12\n\n  b";
        std::vector<std::string> pieces;
        for (auto m : qwen.find_all(text)) pieces.push_back(text.substr(m.begin, m.end - m.begin));
        expect(pieces == std::vector<std::string>{"it", "'S", " ", " a", " ", "1", "2", "\n\n", " ",
                                                  " b"},
               "regex pieces");
        expect(Regex(" {2,}").find_all("a  b c   d").size() == 2u, "regex {2,}");
        expect(tk::make_nfc_normalizer()->normalize(
                   "Cafe\u0301 A\u030A \u1100\u1161\u11A8 q\u0307\u0323") ==
                   "Caf\u00E9 \u00C5 \uAC01 q\u0323\u0307",
               "nfc");
        expect(tk::make_lowercase_normalizer()->normalize(
                   "\u0130STANBUL \u03A3\u039F\u03A3 \u00C9T\u00C9 \u0245") ==
                   "i\u0307stanbul \u03C3\u03BF\u03C3 \u00E9t\u00E9 \u028C",
               "lowercase (\u0130STANBUL \u03A3\u039F\u03A3 ...)");
      }
      std::printf("| %s | %zu | %zu | %s |\n", b.name, checks, failed, first.c_str());
    }

    // Ids over the test strings, corpus and stress docs: each backend against ours; dumps for
    // compare.py (HF's ids for the trained tokenizers).
    std::printf(
        "\n## Token ids, every backend vs ours, per tokenizer (docs with different ids)\n\n| "
        "tokenizer | set |");
    for (const Backend& b : backends) std::printf(" %s |", b.name);
    std::printf("\n|---|---|");
    for (size_t i = 0; i < std::size(backends); ++i) std::printf("---|");
    std::printf("\n");
    std::vector<std::string> examples;
    for (const Tok& tok : toks) {
      for (const char* set_name : {"tests", "corpus", "corpus_stress"}) {
        const auto& docs = sets[set_name];
        std::vector<std::vector<int64_t>> base;
        std::printf("| %s | %s |", tok.name, set_name);
        for (const Backend& b : backends) {
          use(b);
          auto t = tk::Tokenizer::load(tok.folder);
          const bool trained = std::string(tok.name).starts_with("trained");
          size_t differing = 0;
          std::ofstream out;
          if (&b == &backends[0] || &b == &backends[1] || &b == &backends[3])
            out.open(dump / (std::string(set_name) + "." + tok.name + "." + b.name + ".idhash"));
          for (size_t i = 0; i < docs.size(); ++i) {
            // Our BPE merge loop is quadratic in a piece's length (bpe_model.cpp); with a real
            // vocabulary (merges of runs of spaces) the tests' 200 000-space string would take
            // hours, so docs over 50 KB are skipped for the trained tokenizers (see
            // bpe_quadratic below; compare.py skips them too).
            std::vector<int64_t> ids;
            if (!(trained && docs[i].size() > 50000)) ids = t->encode(docs[i], false);
            if (out.is_open()) {  // FNV-1a 64 of the ids as "1 2 3" (compare.py hashes HF's alike)
              std::string text;
              for (size_t k = 0; k < ids.size(); ++k)
                text += (k ? " " : "") + std::to_string(ids[k]);
              uint64_t h = 1469598103934665603ull;
              for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
              char hex[20];
              std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
              out << hex << '\n';
            }
            if (&b == &backends[0]) {
              base.push_back(std::move(ids));
            } else if (ids != base[i] && !differing++ && examples.size() < 40) {
              examples.push_back(std::string(tok.name) + " / " + set_name + " / " + b.name +
                                 ": doc " + std::to_string(i) + " " + excerpt(docs[i], 0, 60));
            }
          }
          std::printf(" %zu |", differing);
          std::fflush(stdout);
        }
        std::printf("\n");
      }
    }
    use(backends[0]);
    std::printf("\nFirst differing doc per cell:\n");
    for (auto& e : examples) std::printf("- %s\n", e.c_str());

  }  // full
  // ---- our BPE on one long piece (a run of spaces), with the trained 32k vocabulary.
  {
    std::printf(
        "\n## Side finding: our BPE merge loop on one long pre-token (a run of N spaces, "
        "trained-qwen2)\n\n| N | encode ours (ms) |\n|---|---|\n");
    auto t = tk::Tokenizer::load(data / "trained-qwen2");
    for (size_t n : {1000, 2000, 4000, 8000, 16000}) {
      std::string text(n, ' ');
      text += "x";
      double s = median_seconds(3, [&] { g_sink += t->encode(text).size(); });
      std::printf("| %zu | %.1f |\n", n, s * 1e3);
      std::fflush(stdout);
    }
  }

  // ---- end to end: encode time and the pre-tokenizer split's share.
  std::string long100k;
  for (const auto& d : corpus) {
    if (long100k.size() + d.size() + 1 > 100000) break;
    long100k += d + "\n";
  }
  std::string english;  // ~512 tokens of prompt-like English for the trained Qwen2 tokenizer
  {
    auto t = tk::Tokenizer::load(data / "trained-qwen2");
    std::string words;  // mostly-ASCII corpus docs (English prompts), joined
    for (const auto& d : corpus) {
      size_t high =
          std::count_if(d.begin(), d.end(), [](char c) { return (uint8_t(c) & 0x80) != 0; });
      if (high * 50 < d.size()) words += (words.empty() ? "" : " ") + d;
      if (words.size() > 6000) break;
    }
    size_t cut = words.size();
    while (cut > 0 && t->encode(words.substr(0, cut), false).size() > 512)
      cut = words.rfind(' ', cut - 1);
    english = words.substr(0, cut);
  }
  std::printf(
      "\n## Encode time (median of %d; the pre-tokenizer split's share, with our regex)\n\n",
      repeats);
  std::printf(
      "| tokenizer | text | bytes | tokens | encode ours (us) | split ours (us) | split share | "
      "NFC ours (us) | NFC share | split PCRE2-JIT (us) | encode PCRE2-JIT (us) | encode ICU "
      "NFC+lower (us) | encode PCRE2-JIT+ICU (us) "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const struct {
    const char* tok;
    fs::path folder;
    const char* split_pattern;
  } e2e[] = {{"trained-qwen2 (32k vocab)", data / "trained-qwen2", kPatterns[0].regex},
             {"qwen3-tiny (fixture vocab)", shared / "fixtures/qwen3-tiny/model/tokenizer",
              kPatterns[0].regex},
             {"trained-clip (32k vocab)", data / "trained-clip", kPatterns[2].regex},
             {"flux-clip-folder (fixture vocab)",
              source / "tests/fixtures/flux-tiny/model/tokenizer", kPatterns[2].regex}};
  for (auto& e : e2e) {
    for (auto [label, text] :
         {std::pair<const char*, const std::string*>{"~512-token prompt", &english},
          {"100 KB mixed", &long100k}}) {
      use(backends[0]);
      auto t = tk::Tokenizer::load(e.folder);
      size_t tokens = t->encode(*text).size();
      int r = text->size() > 10000 ? repeats : repeats * 20;
      double enc = median_seconds(r, [&] { g_sink += t->encode(*text).size(); });
      Regex re(e.split_pattern);
      Pcre2Regex pj(e.split_pattern, true);
      double split = median_seconds(r, [&] { g_sink += re.find_all(*text).size(); });
      double split_j = median_seconds(r, [&] { g_sink += pj.find_all(*text).size(); });
      double nfc = median_seconds(r, [&] { g_sink += ours_nfc->normalize(*text).size(); });
      auto encode_with = [&](const Backend& b) {
        use(b);
        auto t2 = tk::Tokenizer::load(e.folder);
        double sec = median_seconds(r, [&] { g_sink += t2->encode(*text).size(); });
        use(backends[0]);
        return sec;
      };
      double enc2 = encode_with(backends[1]), enc_p = encode_with(backends[4]),
             enc_i = encode_with(backends[5]);
      std::printf(
          "| %s | %s | %zu | %zu | %.0f | %.0f | %.0f%% | %.0f | %.0f%% | %.0f | %.0f | %.0f | "
          "%.0f |\n",
          e.tok, label, text->size(), tokens, enc * 1e6, split * 1e6, 100 * split / enc, nfc * 1e6,
          100 * nfc / enc, split_j * 1e6, enc_p * 1e6, enc_i * 1e6, enc2 * 1e6);
      std::fflush(stdout);
    }
  }
  std::printf("\n(sink %zu)\n", g_sink % 10);
  return 0;
}
