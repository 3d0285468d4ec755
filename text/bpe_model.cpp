#include "text/bpe_model.h"

#include <functional>
#include <limits>
#include <queue>

#include "text/utf8.h"

namespace mmgen::tokenizers {

BpeModel::BpeModel(TokenIds vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   Options options, const std::string& where)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  for (const auto& [token, id] : vocab_) {
    check(id >= 0 && id < (int64_t(1) << 31), "{}.vocab: id {} of '{}' is out of range", where, id,
          token);
    tokens_[id] = token;
  }
  if (options_.unk_token)
    check(vocab_.count(*options_.unk_token) != 0, "{}.unk_token '{}' is not in the vocabulary",
          where, *options_.unk_token);
  const size_t prefix = options_.continuing_subword_prefix.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto a = vocab_.find(left), b = vocab_.find(right);
    // The merged token drops the continuation prefix of its right part.
    std::string joined = left + (right.compare(0, prefix, options_.continuing_subword_prefix) == 0
                                     ? right.substr(prefix)
                                     : right);
    auto merged = vocab_.find(joined);
    check(a != vocab_.end() && b != vocab_.end() && merged != vocab_.end(),
          "{}.merges[{}] ('{}' '{}') uses a token missing from the vocabulary; the "
          "tokenizer.json is malformed",
          where, rank, left, right);
    merges_.try_emplace(pair_key(a->second, b->second), Merge{uint32_t(rank), merged->second});
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int64_t>& ids) const {
  if (options_.ignore_merges) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  // Initial symbols, one per character.
  std::vector<int64_t> symbols;
  std::optional<int64_t> pending_unknown;
  auto flush_unknown = [&]() {
    if (pending_unknown) symbols.push_back(*pending_unknown);
    pending_unknown.reset();
  };
  for (size_t pos = 0; pos < word.size();) {
    size_t start = pos;
    next_codepoint(word, pos);
    std::string piece(word.substr(start, pos - start));
    if (start > 0) piece.insert(0, options_.continuing_subword_prefix);
    if (pos == word.size()) piece += options_.end_of_word_suffix;
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      flush_unknown();
      symbols.push_back(it->second);
      continue;
    }
    if (options_.byte_fallback) {
      std::vector<int64_t> bytes;
      for (char byte : piece) {
        auto found = vocab_.find(fmt::format("<0x{:02X}>", static_cast<unsigned char>(byte)));
        if (found == vocab_.end()) break;
        bytes.push_back(found->second);
      }
      if (bytes.size() == piece.size()) {
        flush_unknown();
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (options_.unk_token) {
      int64_t unk = vocab_.find(*options_.unk_token)->second;
      if (!(pending_unknown && options_.fuse_unk)) {
        flush_unknown();
        pending_unknown = unk;
      }
    }
    // Without an unk token an unknown character is dropped, as HF does.
  }
  flush_unknown();

  merge_all(symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
}

// Merges the best-ranked adjacent pair until none is left: the lowest rank first, the leftmost of
// equal ranks (HF's Word::merge_all). The symbols form a list by index, and a min-heap holds the
// candidate pairs by (rank, index of the left symbol): original indices keep the left-to-right
// order, so the heap's order is the rescanning loop's, in O(n log n) instead of O(n²) (a run of
// 16,000 spaces under a real vocabulary's space merges took 0.6 s; 200,000 would take 90).
// An entry whose pair has changed since it was pushed is skipped when it comes up.
void BpeModel::merge_all(std::vector<int64_t>& symbols) const {
  const int64_t n = int64_t(symbols.size());
  if (n < 2) return;
  // Most of a prompt's words are short: for them rescanning costs less than the heap's set-up (a
  // 512-token prompt encoded 10-15% faster so), and it takes the pairs in the same order.
  constexpr int64_t kShortWord = 24;
  if (n <= kShortWord) {
    while (symbols.size() > 1) {
      uint32_t best_rank = std::numeric_limits<uint32_t>::max();
      size_t best_at = 0;
      int64_t best_result = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        auto it = merges_.find(pair_key(symbols[i], symbols[i + 1]));
        if (it != merges_.end() && it->second.rank < best_rank) {
          best_rank = it->second.rank;
          best_at = i;
          best_result = it->second.result;
        }
      }
      if (best_rank == std::numeric_limits<uint32_t>::max()) return;
      symbols[best_at] = best_result;
      symbols.erase(symbols.begin() + std::ptrdiff_t(best_at) + 1);
    }
    return;
  }
  std::vector<int64_t> previous(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<bool> alive(size_t(n), true);
  for (int64_t i = 0; i < n; ++i)
    previous[size_t(i)] = i - 1, next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  struct Candidate {
    uint32_t rank;
    int64_t at;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : at > other.at;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](int64_t left) {
    const int64_t right = left < 0 ? -1 : next[size_t(left)];
    if (right < 0) return;
    const auto it = merges_.find(pair_key(symbols[size_t(left)], symbols[size_t(right)]));
    if (it != merges_.end()) heap.push({it->second.rank, left});
  };
  for (int64_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const int64_t left = top.at, right = next[size_t(left)];
    if (!alive[size_t(left)] || right < 0) continue;
    const auto it = merges_.find(pair_key(symbols[size_t(left)], symbols[size_t(right)]));
    if (it == merges_.end() || it->second.rank != top.rank) continue;  // changed since pushed
    symbols[size_t(left)] = it->second.result;
    alive[size_t(right)] = false;
    next[size_t(left)] = next[size_t(right)];
    if (next[size_t(right)] >= 0) previous[size_t(next[size_t(right)])] = left;
    push(previous[size_t(left)]);
    push(left);
  }
  size_t kept = 0;
  for (int64_t i = 0; i >= 0; i = next[size_t(i)]) symbols[kept++] = symbols[size_t(i)];
  symbols.resize(kept);
}

std::optional<int64_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> BpeModel::id_to_token(int64_t id) const {
  auto it = tokens_.find(id);
  if (it == tokens_.end()) return std::nullopt;
  return it->second;
}

std::unique_ptr<Model> make_bpe_model(const Json& spec, const std::string& where) {
  const Json& vocab_json = field(spec, "vocab", where);
  check(vocab_json.is_object(), "{}.vocab should be an object of token: id", where);
  TokenIds vocab;
  vocab.reserve(vocab_json.size());
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    check(it.value().is_number_integer(), "{}.vocab['{}'] should be an integer id", where,
          it.key());
    vocab.emplace(it.key(), it.value().get<int64_t>());
  }
  const Json& merges_json = array_field(spec, "merges", where);
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_json.size());
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const Json& m = merges_json[i];
    if (m.is_string()) {  // "left right"
      const std::string& text = m.get_ref<const std::string&>();
      size_t space = text.find(' ', 1);
      check(space != std::string::npos && text.find(' ', space + 1) == std::string::npos,
            "{}.merges[{}] '{}' should be two tokens separated by one space", where, i, text);
      merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else {
      check(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
            "{}.merges[{}] should be a pair of tokens", where, i);
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  BpeModel::Options options;
  if (spec.contains("unk_token") && !spec["unk_token"].is_null())
    options.unk_token = string_field(spec, "unk_token", where);
  options.continuing_subword_prefix = string_field_or(spec, "continuing_subword_prefix", "", where);
  options.end_of_word_suffix = string_field_or(spec, "end_of_word_suffix", "", where);
  options.fuse_unk = bool_field_or(spec, "fuse_unk", false, where);
  options.byte_fallback = bool_field_or(spec, "byte_fallback", false, where);
  options.ignore_merges = bool_field_or(spec, "ignore_merges", false, where);
  check(!spec.contains("dropout") || spec["dropout"].is_null() ||
            (spec["dropout"].is_number() && spec["dropout"].get<double>() == 0.0),
        "{}.dropout is set: BPE dropout is random and only meant for training; remove it", where);
  return std::make_unique<BpeModel>(std::move(vocab), merges, std::move(options), where);
}

}  // namespace mmgen::tokenizers
