// For every position of a text, the longest of a set of byte strings that starts there, in one
// pass over the text: an Aho-Corasick automaton over the reversed strings, run over the text from
// its end. Added-token matching (added_vocabulary.cpp) used to compare every token of a bucket at
// every position, which took 91 s for 100k tokens and a prompt of 100k '<'; this is linear in the
// text and the strings' total length, whatever they hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace mmgen::tokenizers {

class LongestMatch {
 public:
  static constexpr size_t kNone = size_t(-1);

  // Adds `pattern` (non-empty) under `id`; a pattern added twice keeps its first id.
  void add(std::string_view pattern, size_t id);
  // Computes the failure links; call once after the last add().
  void build();
  bool empty() const { return nodes_.size() <= 1; }

  // For each byte offset i of `text`: the id of the longest pattern `text` has at i, or kNone.
  std::vector<size_t> longest_at(std::string_view text) const;

 private:
  struct Node {
    int32_t fail = 0;
    int32_t longest = 0;  // the deepest node on the failure chain (itself included) ending a
                          // pattern; 0 when none
    size_t id = kNone;    // set on a node that ends a pattern
    uint32_t depth = 0;
    // While adding, the children as a list (first child, next sibling; 0 ends it) and the byte
    // that leads here: no allocation per node, so a large set is built in one array.
    int32_t first_child = 0, next_sibling = 0;
    unsigned char byte = 0;
  };
  // The node `byte` leads to from `node`; 0 (the root) when none.
  int32_t child(int32_t node, unsigned char byte) const;

  std::vector<Node> nodes_ = std::vector<Node>(1);
  // build() moves the edges into these arrays, sorted by node and byte (compact, so a large set
  // stays in the caches).
  bool built_ = false;
  std::vector<uint32_t> first_edge_;  // per node, then one past the last edge
  std::vector<unsigned char> edge_byte_;
  std::vector<int32_t> edge_node_;
};

}  // namespace mmgen::tokenizers
