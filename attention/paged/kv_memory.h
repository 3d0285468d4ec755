// The paged KV memory the text encoders' attention runs on, after SGLang's mem_cache design:
//   - ReqToTokenPool: one row per live request; row r, column j = the KV-pool slot of token j;
//   - PageAllocator: hands out whole pages of `page_size` tokens (1 or more) and frees by page;
//     a request's last partial page is filled before a new page is taken; page 0 is reserved;
//   - KVPool: per layer, K and V as [slots, kv_heads, head_dim] float32 (one row per token,
//     NHD), plus optional per-token state rows a model caches with its KV (e.g. hidden states a
//     prefix-cache hit must give back). Slots 0 .. page_size - 1 (page 0) take padding writes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace mmgen::attention::paged {

class ReqToTokenPool {
 public:
  ReqToTokenPool(int64_t rows, int64_t max_context_len);
  // A free row, or nothing when every row is taken.
  std::optional<int64_t> alloc();
  void free(int64_t row);
  int64_t* row(int64_t index) { return table_.data() + index * max_context_len_; }
  const int64_t* row(int64_t index) const { return table_.data() + index * max_context_len_; }
  int64_t rows() const { return rows_; }
  int64_t max_context_len() const { return max_context_len_; }
  int64_t available() const { return int64_t(free_rows_.size()); }

 private:
  int64_t rows_, max_context_len_;
  std::vector<int64_t> table_;
  std::vector<int64_t> free_rows_;
  std::vector<bool> in_use_;
};

class PageAllocator {
 public:
  // `size` tokens of capacity (rounded down to whole pages), page 0 excluded.
  PageAllocator(int64_t size, int64_t page_size);

  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t available_pages() const { return int64_t(free_pages_.size()); }
  int64_t available_tokens() const { return available_pages() * page_size_; }

  // `count` whole pages' worth of slots (count % page_size == 0), or nothing when short.
  std::optional<std::vector<int64_t>> alloc(int64_t count);

  // Slots for the new tokens of a batch of requests (SGLang's alloc_extend): request i has
  // prefix_lens[i] tokens in the pool, its last one at last_locs[i] (−1 when it has none), and
  // grows to seq_lens[i]. Each request first fills the rest of its last partial page, then takes
  // whole new pages. All or nothing: false (and `out` untouched) when the pages do not suffice.
  bool alloc_extend(std::span<const int64_t> prefix_lens, std::span<const int64_t> seq_lens,
                    std::span<const int64_t> last_locs, std::vector<int64_t>& out);
  // One slot per request after its last token (`seq_lens` counts the new token).
  bool alloc_decode(std::span<const int64_t> seq_lens, std::span<const int64_t> last_locs,
                    std::vector<int64_t>& out);

  // Frees the pages these slots lie in (each page once). Freeing a free page or page 0 throws.
  void free(std::span<const int64_t> slots);
  // Every page back to free.
  void clear();

 private:
  int64_t take_page();

  int64_t page_size_, num_pages_;
  std::vector<int64_t> free_pages_;  // a stack: the lowest page is handed out first
  std::vector<bool> page_free_;
};

class KVPool {
 public:
  // `size` token slots (plus the padding page), `state_width` floats of per-token state (0: none).
  // num_layers 0: the states only (a GPU runner, whose K/V live in the backend's device pool).
  // keys_only: one row per token, no separate V (MLA's latent rows, whose first kv_lora_rank
  // columns are the values): value_buffer is key_buffer and set_kv ignores v.
  KVPool(int64_t size, int64_t page_size, int64_t num_layers, int64_t kv_heads, int64_t head_dim,
         int64_t state_width = 0, bool keys_only = false);

  int64_t num_layers() const { return int64_t(k_.size()); }
  int64_t page_size() const { return page_size_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t rows() const { return rows_; }  // size + page_size
  int64_t row_floats() const { return kv_heads_ * head_dim_; }
  int64_t state_width() const { return state_width_; }
  bool keys_only() const { return keys_only_; }

  // [rows, kv_heads, head_dim] views of one layer's buffers.
  Tensor& key_buffer(int64_t layer) { return k_[size_t(layer)]; }
  Tensor& value_buffer(int64_t layer) { return v_[size_t(layer)]; }
  const Tensor& key_buffer(int64_t layer) const { return k_[size_t(layer)]; }
  const Tensor& value_buffer(int64_t layer) const { return v_[size_t(layer)]; }

  // Scatters k, v [n, kv_heads, head_dim] (any strides) to `slots` (set_kv_buffer).
  void set_kv(int64_t layer, std::span<const int64_t> slots, const Tensor& k, const Tensor& v);

  // Per-token state rows [rows, state_width].
  Tensor& states() { return states_; }
  const Tensor& states() const { return states_; }

 private:
  int64_t rows_, page_size_, kv_heads_, head_dim_, state_width_;
  bool keys_only_;
  std::vector<Tensor> k_, v_;
  Tensor states_;
};

}  // namespace mmgen::attention::paged
