// The BPE model: a word starts as single characters (bytes spelled as symbols for byte-level
// BPE) and adjacent pairs are merged, lowest merge rank first, leftmost first on equal ranks.
#pragma once

#include "text/model.h"

namespace mmgen::tokenizers {

class BpeModel final : public Model {
 public:
  struct Options {
    std::optional<std::string> unk_token;
    std::string continuing_subword_prefix;
    std::string end_of_word_suffix;
    bool fuse_unk = false;
    bool byte_fallback = false;
    bool ignore_merges = false;
  };
  // `merges` pairs in rank order.
  BpeModel(TokenIds vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           Options options, const std::string& where);

  void tokenize(std::string_view word, std::vector<int64_t>& ids) const override;
  std::optional<int64_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int64_t id) const override;
  size_t vocab_size() const override { return vocab_.size(); }

 private:
  struct Merge {
    uint32_t rank;
    int64_t result;
  };
  void merge_all(std::vector<int64_t>& symbols) const;
  static uint64_t pair_key(int64_t a, int64_t b) { return (uint64_t(a) << 32) | uint64_t(b); }

  TokenIds vocab_;
  std::unordered_map<int64_t, std::string> tokens_;
  std::unordered_map<uint64_t, Merge> merges_;
  Options options_;
};

std::unique_ptr<Model> make_bpe_model(const Json& spec, const std::string& where);

}  // namespace mmgen::tokenizers
