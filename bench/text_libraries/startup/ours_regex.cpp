// Ours: compile the Qwen2 pattern, one find_all.
#include "text/regex.h"
#include <cstdio>
int main() {
  mmgen::tokenizers::Regex r(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  std::printf("%zu\n", r.find_all("it's a test").size());
}
