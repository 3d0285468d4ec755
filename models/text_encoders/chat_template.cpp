#include "models/text_encoders/chat_template.h"

namespace mmgen::text_encoders {

std::string apply_qwen_chat_template(std::string_view user_message, bool enable_thinking) {
  std::string text = "<|im_start|>user\n";
  text += user_message;
  text += "<|im_end|>\n<|im_start|>assistant\n";
  if (!enable_thinking) text += "<think>\n\n</think>\n\n";
  return text;
}

}  // namespace mmgen::text_encoders
