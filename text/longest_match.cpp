#include "text/longest_match.h"

#include <algorithm>
#include <deque>

#include "core/error.h"

namespace mmgen::tokenizers {

int32_t LongestMatch::child(int32_t node, unsigned char byte) const {
  if (!built_) {
    // At most 256 siblings: a constant per byte added.
    for (int32_t c = nodes_[size_t(node)].first_child; c != 0; c = nodes_[size_t(c)].next_sibling)
      if (nodes_[size_t(c)].byte == byte) return c;
    return 0;
  }
  const auto begin = edge_byte_.begin() + first_edge_[size_t(node)];
  const auto end = edge_byte_.begin() + first_edge_[size_t(node) + 1];
  const auto it = std::lower_bound(begin, end, byte);
  return it != end && *it == byte ? edge_node_[size_t(it - edge_byte_.begin())] : 0;
}

void LongestMatch::add(std::string_view pattern, size_t id) {
  check(!pattern.empty(), "an added token must not be empty");
  check(!built_, "LongestMatch::add after build");
  int32_t node = 0;
  // Reversed: the automaton reads the text from its end.
  for (size_t i = pattern.size(); i-- > 0;) {
    const unsigned char byte = static_cast<unsigned char>(pattern[i]);
    int32_t next = child(node, byte);
    if (next == 0) {
      check(nodes_.size() < size_t(INT32_MAX), "added tokens too long in total");
      next = int32_t(nodes_.size());
      Node added;
      added.depth = nodes_[size_t(node)].depth + 1;
      added.byte = byte;
      added.next_sibling = nodes_[size_t(node)].first_child;
      nodes_.push_back(added);
      nodes_[size_t(node)].first_child = next;
    }
    node = next;
  }
  if (nodes_[size_t(node)].id == kNone) nodes_[size_t(node)].id = id;
}

void LongestMatch::build() {
  // The edges as sorted arrays, by node and then byte: each node's children sorted by byte (at
  // most 256 of them), in node order.
  first_edge_.assign(nodes_.size() + 1, 0);
  edge_byte_.clear();
  edge_node_.clear();
  edge_byte_.reserve(nodes_.size());
  edge_node_.reserve(nodes_.size());
  std::vector<std::pair<unsigned char, int32_t>> children;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    first_edge_[n] = uint32_t(edge_byte_.size());
    children.clear();
    for (int32_t c = nodes_[n].first_child; c != 0; c = nodes_[size_t(c)].next_sibling)
      children.emplace_back(nodes_[size_t(c)].byte, c);
    std::sort(children.begin(), children.end());
    for (const auto& [byte, c] : children) {
      edge_byte_.push_back(byte);
      edge_node_.push_back(c);
    }
  }
  first_edge_[nodes_.size()] = uint32_t(edge_byte_.size());
  built_ = true;

  // Failure links breadth first: a node's failure chain is shallower, so its `longest` is final
  // when the node is reached.
  std::deque<int32_t> queue = {0};
  while (!queue.empty()) {
    const int32_t node = queue.front();
    queue.pop_front();
    if (node != 0)
      nodes_[node].longest = nodes_[node].id != kNone ? node : nodes_[nodes_[node].fail].longest;
    for (uint32_t e = first_edge_[size_t(node)]; e < first_edge_[size_t(node) + 1]; ++e) {
      const unsigned char byte = edge_byte_[e];
      const int32_t next = edge_node_[e];
      if (node == 0) {
        nodes_[next].fail = 0;
        queue.push_back(next);
        continue;
      }
      int32_t fail = nodes_[node].fail;
      while (fail != 0 && child(fail, byte) == 0) fail = nodes_[fail].fail;
      const int32_t target = child(fail, byte);
      nodes_[next].fail = target != next ? target : 0;
      queue.push_back(next);
    }
  }
}

std::vector<size_t> LongestMatch::longest_at(std::string_view text) const {
  std::vector<size_t> out(text.size(), kNone);
  if (empty()) return out;
  int32_t state = 0;
  for (size_t i = text.size(); i-- > 0;) {
    const unsigned char byte = static_cast<unsigned char>(text[i]);
    while (state != 0 && child(state, byte) == 0) state = nodes_[state].fail;
    state = child(state, byte);
    // The patterns that are suffixes of what was read (text[i..] read backwards) are the ones
    // text[i..] starts with; the deepest is the longest.
    const int32_t longest = nodes_[state].longest;
    if (longest != 0) out[i] = nodes_[longest].id;
  }
  return out;
}

}  // namespace mmgen::tokenizers
