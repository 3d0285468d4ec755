#include "attention/paged/cuda/paged_kv_pool.h"

#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::cuda::paged {

DeviceKVPool::DeviceKVPool(int64_t size, int64_t page_size, int64_t num_layers, int64_t kv_heads,
                           int64_t head_dim, bool keys_only)
    : rows_(size + page_size),
      page_size_(page_size),
      num_layers_(num_layers),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      buffers_(keys_only ? 1 : 2) {
  check(size > 0 && page_size >= 1 && num_layers > 0 && kv_heads > 0 && head_dim > 0,
        "GPU paged attention: a KV pool needs slots, a page size, layers, heads and a head size "
        "(got {}, {}, {}, {}, {})",
        size, page_size, num_layers, kv_heads, head_dim);
  check(row_elems() % 8 == 0,
        "GPU paged attention: kv_heads x head_dim = {} must be a multiple of 8 (16-byte rows)",
        row_elems());
  storage_ = DeviceBuffer(size_t(num_layers * buffers_ * rows_ * row_elems()) * 2);
  // Zeros: padded rows read page 0 before anything was written there.
  MMGEN_CUDA_CHECK(cudaMemset(storage_.data(), 0, storage_.size()));
}

void* DeviceKVPool::key_buffer(int64_t layer) const {
  check(layer >= 0 && layer < num_layers_, "GPU paged attention: layer {} of a {}-layer pool",
        layer, num_layers_);
  return static_cast<char*>(storage_.data()) + size_t(layer * buffers_ * rows_ * row_elems()) * 2;
}

void* DeviceKVPool::value_buffer(int64_t layer) const {
  if (keys_only()) return key_buffer(layer);
  return static_cast<char*>(key_buffer(layer)) + size_t(rows_ * row_elems()) * 2;
}

}  // namespace mmgen::cuda::paged
