// Tokenization of arbitrary text (any bytes, invalid UTF-8 included) with the real Wan (Unigram)
// and Qwen (byte-level BPE) tokenizers from the fixtures, plus Wan's prompt cleaning.
#include <memory>
#include <string>

#include "fuzz/fuzz_support.h"
#include "text/prompt_clean.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  static const std::unique_ptr<tokenizers::Tokenizer> wan =
      tokenizers::Tokenizer::load(MMGEN_SOURCE_DIR "/examples/models/wan-tiny/tokenizer");
  static const std::unique_ptr<tokenizers::Tokenizer> qwen = [] {
    const char* path = MMGEN_SHARED_DIR "/fixtures/qwen3-tiny/model/tokenizer";
    return std::filesystem::exists(path) ? tokenizers::Tokenizer::load(path) : nullptr;
  }();
  const std::string text(reinterpret_cast<const char*>(data), size);
  return fuzz::expect_only_errors([&] {
    (void)wan->encode_padded(tokenizers::clean_prompt(text), 64);
    (void)wan->decode(wan->encode(text));
    if (qwen) (void)qwen->decode(qwen->encode(text));
  });
}
