#include "text/unigram_model.h"

#include <algorithm>
#include <limits>

#include "text/utf8.h"

namespace mmgen::tokenizers {
namespace {

// HF tokenizers scores an unknown character as the worst piece minus this penalty.
constexpr double kUnknownPenalty = 10.0;

}  // namespace

UnigramModel::UnigramModel(std::vector<Piece> pieces, std::optional<int64_t> unk_id,
                           bool byte_fallback, const std::string& where)
    : pieces_(std::move(pieces)), unk_id_(unk_id), byte_fallback_(byte_fallback), where_(where) {
  check(!unk_id || (*unk_id >= 0 && size_t(*unk_id) < pieces_.size()),
        "{}.unk_id {} is outside the vocabulary of {} pieces", where, unk_id.value_or(0),
        pieces_.size());
  double min_score = std::numeric_limits<double>::infinity();
  ids_.reserve(pieces_.size());
  for (size_t id = 0; id < pieces_.size(); ++id) {
    ids_.insert_or_assign(pieces_[id].text, int64_t(id));
    longest_piece_bytes_ = std::max(longest_piece_bytes_, pieces_[id].text.size());
    min_score = std::min(min_score, pieces_[id].score);
  }
  unknown_score_ = min_score - kUnknownPenalty;
}

std::vector<std::string_view> UnigramModel::segment(std::string_view word) const {
  struct Best {
    double score = 0;
    size_t start = 0;
    int64_t id = -1;  // -1: not reached yet
  };
  std::vector<Best> best(word.size() + 1);
  best[0].id = 0;
  auto offer = [&](size_t start, size_t end, double score, int64_t id) {
    Best& node = best[end];
    double candidate = best[start].score + score;
    if (node.id < 0 || candidate > node.score) node = {candidate, start, id};
  };
  for (size_t start = 0; start < word.size();) {
    size_t char_end = start;
    next_codepoint(word, char_end);
    bool single_char_piece = false;
    // Pieces starting here, shortest first (the order of HF's trie search, which decides ties).
    for (size_t end = char_end; end <= word.size() && end - start <= longest_piece_bytes_;) {
      auto it = ids_.find(word.substr(start, end - start));
      if (it != ids_.end()) {
        offer(start, end, pieces_[size_t(it->second)].score, it->second);
        if (end == char_end) single_char_piece = true;
      }
      if (end == word.size()) break;
      next_codepoint(word, end);
    }
    if (!single_char_piece) {
      check(unk_id_.has_value(),
            "{}: the text has a character that is not in the vocabulary and the model has no "
            "unk_id",
            where_);
      offer(start, char_end, unknown_score_, *unk_id_);
    }
    start = char_end;
  }
  // Walk back; consecutive unknown pieces fuse into one (HF Unigram always fuses).
  std::vector<std::string_view> pieces;
  size_t end = word.size();
  size_t unknown_end = std::string_view::npos;
  while (end > 0) {
    const Best& node = best[end];
    bool unknown = unk_id_ && node.id == *unk_id_;
    if (unknown) {
      if (unknown_end == std::string_view::npos) unknown_end = end;
    } else {
      if (unknown_end != std::string_view::npos) {
        pieces.push_back(word.substr(end, unknown_end - end));
        unknown_end = std::string_view::npos;
      }
      pieces.push_back(word.substr(node.start, end - node.start));
    }
    end = node.start;
  }
  if (unknown_end != std::string_view::npos) pieces.push_back(word.substr(0, unknown_end));
  std::reverse(pieces.begin(), pieces.end());
  return pieces;
}

void UnigramModel::tokenize(std::string_view word, std::vector<int64_t>& ids) const {
  for (std::string_view piece : segment(word)) {
    auto it = ids_.find(piece);
    if (it != ids_.end()) {
      ids.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int64_t> bytes;
      for (char byte : piece) {
        auto found = ids_.find(fmt::format("<0x{:02X}>", static_cast<unsigned char>(byte)));
        if (found == ids_.end()) break;
        bytes.push_back(found->second);
      }
      if (bytes.size() == piece.size()) {
        ids.insert(ids.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    check(unk_id_.has_value(), "{}: a piece is not in the vocabulary and there is no unk_id",
          where_);
    ids.push_back(*unk_id_);
  }
}

std::optional<int64_t> UnigramModel::token_to_id(std::string_view token) const {
  auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> UnigramModel::id_to_token(int64_t id) const {
  if (id < 0 || size_t(id) >= pieces_.size()) return std::nullopt;
  return pieces_[size_t(id)].text;
}

std::unique_ptr<Model> make_unigram_model(const Json& spec, const std::string& where) {
  const Json& vocab = array_field(spec, "vocab", where);
  std::vector<UnigramModel::Piece> pieces;
  pieces.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const Json& entry = vocab[i];
    check(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_number(),
          "{}.vocab[{}] should be a [piece, score] pair; the tokenizer.json is malformed", where,
          i);
    pieces.push_back({entry[0].get<std::string>(), entry[1].get<double>()});
  }
  check(!pieces.empty(), "{}.vocab is empty; the tokenizer.json is malformed", where);
  std::optional<int64_t> unk_id;
  if (spec.contains("unk_id") && !spec["unk_id"].is_null())
    unk_id = integer_field(spec, "unk_id", where);
  return std::make_unique<UnigramModel>(std::move(pieces), unk_id,
                                        bool_field_or(spec, "byte_fallback", false, where), where);
}

}  // namespace mmgen::tokenizers
