#include "attention/paged/forward_batch.h"

#include <algorithm>

#include "core/error.h"

namespace mmgen::attention::paged {

std::string_view forward_mode_name(ForwardMode mode) {
  switch (mode) {
    case ForwardMode::Extend:
      return "extend";
    case ForwardMode::Decode:
      return "decode";
    case ForwardMode::Idle:
      return "idle";
  }
  return "?";
}

int64_t ForwardBatch::max_extend_len() const {
  int64_t m = 0;
  for (int64_t n : extend_seq_lens) m = std::max(m, n);
  return m;
}

int64_t ForwardBatch::max_seq_len() const {
  int64_t m = 0;
  for (int64_t n : seq_lens) m = std::max(m, n);
  return m;
}

bool ForwardBatch::has_prefix() const {
  return std::any_of(extend_prefix_lens.begin(), extend_prefix_lens.end(),
                     [](int64_t n) { return n > 0; });
}

void ForwardBatch::finish_metadata() {
  const size_t bs = seq_lens.size();
  if (mode == ForwardMode::Decode) {
    extend_prefix_lens.resize(bs);
    extend_seq_lens.assign(bs, 1);
    for (size_t i = 0; i < bs; ++i) extend_prefix_lens[i] = seq_lens[i] - 1;
  }
  check(extend_prefix_lens.size() == bs && extend_seq_lens.size() == bs,
        "paged attention: {} requests but {} prefix lengths and {} extend lengths", bs,
        extend_prefix_lens.size(), extend_seq_lens.size());
  check(valid_lens.empty() || valid_lens.size() == bs,
        "paged attention: {} requests but {} valid lengths", bs, valid_lens.size());
  extend_start_loc.assign(bs, 0);
  positions.clear();
  int64_t total = 0;
  for (size_t i = 0; i < bs; ++i) {
    check(extend_seq_lens[i] >= 0 && extend_prefix_lens[i] >= 0 &&
              extend_prefix_lens[i] + extend_seq_lens[i] == seq_lens[i],
          "paged attention: request {} has prefix {} + new {} != length {}", i,
          extend_prefix_lens[i], extend_seq_lens[i], seq_lens[i]);
    if (!valid_lens.empty())
      check(valid_lens[i] >= 1 && valid_lens[i] <= seq_lens[i],
            "paged attention: request {} has {} valid tokens of {}", i, valid_lens[i], seq_lens[i]);
    extend_start_loc[i] = total;
    for (int64_t j = 0; j < extend_seq_lens[i]; ++j) positions.push_back(extend_prefix_lens[i] + j);
    total += extend_seq_lens[i];
  }
  num_tokens = total;
  check(out_cache_loc.empty() || int64_t(out_cache_loc.size()) == total,
        "paged attention: {} new tokens but {} cache slots", total, out_cache_loc.size());
  check(input_ids.empty() || int64_t(input_ids.size()) == total,
        "paged attention: {} new tokens but {} input ids", total, input_ids.size());
  if (req_pool_indices.empty()) req_pool_indices.assign(bs, -1);
}

ForwardBatch ForwardBatch::encoder_only(const std::vector<int64_t>& lengths,
                                        const std::vector<int64_t>& valid_lens) {
  ForwardBatch batch;
  batch.mode = ForwardMode::Extend;
  batch.seq_lens = lengths;
  batch.extend_seq_lens = lengths;
  batch.extend_prefix_lens.assign(lengths.size(), 0);
  batch.valid_lens = valid_lens;
  batch.finish_metadata();
  return batch;
}

}  // namespace mmgen::attention::paged
