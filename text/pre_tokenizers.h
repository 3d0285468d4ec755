// Pre-tokenizers of tokenizer.json: split normalized text into the words the model encodes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/json_fields.h"

namespace mmgen::tokenizers {

struct PreToken {
  std::string text;
  bool at_input_start = false;  // begins at the start of the input (Metaspace "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `tokens` by their splits; empty pieces are dropped, as HF does.
  virtual void pre_tokenize(std::vector<PreToken>& tokens) const = 0;
};

// Supported: Sequence, WhitespaceSplit, Whitespace, Metaspace, Split, ByteLevel; null → nullptr.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& spec, const std::string& where);

}  // namespace mmgen::tokenizers
