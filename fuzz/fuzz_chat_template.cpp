// Chat templates from arbitrary bytes (any text, unterminated tags, deep nesting, endless loops),
// rendered over a conversation with every kind of message the real templates branch on: the
// source is a model folder's file, so it may only end in mmgen::Error, within the step, depth
// and size bounds of core/limits.h.
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/fuzz_support.h"
#include "text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "a red fox 東京\n"},
      {"role": "assistant", "content": "<think>\nok\n</think>\n\nHi", "tool_calls": [
        {"function": {"name": "get", "arguments": {"city": "x", "n": [1, 2.5, null, true]}}}]},
      {"role": "tool", "content": "sunny"},
      {"role": "user", "content": ""}])");
  const std::string source(reinterpret_cast<const char*>(data), size);
  return fuzz::expect_only_errors([&] {
    const tokenizers::ChatTemplate chat(source, "fuzz.jinja",
                                        {{"eos_token", "<|im_end|>"}, {"bos_token", "<s>"}});
    (void)chat.render(messages, /*add_generation_prompt=*/true, {{"enable_thinking", false}});
    (void)chat.render_prompt("a cat");
  });
}
