#include "text/chat_template.h"

#include "core/error.h"
#include "core/file.h"
#include "text/jinja_value.h"

namespace mmgen::tokenizers {
namespace {

using OrderedJson = nlohmann::ordered_json;

// The special tokens transformers passes to every template (its special_tokens_map); an
// AddedToken written as {"content": ...} gives its content.
OrderedJson special_tokens_of(const OrderedJson& config) {
  OrderedJson tokens = OrderedJson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    const OrderedJson& token = config[key];
    if (token.is_string()) tokens[key] = token;
    if (token.is_object() && token.contains("content") && token["content"].is_string())
      tokens[key] = token["content"];
  }
  return tokens;
}

// tokenizer_config.json's chat_template: a string, or named templates of which "default" is
// the one apply_chat_template uses without a name.
std::string template_from_config(const OrderedJson& value, const std::string& where) {
  if (value.is_string()) return value.get<std::string>();
  check(value.is_array(), "{}: chat_template should be a string or a list of {{name, template}}",
        where);
  for (const OrderedJson& entry : value) {
    if (entry.is_object() && entry.contains("name") && entry["name"] == "default" &&
        entry.contains("template") && entry["template"].is_string())
      return entry["template"].get<std::string>();
  }
  fail("{}: chat_template lists no template named 'default'", where);
}

}  // namespace

ChatTemplate ChatTemplate::load(const std::filesystem::path& tokenizer_folder) {
  const auto config_path = tokenizer_folder / "tokenizer_config.json";
  OrderedJson config = OrderedJson::object();
  if (std::filesystem::exists(config_path)) {
    try {
      config = OrderedJson::parse(read_text_file(config_path));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON ({})", config_path.string(), e.what());
    }
    check(config.is_object(), "{}: should hold a JSON object", config_path.string());
  }
  const auto jinja_path = tokenizer_folder / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path))
    return ChatTemplate(read_text_file(jinja_path), jinja_path.string(), special_tokens_of(config));
  if (config.contains("chat_template") && !config["chat_template"].is_null())
    return ChatTemplate(template_from_config(config["chat_template"], config_path.string()),
                        config_path.string() + " (chat_template)", special_tokens_of(config));
  fail(
      "{}: the tokenizer has no chat template (neither chat_template.jinja nor a chat_template "
      "in tokenizer_config.json); a Qwen text encoder needs the one its model was trained with",
      tokenizer_folder.string());
}

ChatTemplate::ChatTemplate(std::string_view source, std::string origin,
                           nlohmann::ordered_json special_tokens)
    : template_(source, std::move(origin)), special_tokens_(std::move(special_tokens)) {}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) const {
  check(messages.is_array(), "{}: the messages should be a list", origin());
  check(extra.is_object(), "{}: the template variables should be a JSON object", origin());
  OrderedJson context = special_tokens_;
  context["messages"] = messages;
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  for (const auto& [key, value] : extra.items()) context[key] = value;
  return template_.render(jinja::Value::from_json(context));
}

std::string ChatTemplate::render_prompt(std::string_view prompt, bool enable_thinking) const {
  OrderedJson messages = OrderedJson::array();
  messages.push_back({{"role", "user"}, {"content", std::string(prompt)}});
  return render(messages, /*add_generation_prompt=*/true, {{"enable_thinking", enable_thinking}});
}

}  // namespace mmgen::tokenizers
