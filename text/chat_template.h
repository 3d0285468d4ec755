// A tokenizer's own chat template, rendered as transformers' `apply_chat_template(messages,
// tokenize=False, ...)` does: the template text from the tokenizer folder, the messages, tools
// (none), add_generation_prompt, the tokenizer's special tokens (eos_token, pad_token, ...) and
// any extra keyword (enable_thinking) as the template's variables.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "text/jinja_template.h"

namespace mmgen::tokenizers {

class ChatTemplate {
 public:
  // `<folder>/chat_template.jinja` (transformers 5), else tokenizer_config.json's
  // `chat_template` (a string, or a list of {name, template} of which "default" is taken).
  // Throws Error, in one line, when the folder has no template or mmgen cannot render it.
  static ChatTemplate load(const std::filesystem::path& tokenizer_folder);
  // `origin` names the template in error messages; `special_tokens` ({"eos_token": "...", ...})
  // become template variables.
  ChatTemplate(std::string_view source, std::string origin,
               nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object());

  // `messages`: a list of {"role", "content", ...}; `extra`: more variables (a JSON object).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  // One user message with add_generation_prompt=True and enable_thinking, as Z-Image (and
  // every Qwen text-encoder pipeline) renders a prompt.
  std::string render_prompt(std::string_view prompt, bool enable_thinking = true) const;

  const std::string& origin() const { return template_.origin(); }

 private:
  jinja::Template template_;
  nlohmann::ordered_json special_tokens_;
};

}  // namespace mmgen::tokenizers
