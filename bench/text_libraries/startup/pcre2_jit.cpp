// PCRE2: compile + JIT the Qwen2 pattern, one match.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <cstdio>
#include <cstring>
int main() {
  const char* p = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  int e; PCRE2_SIZE o;
  pcre2_code* c = pcre2_compile((PCRE2_SPTR)p, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &e, &o, nullptr);
  pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
  pcre2_match_data* m = pcre2_match_data_create_from_pattern(c, nullptr);
  const char* s = "it's a test";
  int rc = pcre2_jit_match(c, (PCRE2_SPTR)s, strlen(s), 0, 0, m, nullptr);
  std::printf("%d\n", rc);
}
