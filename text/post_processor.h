// Post-processors of tokenizer.json: add the special tokens around an encoded sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "text/json_fields.h"

namespace mmgen::tokenizers {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // How many ids process() adds to a single sequence (truncation leaves room for them).
  virtual size_t added_count() const = 0;
  virtual std::vector<int64_t> process(std::vector<int64_t> ids) const = 0;
};

// Supported: TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel (adds nothing),
// Sequence; null → nullptr.
std::unique_ptr<PostProcessor> make_post_processor(const Json& spec, const std::string& where);

}  // namespace mmgen::tokenizers
