// Normalizers of tokenizer.json: text → text before pre-tokenization.
#pragma once

#include <memory>
#include <string>

#include "text/json_fields.h"

namespace mmgen::tokenizers {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `start_kept`, when given, is cleared if the output no longer begins with (something that
  // replaced) the input's first character, as HF's alignments would tell; Metaspace's "first"
  // prepend scheme depends on it.
  virtual std::string normalize(std::string text, bool* start_kept = nullptr) const = 0;
};

// Builds the normalizer described by `spec` (null → nullptr). Supported types: Sequence,
// Precompiled, Replace, Strip, Prepend. Others are refused with an Error naming the type.
std::unique_ptr<Normalizer> make_normalizer(const Json& spec, const std::string& where);

}  // namespace mmgen::tokenizers
