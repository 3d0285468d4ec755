// Decoders of tokenizer.json: token strings → text.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/json_fields.h"

namespace mmgen::tokenizers {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings; the decoded text is their concatenation.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Supported: Sequence, Metaspace, ByteLevel, Replace (string pattern), ByteFallback, Fuse, Strip;
// null → nullptr (tokens are then joined with spaces, as HF does).
std::unique_ptr<Decoder> make_decoder(const Json& spec, const std::string& where);

}  // namespace mmgen::tokenizers
