// V-MoBA's steps around the attention kernel on the GPU, over video tokens already regrouped into
// the padded chunk order of box_layout.h (chunk c is slots [c·stride, c·stride + lengths[c]), its
// tokens in the CPU chunking's order, zero rows after): the chunk mean keys, every query's choice
// of chunks (the CPU's rule, attention/backends/vmoba_attn/vmoba_select.h, for one query and head
// at a time), the expert runs (per batch and head, the queries that chose chunk c gathered into
// one run of rows) and the log-sum-exp merge of the own-chunk and expert results.
// attention/backends/vmoba_attn/vmoba_attn_cuda.cpp drives them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// 32-bit words of one query's bitmask over the chunks.
inline int64_t vmoba_mask_words(int64_t chunks) {
  return (chunks + 31) / 32;
}

// The chunk mean keys, split so that bf16 products give float32-exact scores (q·hi + q·mid + q·lo
// with float32 accumulation is q·m to float32 rounding): the mean m of chunk c's valid slots of x
// (summed in double, exact in any order for bf16 values, then rounded to float, as the CPU does) is
// written as three bf16 parts, hi = bf16(m), mid = bf16(m − hi), lo = bf16(m − hi − mid), at
// parts[((b·H + h)·rows + c)·3D + p·D + d] for p = 0, 1, 2 (rows >= chunks: each pair's block of
// rows may be padded for the product; the padding is left as it is). x is
// [batch, chunks·stride, H·D] bf16 (bits).
void vmoba_split_means(const void* x, uint16_t* parts, int64_t rows, int64_t batch, int64_t chunks,
                       int64_t stride, int64_t heads, int64_t head_dim, const int32_t* lengths,
                       cudaStream_t stream = nullptr);

// One (batch, head)'s queries, each written three times along its row: y[s, p·D + d] =
// x[b, s, h·D + d] for p = 0, 1, 2, so that one product y · partsᵀ (k = 3D, float32
// accumulation) is q·hi + q·mid + q·lo: q·m to float32 rounding. x as above, y [slots, 3D].
void vmoba_tripled_queries(const void* x, uint16_t* y, int64_t b, int64_t h, int64_t slots,
                           int64_t heads, int64_t head_dim, cudaStream_t stream = nullptr);

// Largest chunk count vmoba_select takes (each query's keys sit in shared memory).
int64_t vmoba_max_chunks();

// Every query's chosen chunks for `pairs` (batch, head) pairs, by the CPU's query_head rule: scores
// min-max normalised per query, its own chunk always kept (and not marked), the others taken in
// descending order (ties: lower chunk first) until their mass reaches max(0, threshold − own
// share) of the total, at least one; or, in top-k mode, the topk − 1 highest raw scores.
struct VmobaSelectArgs {
  const float* scores = nullptr;     // [pairs, slots, score_stride]: q · chunk mean key (no scale)
  const int32_t* lengths = nullptr;  // [chunks]: valid slots per chunk (padding slots choose none)
  int64_t pairs = 1, slots = 0, chunks = 0, stride = 0;
  int64_t score_stride = 0;  // floats per query's scores, at least chunks
  bool topk_mode = false;
  int64_t topk = 1;
  double threshold = 0.25;
  uint32_t* chosen = nullptr;       // [pairs, slots, words]: bit c set when the query chose c
  int32_t* chunk_counts = nullptr;  // [pairs, chunks], zeroed by the caller: += queries choosing c
};
void vmoba_select(const VmobaSelectArgs& args, cudaStream_t stream = nullptr);

// The expert runs from the choices of every (batch, head) pair: the queries that chose chunk c of
// pair p get the rows run_start[p, c] .. + chunk_counts[p, c] of the pair's gathered queries (in
// no particular order: a row's attention does not depend on the rows beside it). Writes, for each
// query, where its entries start (entry_offset [pairs, slots]) and the row of each entry, chunks
// ascending (entry_rows); and the query slot of every row (slot_of_row [pairs, rows], which the
// caller fills with -1 first: rows no query takes stay -1).
struct VmobaRunsArgs {
  const uint32_t* chosen = nullptr;    // [pairs, slots, words]
  const int32_t* run_start = nullptr;  // [pairs, chunks]
  int32_t* cursor = nullptr;           // [pairs, chunks], zeroed
  int32_t* entry_total = nullptr;      // one counter, zeroed
  int32_t* entry_offset = nullptr;     // [pairs, slots]
  int32_t* entry_rows = nullptr;       // [entries]
  int32_t* slot_of_row = nullptr;      // [pairs, rows]
  int64_t pairs = 0, slots = 0, chunks = 0, rows = 0;
};
void vmoba_runs(const VmobaRunsArgs& args, cudaStream_t stream = nullptr);

// The expert pass's lists, one per 64-row half of each pair's gathered rows: the key blocks
// c·blocks .. c·blocks + blocks − 1 of the chunk c whose run holds the half (run_end [pairs,
// chunks]: where each chunk's run, padded to whole halves, ends; runs in chunk order). Halves past
// a pair's last run get chunk 0's blocks (their rows hold no query; the results are never read).
// offsets [pairs·halves + 1] = i·blocks, indices [pairs·halves·blocks].
void vmoba_expert_lists(const int32_t* run_end, int64_t pairs, int64_t chunks, int64_t halves,
                        int64_t blocks, int32_t* offsets, int32_t* indices,
                        cudaStream_t stream = nullptr);

// gathered[b, r, h·D + d] = x[b, slot_of_row[b·H + h, r], h·D + d], zeros where the slot is -1.
// x [batch, slots, H·D], gathered [batch, rows, H·D], bf16.
void vmoba_gather_rows(const void* x, void* gathered, const int32_t* slot_of_row, int64_t batch,
                       int64_t slots, int64_t rows, int64_t heads, int64_t head_dim,
                       cudaStream_t stream = nullptr);

// out[b, token_of_slot[s], h·D + d]: the own-chunk result of query slot s merged with its expert
// results, chunks ascending, by log-sum-exp (as the CPU merges them). Padding slots write nothing.
struct VmobaMergeArgs {
  const void* own = nullptr;          // [batch, slots, H·D] bf16
  const float* own_lse = nullptr;     // [batch, H, slots]
  const void* expert = nullptr;       // [batch, rows, H·D] bf16 (may be null when rows is 0)
  const float* expert_lse = nullptr;  // [batch, H, rows]
  const uint32_t* chosen = nullptr;   // [pairs, slots, words]
  const int32_t* entry_offset = nullptr;
  const int32_t* entry_rows = nullptr;
  const int32_t* token_of_slot = nullptr;  // [slots], -1 for padding
  void* out = nullptr;                     // [batch, tokens, H·D] bf16
  int64_t batch = 0, heads = 0, head_dim = 0, slots = 0, rows = 0, chunks = 0, tokens = 0;
};
void vmoba_merge(const VmobaMergeArgs& args, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
