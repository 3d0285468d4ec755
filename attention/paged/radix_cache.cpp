#include "attention/paged/radix_cache.h"

#include <algorithm>
#include <queue>

#include "core/error.h"

namespace mmgen::attention::paged {

RadixCache::RadixCache(PageAllocator& allocator, int64_t token_budget)
    : allocator_(allocator),
      page_size_(allocator.page_size()),
      token_budget_(token_budget),
      root_(std::make_unique<Node>()) {
  check(token_budget >= 0, "prefix cache: the token budget must not be negative, got {}",
        token_budget);
  root_->lock_ref = 1;  // the root is never evicted
}

RadixCache::~RadixCache() = default;

std::vector<int64_t> RadixCache::first_page(std::span<const int64_t> tokens) const {
  return {tokens.begin(), tokens.begin() + page_size_};
}

int64_t RadixCache::matched_pages(const std::vector<int64_t>& key,
                                  std::span<const int64_t> tokens) const {
  const int64_t limit = std::min<int64_t>(int64_t(key.size()), int64_t(tokens.size()));
  int64_t matched = 0;
  while (matched + page_size_ <= limit &&
         std::equal(key.begin() + matched, key.begin() + matched + page_size_,
                    tokens.begin() + matched))
    matched += page_size_;
  return matched;
}

RadixCache::Node* RadixCache::split(Node* child, int64_t length) {
  Node* parent = child->parent;
  auto head = std::make_unique<Node>();
  head->key.assign(child->key.begin(), child->key.begin() + length);
  head->value.assign(child->value.begin(), child->value.begin() + length);
  head->parent = parent;
  head->lock_ref = child->lock_ref;
  head->last_access = child->last_access;
  child->key.erase(child->key.begin(), child->key.begin() + length);
  child->value.erase(child->value.begin(), child->value.begin() + length);
  const std::vector<int64_t> parent_key = first_page(head->key);
  std::unique_ptr<Node> moved = std::move(parent->children[parent_key]);  // == child
  child->parent = head.get();
  head->children[first_page(child->key)] = std::move(moved);
  Node* result = head.get();
  parent->children[parent_key] = std::move(head);
  return result;
}

RadixCache::Match RadixCache::match_prefix(std::span<const int64_t> tokens) {
  Match match;
  ++stats_.lookups;
  stats_.lookup_tokens += int64_t(tokens.size());
  const int64_t aligned = int64_t(tokens.size()) / page_size_ * page_size_;
  Node* node = root_.get();
  int64_t position = 0;
  const uint64_t now = ++clock_;
  while (position < aligned) {  // an empty (sub-page) key matches nothing
    auto it = node->children.find(first_page(tokens.subspan(size_t(position))));
    if (it == node->children.end()) break;
    Node* child = it->second.get();
    child->last_access = now;
    const int64_t matched =
        matched_pages(child->key, tokens.subspan(size_t(position), size_t(aligned - position)));
    const bool partial = matched < int64_t(child->key.size());
    if (partial) child = split(child, matched);  // the match ends inside this node
    match.slots.insert(match.slots.end(), child->value.begin(), child->value.end());
    node = child;
    position += matched;
    if (partial) break;
  }
  match.last_node = node;
  if (match.length() > 0) ++stats_.hits;
  stats_.hit_tokens += match.length();
  return match;
}

int64_t RadixCache::insert(std::span<const int64_t> tokens, std::span<const int64_t> slots) {
  check(slots.size() >= tokens.size(), "prefix cache: {} tokens but {} slots", tokens.size(),
        slots.size());
  const int64_t aligned = int64_t(tokens.size()) / page_size_ * page_size_;
  Node* node = root_.get();
  int64_t position = 0, present = 0;
  const uint64_t now = ++clock_;
  while (position < aligned) {
    const auto rest = tokens.subspan(size_t(position), size_t(aligned - position));
    auto it = node->children.find(first_page(rest));
    if (it == node->children.end()) {
      auto fresh = std::make_unique<Node>();
      fresh->key.assign(rest.begin(), rest.end());
      fresh->value.assign(slots.begin() + position, slots.begin() + aligned);
      fresh->parent = node;
      fresh->last_access = now;
      cached_tokens_ += int64_t(rest.size());
      stats_.inserted_tokens += int64_t(rest.size());
      node->children[first_page(rest)] = std::move(fresh);
      break;
    }
    Node* child = it->second.get();
    child->last_access = now;
    const int64_t matched = matched_pages(child->key, rest);
    if (matched < int64_t(child->key.size())) child = split(child, matched);
    node = child;
    position += matched;
    present += matched;
  }
  return present;
}

void RadixCache::lock(Node* node) {
  for (; node && node != root_.get(); node = node->parent) {
    if (node->lock_ref == 0) locked_tokens_ += int64_t(node->key.size());
    ++node->lock_ref;
  }
}

void RadixCache::unlock(Node* node) {
  for (; node && node != root_.get(); node = node->parent) {
    check(node->lock_ref > 0, "prefix cache: a node was unlocked more often than locked");
    if (--node->lock_ref == 0) locked_tokens_ -= int64_t(node->key.size());
  }
}

int64_t RadixCache::evict(int64_t tokens) {
  using Entry = std::pair<uint64_t, Node*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> leaves;
  // Every unlocked leaf, oldest first.
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (auto& [key, child] : node->children) stack.push_back(child.get());
    if (node != root_.get() && node->children.empty() && node->lock_ref == 0)
      leaves.push({node->last_access, node});
  }
  int64_t evicted = 0;
  while (evicted < tokens && !leaves.empty()) {
    Node* node = leaves.top().second;
    leaves.pop();
    allocator_.free(node->value);
    const int64_t size = int64_t(node->key.size());
    evicted += size;
    cached_tokens_ -= size;
    Node* parent = node->parent;
    parent->children.erase(first_page(node->key));  // destroys node
    if (parent != root_.get() && parent->children.empty() && parent->lock_ref == 0)
      leaves.push({parent->last_access, parent});
  }
  stats_.evicted_tokens += evicted;
  return evicted;
}

void RadixCache::enforce_budget() {
  if (cached_tokens_ > token_budget_) evict(cached_tokens_ - token_budget_);
}

void RadixCache::free_subtree(Node* node) {
  for (auto& [key, child] : node->children) free_subtree(child.get());
  if (node != root_.get()) allocator_.free(node->value);
}

void RadixCache::reset() {
  check(locked_tokens_ == 0, "prefix cache: reset while {} tokens are in use", locked_tokens_);
  free_subtree(root_.get());
  root_->children.clear();
  cached_tokens_ = 0;
  stats_ = {};
}

}  // namespace mmgen::attention::paged
