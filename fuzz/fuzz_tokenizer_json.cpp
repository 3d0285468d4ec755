// tokenizer.json files: load, then encode (plain and padded as the text encoders do) and decode a
// fixed text that touches added tokens, normalization, whitespace and multi-byte characters.
#include <string>

#include "fuzz/fuzz_support.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const std::string text(reinterpret_cast<const char*>(data), size);
  return fuzz::expect_only_errors([&] {
    auto tokenizer =
        tokenizers::Tokenizer::from_json(text, "fuzz/tokenizer.json", std::string("<pad>"));
    const std::string prompt =
        "a red fox  running through snow, 東京 🦊 &amp; </s><pad> x\u0301";
    const auto ids = tokenizer->encode(prompt);
    (void)tokenizer->decode(ids);
    (void)tokenizer->decode(ids, /*skip_special_tokens=*/false);
    (void)tokenizer->vocab_size();
    fuzz::expect_only_errors([&] { (void)tokenizer->encode_padded(prompt, 16); });
  });
}
