// The prefix cache (SGLang's RadixCache): a radix tree over token ids whose nodes own the KV-pool
// slots of their tokens, so a prompt that starts like an earlier one reuses that prefix's K/V
// and extends only the rest. Page-aligned: with page size P only whole pages match and are stored
// (keys are cut to len // P · P; children are keyed by their first page, so a split always falls
// on a page boundary). Nodes in use by a running request are locked; eviction frees the least
// recently used unlocked leaves until the cache fits its token budget.
// Causal layers only: an encoder-only layer's K/V of a prefix depend on what follows it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "attention/paged/kv_memory.h"

namespace mmgen::attention::paged {

class RadixCache {
 public:
  struct Node {
    std::vector<int64_t> key;    // tokens (a multiple of the page size)
    std::vector<int64_t> value;  // their slots
    Node* parent = nullptr;
    std::map<std::vector<int64_t>, std::unique_ptr<Node>> children;  // by first page
    int64_t lock_ref = 0;
    uint64_t last_access = 0;
  };

  struct Match {
    std::vector<int64_t> slots;  // of the matched prefix, in order
    Node* last_node = nullptr;   // lock it while the request runs
    int64_t length() const { return int64_t(slots.size()); }
  };

  struct Stats {
    int64_t lookups = 0;        // match_prefix calls
    int64_t hits = 0;           // ... that matched at least one page
    int64_t lookup_tokens = 0;  // tokens asked for
    int64_t hit_tokens = 0;     // tokens matched (the extend they saved)
    int64_t inserted_tokens = 0;
    int64_t evicted_tokens = 0;
  };

  // Slots of evicted nodes go back to `allocator`. `token_budget`: most tokens kept cached.
  RadixCache(PageAllocator& allocator, int64_t token_budget);
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  // The longest cached page-aligned prefix of `tokens`; refreshes its nodes' LRU time.
  Match match_prefix(std::span<const int64_t> tokens);
  // Stores the page-aligned part of (tokens, slots). Returns how many of those tokens were
  // already cached: the caller frees its own slots for them (they duplicate the cache's), and
  // its slots past the aligned part; the cache owns the rest from now on.
  int64_t insert(std::span<const int64_t> tokens, std::span<const int64_t> slots);

  void lock(Node* node);    // node and its ancestors cannot be evicted
  void unlock(Node* node);  // undoes one lock

  // Frees up to `tokens` tokens from unlocked leaves, oldest first; returns how many.
  int64_t evict(int64_t tokens);
  // Evicts what exceeds the budget.
  void enforce_budget();

  int64_t cached_tokens() const { return cached_tokens_; }
  int64_t locked_tokens() const { return locked_tokens_; }
  int64_t evictable_tokens() const { return cached_tokens_ - locked_tokens_; }
  int64_t page_size() const { return page_size_; }
  int64_t token_budget() const { return token_budget_; }
  const Stats& stats() const { return stats_; }
  // Frees every cached slot (all nodes must be unlocked) and clears the statistics.
  void reset();

 private:
  int64_t matched_pages(const std::vector<int64_t>& key, std::span<const int64_t> tokens) const;
  Node* split(Node* child, int64_t length);
  std::vector<int64_t> first_page(std::span<const int64_t> tokens) const;
  void free_subtree(Node* node);

  PageAllocator& allocator_;
  int64_t page_size_, token_budget_;
  std::unique_ptr<Node> root_;
  int64_t cached_tokens_ = 0, locked_tokens_ = 0;
  uint64_t clock_ = 0;
  Stats stats_;
};

}  // namespace mmgen::attention::paged
