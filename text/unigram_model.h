// The Unigram model (sentencepiece): the segmentation of a word into vocabulary pieces with the
// highest total log-probability, found by Viterbi, with HF tokenizers' unknown handling.
#pragma once

#include "text/model.h"

namespace mmgen::tokenizers {

class UnigramModel final : public Model {
 public:
  struct Piece {
    std::string text;
    double score;
  };
  UnigramModel(std::vector<Piece> pieces, std::optional<int64_t> unk_id, bool byte_fallback,
               const std::string& where);

  void tokenize(std::string_view word, std::vector<int64_t>& ids) const override;
  std::optional<int64_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int64_t id) const override;
  size_t vocab_size() const override { return pieces_.size(); }

  // The pieces of the best segmentation; runs of unknown characters come out fused into one.
  std::vector<std::string_view> segment(std::string_view word) const;

 private:
  std::vector<Piece> pieces_;
  TokenIds ids_;
  std::optional<int64_t> unk_id_;
  bool byte_fallback_;
  size_t longest_piece_bytes_ = 0;
  double unknown_score_ = 0;
  std::string where_;
};

std::unique_ptr<Model> make_unigram_model(const Json& spec, const std::string& where);

}  // namespace mmgen::tokenizers
