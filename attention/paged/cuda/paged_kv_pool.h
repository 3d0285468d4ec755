// The KV pool of the GPU paged backends: per layer, K and V as bf16 [rows, kv_heads, head_dim]
// on the device (one row per token slot, NHD), rows = size + page_size with page 0 (slots
// 0 .. page_size − 1) taking the writes of padded rows, as in the CPU pool (kv_memory.h). Slots
// are handed out by the same host allocators (PageAllocator, ReqToTokenPool): a slot means the
// same row here and there. bf16 because that is what the kernels read and what the model's
// products write; an fp32 pool would double the bytes decode streams for no accuracy the bf16
// K/V rows do not already limit.
#pragma once

#include <cstdint>

#include "core/cuda/device_memory.h"

namespace mmgen::cuda::paged {

class DeviceKVPool {
 public:
  // keys_only: one row per token and no V buffer (MLA's latent rows, whose first kv_lora_rank
  // columns are the values): value_buffer is key_buffer.
  DeviceKVPool(int64_t size, int64_t page_size, int64_t num_layers, int64_t kv_heads,
               int64_t head_dim, bool keys_only = false);

  int64_t num_layers() const { return num_layers_; }
  int64_t page_size() const { return page_size_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t rows() const { return rows_; }
  int64_t row_elems() const { return kv_heads_ * head_dim_; }
  int64_t pages() const { return rows_ / page_size_; }
  bool keys_only() const { return buffers_ == 1; }

  // Device pointers to one layer's [rows, kv_heads, head_dim] bf16 buffers.
  void* key_buffer(int64_t layer) const;
  void* value_buffer(int64_t layer) const;
  size_t bytes() const { return storage_.size(); }

 private:
  int64_t rows_, page_size_, num_layers_, kv_heads_, head_dim_;
  int64_t buffers_;       // 2: K and V; 1: K only
  DeviceBuffer storage_;  // [layers][K, V (unless keys only)][rows][kv_heads][head_dim]
};

}  // namespace mmgen::cuda::paged
