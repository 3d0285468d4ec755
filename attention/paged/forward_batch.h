// What one forward pass of a paged-attention model tells every attention layer (SGLang's
// ForwardBatch): the mode, and per request its row in the request table, its KV length after this
// step, how much of it was already cached, how many new tokens it brings, where those start in
// the packed batch, the pool slots they write, and their positions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "attention/paged/kv_memory.h"

namespace mmgen::attention::paged {

// Extend: a prefill of new tokens, possibly after a cached prefix. Decode: one new token per
// request. Idle: nothing to do (the layer returns an empty result).
enum class ForwardMode { Extend, Decode, Idle };
std::string_view forward_mode_name(ForwardMode mode);

struct ForwardBatch {
  ForwardMode mode = ForwardMode::Extend;

  // Per request (all the same length: the batch size).
  std::vector<int64_t> req_pool_indices;    // row in req_to_token (unused by encoder-only layers)
  std::vector<int64_t> seq_lens;            // KV length after this step: prefix + new
  std::vector<int64_t> extend_prefix_lens;  // tokens already in the pool (decode: seq_len − 1)
  std::vector<int64_t> extend_seq_lens;     // new tokens (decode: 1)
  std::vector<int64_t> extend_start_loc;    // exclusive prefix sum of extend_seq_lens
  // Encoder-only padding, empty when there is none: keys at positions ≥ valid_lens[i] are
  // padding (a right-padded row run as is: its pad rows are queries that attend the real tokens).
  std::vector<int64_t> valid_lens;

  // Per new token (num_tokens entries, packed request after request).
  std::vector<int64_t> out_cache_loc;  // pool slot it writes (empty when nothing is written)
  std::vector<int64_t> positions;      // its position in its request
  std::vector<int64_t> input_ids;      // its token id (optional; for the model's embedding)
  int64_t num_tokens = 0;

  // The memory (null for encoder-only forwards, which neither read nor write a pool).
  ReqToTokenPool* req_to_token = nullptr;
  KVPool* kv_pool = nullptr;

  int64_t batch_size() const { return int64_t(seq_lens.size()); }
  int64_t valid_len(int64_t request) const {
    return valid_lens.empty() ? seq_lens[size_t(request)] : valid_lens[size_t(request)];
  }
  int64_t max_extend_len() const;
  int64_t max_seq_len() const;
  bool has_prefix() const;  // any request with cached tokens

  // Fills extend_start_loc, positions and num_tokens from the per-request lengths (extend:
  // arange(prefix, prefix + new); decode: seq_len − 1) and checks that everything fits together.
  void finish_metadata();

  // An encoder-only extend over packed requests of these lengths (no pool, no prefix).
  static ForwardBatch encoder_only(const std::vector<int64_t>& lengths,
                                   const std::vector<int64_t>& valid_lens = {});
};

}  // namespace mmgen::attention::paged
