// The block-sparse attention core the sparse backends share (STA, VSA's fine branch, V-MoBA, SLA's
// sparse branch, SVG2): FlashAttention-style online softmax where each query block visits only
// the key blocks on its list. Backends reorder tokens first (so blocks are contiguous ranges),
// build a pattern, call this, and undo the reorder.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mmgen::attention {

// Contiguous token ranges: block i is tokens [start[i], start[i] + length[i]). Lengths may differ
// (partial edge tiles, cluster sizes); a block of length 0 is allowed and contributes nothing.
struct BlockLayout {
  std::vector<int64_t> start;
  std::vector<int64_t> length;
  int64_t size() const { return int64_t(start.size()); }
  // Blocks of `block` tokens over `tokens` (the last may be shorter).
  static BlockLayout uniform(int64_t tokens, int64_t block);
};

// For each query block, the key blocks it visits, in CSR form: the key blocks of query block i are
// indices[indptr[i] .. indptr[i + 1]). Order within a list does not matter; repeats are not
// allowed.
struct BlockSparsePattern {
  BlockLayout q_blocks;
  BlockLayout kv_blocks;
  std::vector<int64_t> indptr;  // q_blocks.size() + 1 entries
  std::vector<int32_t> indices;
  int64_t visited() const { return int64_t(indices.size()); }
  int64_t total() const { return q_blocks.size() * kv_blocks.size(); }
  // Every query block visits every key block.
  static BlockSparsePattern dense(BlockLayout q_blocks, BlockLayout kv_blocks);
  // Checks ranges and lists against sequence lengths; throws Error naming the first problem.
  void validate(int64_t q_len, int64_t kv_len) const;
};

// q [B, Sq, H, D], k and v [B, Sk, H, D] float32. `patterns` holds either one pattern for every
// (batch, head), H patterns (one per head, shared across the batch) or B·H patterns (index b·H +
// h). Query tokens outside every query block get zeros; a query block with an empty list gets zeros
// (and LSE −inf). Returns [B, Sq, H, D]; when `lse` is non-null it receives [B, H, Sq] natural-log
// sum-exp of the scaled scores (for merging partial results).
Tensor block_sparse_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                              const std::vector<BlockSparsePattern>& patterns,
                              Tensor* lse = nullptr);

// The same attention with the token reorder folded in: query block i of pattern p is the query
// tokens q_orders[p][q_blocks.start[i] ..+ length[i]] and key block j the key tokens
// k_orders[p][kv_blocks.start[j] ..+ length[j]] (an order of null / an empty vector is the
// identity), so the result equals scatter(block_sparse_attention(gather(q), gather(k), gather(v)))
// per (batch, head) without building the reordered tensors. `q_orders` / `k_orders` hold one order
// per pattern. Each query tile's keys are gathered, whatever blocks they come from, into chunks of
// 128 keys in the flash kernel's panel layout, so many small key blocks (Sparse VideoGen 2's
// clusters of ~16 tokens) cost what few large ones do: one softmax rescale per chunk.
// Same arguments and results as block_sparse_attention otherwise (query tokens in no block, and
// blocks with an empty list, get zeros and LSE −inf).
Tensor gathered_block_sparse_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                       float scale, const std::vector<BlockSparsePattern>& patterns,
                                       const std::vector<std::vector<int64_t>>* q_orders,
                                       const std::vector<std::vector<int64_t>>* k_orders,
                                       Tensor* lse = nullptr);

// Merges two partial attention results over disjoint key sets by their LSEs:
// out = (e^{lse_a} o_a + e^{lse_b} o_b) / (e^{lse_a} + e^{lse_b}). o [B, Sq, H, D], lse [B, H, Sq].
void merge_by_lse(Tensor& out_a, Tensor& lse_a, const Tensor& out_b, const Tensor& lse_b);

// Token reordering: result[:, i] = x[:, index[i]] along dimension 1 of a [B, S, H, D] tensor, and
// its inverse (result[:, index[i]] = x[:, i]).
Tensor gather_tokens(const Tensor& x, const std::vector<int64_t>& index);
Tensor scatter_tokens(const Tensor& x, const std::vector<int64_t>& index, int64_t length);

}  // namespace mmgen::attention
