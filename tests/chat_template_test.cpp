// Chat templates read from tokenizer folders and rendered as transformers' apply_chat_template:
// the real Qwen3 template of the zimage-tiny fixture against the reference's templated prompts and
// ids, conversations with system, assistant, reasoning and tool messages (expected strings from
// Jinja2 3.1.6 configured as transformers configures it), enable_thinking=False, where the
// template comes from (chat_template.jinja, tokenizer_config.json as a string or a named list),
// and the one-line errors when there is none or it cannot be rendered.
#include "text/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file.h"
#include "models/text_encoders/qwen3_prompt_embedding.h"
#include "tests/test_support.h"
#include "text/tokenizer.h"

namespace mmgen::tokenizers {
namespace {

using OrderedJson = nlohmann::ordered_json;

fs::path fixture(const std::string& name) {
  return testing::shared_dir() / "fixtures" / name;
}
fs::path zimage_tokenizer() {
  return fixture("zimage-tiny") / "model" / "tokenizer";
}
nlohmann::json reference_json(const std::string& name) {
  return nlohmann::json::parse(read_text_file(fixture(name) / "reference" / "reference.json"));
}
void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Every reference prompt (empty, Unicode, tabs and newlines among them) renders to the reference's
// templated text, and that text to its ids: transformers' apply_chat_template then tokenizer().
TEST(ChatTemplate, ZImageTemplateMatchesEveryReferencePromptAndItsIds) {
  MMGEN_REQUIRE_SHARED();
  const auto ref = reference_json("zimage-tiny");
  const ChatTemplate chat = ChatTemplate::load(zimage_tokenizer());
  const auto tokenizer = Tokenizer::load(zimage_tokenizer());
  std::vector<std::string> prompts;
  ASSERT_GE(ref["prompts"].size(), 5u);
  for (const auto& prompt : ref["prompts"]) {
    const std::string text = prompt["prompt"].get<std::string>();
    const std::string templated = chat.render_prompt(text);
    EXPECT_EQ(templated, prompt["templated"].get<std::string>()) << text;
    EXPECT_EQ(tokenizer->encode(templated), prompt["ids"].get<std::vector<int64_t>>()) << text;
    prompts.push_back(text);
  }
  const auto ids = text_encoders::z_image_prompt_ids(*tokenizer, chat, prompts, 4096);
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(ids[i], ref["prompts"][i]["ids"].get<std::vector<int64_t>>()) << i;
}

// The template's last branch: `enable_thinking is defined and enable_thinking is false` appends
// an empty thinking block after the generation prompt.
TEST(ChatTemplate, EnableThinkingFalseAddsTheEmptyThinkBlock) {
  MMGEN_REQUIRE_SHARED();
  const ChatTemplate chat = ChatTemplate::load(zimage_tokenizer());
  EXPECT_EQ(chat.render_prompt("x", /*enable_thinking=*/false),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(chat.render_prompt("x", /*enable_thinking=*/true),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
  // Without enable_thinking at all (`is defined` is false) and without a generation prompt.
  EXPECT_EQ(chat.render(OrderedJson::parse(R"([{"role": "user", "content": "x"}])"), true),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat.render(OrderedJson::parse(R"([{"role": "user", "content": "x"}])"), false),
            "<|im_start|>user\nx<|im_end|>\n");
}

TEST(ChatTemplate, ConversationsRenderAsTheTemplateSays) {
  MMGEN_REQUIRE_SHARED();
  const ChatTemplate chat = ChatTemplate::load(zimage_tokenizer());
  // System first, an assistant turn whose content carries its reasoning, another user turn.
  EXPECT_EQ(chat.render(OrderedJson::parse(R"([
              {"role": "system", "content": "Be brief."},
              {"role": "user", "content": "hi"},
              {"role": "assistant", "content": "<think>\nmm\n</think>\n\nHello!"},
              {"role": "user", "content": "again"}])"),
                        true, {{"enable_thinking", true}}),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nmm\n</think>\n\nHello!<|im_end|>\n<|im_start|>user\n"
            "again<|im_end|>\n<|im_start|>assistant\n");
  // reasoning_content given apart (stripped of newlines), and a system message not first.
  EXPECT_EQ(chat.render(OrderedJson::parse(R"([
              {"role": "user", "content": "q"},
              {"role": "assistant", "content": "\n\nA", "reasoning_content": "\nsteps\n"},
              {"role": "system", "content": "late system"}])"),
                        false),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nsteps\n</think>\n\nA"
            "<|im_end|>\n<|im_start|>system\nlate system<|im_end|>\n");
}

// Tools (`tojson` in the caller's key order, non-ASCII kept), tool calls with object and string
// arguments, and consecutive tool responses folded into one user turn.
TEST(ChatTemplate, ToolsAndToolCallsRenderAsTheTemplateSays) {
  MMGEN_REQUIRE_SHARED();
  const ChatTemplate chat = ChatTemplate::load(zimage_tokenizer());
  const OrderedJson messages = OrderedJson::parse(R"([
      {"role": "user", "content": "w?"},
      {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get", "arguments": {"city": "東京", "n": 1.5}}},
        {"name": "raw", "arguments": "{\"a\": 1}"}]},
      {"role": "tool", "content": "sunny"},
      {"role": "tool", "content": "warm"}])");
  OrderedJson extra = {{"enable_thinking", false}};
  extra["tools"] = OrderedJson::parse(
      R"([{"type": "function", "function": {"name": "get", "parameters": {"b": 1, "a": [true, null]}}}])");
  EXPECT_EQ(
      chat.render(messages, true, extra),
      "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user "
      "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n"
      "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get\", \"parameters\": {\"b\": "
      "1, \"a\": [true, null]}}}\n</tools>\n\nFor each function call, return a json object with "
      "function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
      "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nw?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n"
      "{\"name\": \"get\", \"arguments\": {\"city\": \"東京\", \"n\": 1.5}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"raw\", \"arguments\": {\"a\": 1}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nwarm\n"
      "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

// The step budget (core/limits.h) leaves room for long real conversations.
TEST(ChatTemplate, AFiveThousandMessageConversationRendersWithinTheBounds) {
  MMGEN_REQUIRE_SHARED();
  const ChatTemplate chat = ChatTemplate::load(zimage_tokenizer());
  OrderedJson messages = OrderedJson::array();
  std::string expected;
  for (int i = 0; i < 2500; ++i) {
    messages.push_back({{"role", "user"}, {"content", "q" + std::to_string(i)}});
    messages.push_back({{"role", "assistant"}, {"content", "a"}});
    expected += "<|im_start|>user\nq" + std::to_string(i) +
                "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\na<|im_end|>\n";
  }
  EXPECT_EQ(chat.render(messages, false), expected);
}

// qwen3-tiny's tokenizer folder has no template of its own; its reference prompts were rendered
// with the same Qwen3 chat template, which zimage-tiny's folder holds.
TEST(ChatTemplate, QwenTokenizerWithoutATemplateIsRefusedInOneLine) {
  MMGEN_REQUIRE_SHARED();
  const fs::path folder = fixture("qwen3-tiny") / "model" / "tokenizer";
  ASSERT_FALSE(fs::exists(folder / "chat_template.jinja"));
  const std::string message = testing::error_message([&] { ChatTemplate::load(folder); });
  EXPECT_NE(message.find(folder.string() + ": the tokenizer has no chat template"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST(ChatTemplate, ReadsTokenizerConfigStringsAndNamedLists) {
  const fs::path dir = testing::scratch_dir("chat_template_config");
  write_file(dir / "tokenizer_config.json", R"({
      "eos_token": "<|im_end|>", "bos_token": {"content": "<s>", "lstrip": false},
      "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{{ eos_token }}{% endfor %}"})");
  const OrderedJson messages = OrderedJson::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(ChatTemplate::load(dir).render(messages, true), "<s>user:x<|im_end|>");

  write_file(dir / "tokenizer_config.json", R"({"chat_template": [
      {"name": "tool_use", "template": "tools"}, {"name": "default", "template": "default {{ add_generation_prompt }}"}]})");
  EXPECT_EQ(ChatTemplate::load(dir).render(messages, true), "default True");

  write_file(dir / "tokenizer_config.json",
             R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  EXPECT_NE(testing::error_message([&] {
              ChatTemplate::load(dir);
            }).find("chat_template lists no template named 'default'"),
            std::string::npos);

  // chat_template.jinja (transformers 5) wins over the config's.
  write_file(dir / "chat_template.jinja", "jinja {{ messages|length }}\n");
  EXPECT_EQ(ChatTemplate::load(dir).render(messages, true), "jinja 1");

  write_file(dir / "tokenizer_config.json", "{}");
  fs::remove(dir / "chat_template.jinja");
  EXPECT_NE(testing::error_message([&] {
              ChatTemplate::load(dir);
            }).find("the tokenizer has no chat template"),
            std::string::npos);
}

// A template mmgen cannot render is refused when loaded, in one line naming the file and line.
TEST(ChatTemplate, AnUnrenderableTemplateNamesItsFileAndLine) {
  const fs::path dir = testing::scratch_dir("chat_template_bad");
  write_file(dir / "chat_template.jinja",
             "{%- for m in messages %}\n{{ m.content|shout }}\n{% endfor %}");
  const std::string message = testing::error_message([&] { ChatTemplate::load(dir); });
  EXPECT_EQ(message, (dir / "chat_template.jinja").string() +
                         ":2: unknown filter 'shout' (mmgen does not implement it)");
  write_file(dir / "chat_template.jinja",
             "{% if messages[0].role != 'system' %}{{ raise_exception('System message first') }}"
             "{% endif %}");
  const ChatTemplate chat = ChatTemplate::load(dir);
  EXPECT_EQ(testing::error_message([&] { chat.render_prompt("x"); }),
            (dir / "chat_template.jinja").string() +
                ":1: the template raised an error: System message first");
}

}  // namespace
}  // namespace mmgen::tokenizers
