// Added-token matching (text/longest_match.h): the input's first line lists tokens
// separated by '|', the rest is the text. The automaton must agree with the obvious search at
// every position (the longest token there, the first listed among equal ones), and a tokenizer
// built with those added tokens must encode the text without anything but mmgen::Error.
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "text/longest_match.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t line = input.find('\n');
  if (line == std::string::npos) return 0;
  std::vector<std::string> patterns;
  for (size_t start = 0; start <= line;) {
    const size_t bar = std::min(input.find('|', start), line);
    if (bar > start && patterns.size() < 64) patterns.push_back(input.substr(start, bar - start));
    start = bar + 1;
  }
  const std::string text = input.substr(line + 1);

  tokenizers::LongestMatch automaton;
  for (size_t i = 0; i < patterns.size(); ++i) automaton.add(patterns[i], i);
  automaton.build();
  const std::vector<size_t> found = automaton.longest_at(text);
  for (size_t pos = 0; pos < text.size(); ++pos) {
    size_t expected = tokenizers::LongestMatch::kNone;
    for (size_t i = 0; i < patterns.size(); ++i)
      if (text.compare(pos, patterns[i].size(), patterns[i]) == 0 &&
          (expected == tokenizers::LongestMatch::kNone ||
           patterns[i].size() > patterns[expected].size()))
        expected = i;
    if (found[pos] != expected) std::abort();
  }

  return fuzz::expect_only_errors([&] {
    nlohmann::json added = nlohmann::json::array();
    for (size_t i = 0; i < patterns.size(); ++i)
      added.push_back({{"id", int64_t(10 + i)},
                       {"content", patterns[i]},
                       {"special", i % 2 == 0},
                       {"lstrip", i % 3 == 0},
                       {"rstrip", i % 5 == 0},
                       {"single_word", i % 7 == 0}});
    nlohmann::json vocab = nlohmann::json::array();
    for (const char* piece : {"<unk>", "a", "b", " "}) vocab.push_back({piece, -1.0});
    const nlohmann::json config = {
        {"added_tokens", added}, {"model", {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}}}};
    // dump() throws on a token that is not UTF-8: such a file could not exist.
    const std::string json_text =
        config.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const auto tokenizer = tokenizers::Tokenizer::from_json(json_text, "fuzz/tokenizer.json");
    (void)tokenizer->decode(tokenizer->encode(text));
  });
}
