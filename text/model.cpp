#include "text/model.h"

#include "text/bpe_model.h"
#include "text/unigram_model.h"

namespace mmgen::tokenizers {

std::unique_ptr<Model> make_model(const Json& spec, const std::string& where) {
  check(spec.is_object(), "{} should be an object; the tokenizer.json is malformed", where);
  std::string type = string_field_or(spec, "type", "", where);
  // Old files leave out the type; the fields tell the models apart.
  if (type.empty())
    type = spec.contains("merges")                              ? "BPE"
           : spec.contains("vocab") && spec["vocab"].is_array() ? "Unigram"
                                                                : "";
  if (type == "Unigram") return make_unigram_model(spec, where);
  if (type == "BPE") return make_bpe_model(spec, where);
  fail("{}: model type '{}' is not supported by mmgen (supported: Unigram, BPE)", where, type);
}

}  // namespace mmgen::tokenizers
