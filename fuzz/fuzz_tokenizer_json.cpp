// tokenizer.json files: load, then encode and decode a fixed text.
#include <string>

#include "fuzz/fuzz_support.h"
#include "models/tokenizers/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const std::string text(reinterpret_cast<const char*>(data), size);
  return fuzz::expect_only_errors([&] {
    auto tokenizer = tokenizers::Tokenizer::from_json(text, "fuzz/tokenizer.json", std::string("<pad>"));
    const auto ids = tokenizer->encode("a red fox running through snow, 東京 🦊 &amp;");
    (void)tokenizer->decode(ids);
  });
}
