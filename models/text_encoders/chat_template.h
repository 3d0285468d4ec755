// The ChatML chat template of Qwen tokenizers, as `apply_chat_template` renders one user message
// with add_generation_prompt=True:
// "<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n". Z-Image renders its prompts
// with enable_thinking=True, which adds nothing more; with enable_thinking=False Qwen3's template
// appends an empty thinking block.
#pragma once

#include <string>
#include <string_view>

namespace mmgen::text_encoders {

// The message goes in verbatim (Qwen3's template does not strip user content).
std::string apply_qwen_chat_template(std::string_view user_message, bool enable_thinking = true);

}  // namespace mmgen::text_encoders
