#include "attention/paged/kv_memory.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace mmgen::attention::paged {

namespace {

int64_t pages_for(int64_t tokens, int64_t page_size) {
  return (tokens + page_size - 1) / page_size;
}

}  // namespace

// ------------------------------------------------------------------ ReqToTokenPool

ReqToTokenPool::ReqToTokenPool(int64_t rows, int64_t max_context_len)
    : rows_(rows), max_context_len_(max_context_len) {
  check(rows > 0 && max_context_len > 0,
        "paged attention: the request table needs rows and a context length (got {} x {})", rows,
        max_context_len);
  table_.assign(size_t(rows * max_context_len), 0);
  in_use_.assign(size_t(rows), false);
  for (int64_t r = rows - 1; r >= 0; --r) free_rows_.push_back(r);
}

std::optional<int64_t> ReqToTokenPool::alloc() {
  if (free_rows_.empty()) return std::nullopt;
  const int64_t r = free_rows_.back();
  free_rows_.pop_back();
  in_use_[size_t(r)] = true;
  return r;
}

void ReqToTokenPool::free(int64_t row) {
  check(row >= 0 && row < rows_ && in_use_[size_t(row)],
        "paged attention: request row {} freed twice or never allocated", row);
  in_use_[size_t(row)] = false;
  free_rows_.push_back(row);
}

// ------------------------------------------------------------------ PageAllocator

PageAllocator::PageAllocator(int64_t size, int64_t page_size) : page_size_(page_size) {
  check(page_size >= 1, "paged attention: --page-size must be at least 1, got {}", page_size);
  num_pages_ = size / page_size;
  check(num_pages_ >= 1, "paged attention: a pool of {} tokens holds no page of {} tokens", size,
        page_size);
  clear();
}

void PageAllocator::clear() {
  free_pages_.clear();
  for (int64_t p = num_pages_; p >= 1; --p) free_pages_.push_back(p);
  page_free_.assign(size_t(num_pages_ + 1), true);
  page_free_[0] = false;  // the padding page is never handed out
}

int64_t PageAllocator::take_page() {
  const int64_t page = free_pages_.back();
  free_pages_.pop_back();
  page_free_[size_t(page)] = false;
  return page;
}

std::optional<std::vector<int64_t>> PageAllocator::alloc(int64_t count) {
  check(count % page_size_ == 0, "paged attention: alloc({}) is not whole pages of {}", count,
        page_size_);
  if (count / page_size_ > available_pages()) return std::nullopt;
  std::vector<int64_t> slots;
  slots.reserve(size_t(count));
  for (int64_t p = 0; p < count / page_size_; ++p) {
    const int64_t page = take_page();
    for (int64_t i = 0; i < page_size_; ++i) slots.push_back(page * page_size_ + i);
  }
  return slots;
}

bool PageAllocator::alloc_extend(std::span<const int64_t> prefix_lens,
                                 std::span<const int64_t> seq_lens,
                                 std::span<const int64_t> last_locs, std::vector<int64_t>& out) {
  const size_t n = prefix_lens.size();
  check(seq_lens.size() == n && last_locs.size() == n,
        "paged attention: alloc_extend got {} prefix lengths, {} sequence lengths, {} last slots",
        n, seq_lens.size(), last_locs.size());
  int64_t pages_needed = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t prefix = prefix_lens[i], seq = seq_lens[i];
    check(prefix >= 0 && seq >= prefix, "paged attention: request {} grows from {} to {} tokens", i,
          prefix, seq);
    // A request's tokens are contiguous within each page: its next slot continues its last one.
    check(prefix % page_size_ == 0 ||
              (last_locs[i] >= 0 && (last_locs[i] + 1) % page_size_ == prefix % page_size_),
          "paged attention: request {} has {} tokens but its last slot {} is not where page {} "
          "leaves off",
          i, prefix, last_locs[i], page_size_);
    pages_needed += pages_for(seq, page_size_) - pages_for(prefix, page_size_);
  }
  if (pages_needed > available_pages()) return false;
  for (size_t i = 0; i < n; ++i) {
    int64_t position = prefix_lens[i];
    const int64_t seq = seq_lens[i];
    if (position % page_size_ != 0) {  // the rest of the last partial page
      const int64_t count = std::min(seq - position, page_size_ - position % page_size_);
      for (int64_t j = 1; j <= count; ++j) out.push_back(last_locs[i] + j);
      position += count;
    }
    while (position < seq) {  // whole pages, then the start of a final partial one
      const int64_t page = take_page(), count = std::min(page_size_, seq - position);
      for (int64_t j = 0; j < count; ++j) out.push_back(page * page_size_ + j);
      position += count;
    }
  }
  return true;
}

bool PageAllocator::alloc_decode(std::span<const int64_t> seq_lens,
                                 std::span<const int64_t> last_locs, std::vector<int64_t>& out) {
  std::vector<int64_t> prefix(seq_lens.size());
  for (size_t i = 0; i < seq_lens.size(); ++i) prefix[i] = seq_lens[i] - 1;
  return alloc_extend(prefix, seq_lens, last_locs, out);
}

void PageAllocator::free(std::span<const int64_t> slots) {
  std::vector<int64_t> pages;
  pages.reserve(slots.size() / size_t(page_size_) + 1);
  for (int64_t slot : slots) {
    const int64_t page = slot / page_size_;
    if (pages.empty() || pages.back() != page) pages.push_back(page);
  }
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  for (int64_t page : pages)  // check all before changing anything
    check(page >= 1 && page <= num_pages_ && !page_free_[size_t(page)],
          "paged attention: page {} freed twice, never allocated, or outside the pool", page);
  for (int64_t page : pages) {
    page_free_[size_t(page)] = true;
    free_pages_.push_back(page);
  }
}

// ------------------------------------------------------------------ KVPool

KVPool::KVPool(int64_t size, int64_t page_size, int64_t num_layers, int64_t kv_heads,
               int64_t head_dim, int64_t state_width, bool keys_only)
    : rows_(size + page_size),
      page_size_(page_size),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      state_width_(state_width),
      keys_only_(keys_only) {
  check(num_layers >= 0 && kv_heads > 0 && head_dim > 0,
        "paged attention: a KV pool needs layers, heads and a head size (got {}, {}, {})",
        num_layers, kv_heads, head_dim);
  for (int64_t l = 0; l < num_layers; ++l) {
    k_.push_back(Tensor::zeros({rows_, kv_heads, head_dim}));
    // Keys only (MLA's latent rows): the value buffer is the key buffer (a view, same storage).
    v_.push_back(keys_only ? k_.back() : Tensor::zeros({rows_, kv_heads, head_dim}));
  }
  if (state_width > 0) states_ = Tensor::zeros({rows_, state_width});
}

void KVPool::set_kv(int64_t layer, std::span<const int64_t> slots, const Tensor& k,
                    const Tensor& v) {
  const int64_t n = int64_t(slots.size());
  check(k.dim() == 3 && k.size(0) == n && k.size(1) == kv_heads_ && k.size(2) == head_dim_ &&
            (keys_only_ || v.shape() == k.shape()),
        "paged attention: K/V {} for {} slots do not fit a pool of [{}, {}]",
        shape_string(k.shape()), n, kv_heads_, head_dim_);
  if (keys_only_) {  // v is part of k
    const Tensor kc = k.contiguous();
    const int64_t row = row_floats();
    float* kb = k_[size_t(layer)].data<float>();
    const float* ks = kc.data<float>();
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(kb + slots[size_t(i)] * row, ks + i * row, size_t(row) * sizeof(float));
    return;
  }
  const Tensor kc = k.contiguous(), vc = v.contiguous();
  const int64_t row = row_floats();
  float* kb = k_[size_t(layer)].data<float>();
  float* vb = v_[size_t(layer)].data<float>();
  const float* ks = kc.data<float>();
  const float* vs = vc.data<float>();
#pragma omp parallel for schedule(static) if (n * row >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = slots[size_t(i)];
    std::memcpy(kb + slot * row, ks + i * row, size_t(row) * sizeof(float));
    std::memcpy(vb + slot * row, vs + i * row, size_t(row) * sizeof(float));
  }
}

}  // namespace mmgen::attention::paged
