// The kernels behind the GPU paged-attention backends (paged_backend_cuda.h). bf16 queries, keys
// and values, fp32 scores, online softmax and accumulation, bf16 out (and optionally the natural
// log-sum-exp). What a backend design decides — where a request's keys come from, how the work is
// split, what merges — is expressed in PagedAttentionParams; the kernels only follow it:
//   - the tile kernel (head sizes 64 and 128): a CTA of 4 warps takes 64 query tokens of one
//     request and one head (mma.sync m16n8k16, K/V double-buffered with cp.async); the extend path;
//   - the row kernel (head sizes 8 to 256, powers of two; bf16 or float32 tensors): 4 warps on
//     one query token and head,
//     keys spread over lane groups of head_dim / 8 lanes, optionally split over CTAs (split-KV)
//     and merged by LSE in a second kernel; the decode path, and extend where the tile kernel is
//     not compiled for the head size.
// A query at position qp of request r sees the keys of its run [pos0, pos0 + len) cut by the
// layer's rules: causal (k ≤ qp), sliding window (causal: k ≥ qp − w; encoder-only: |k − qp| ≤ w)
// and padding (k < valid_len). The additive bias hook (T5's relative position bias) adds
// bias[h, (k − qp) + max_len − 1] to the scaled score.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda::paged {

// Where the rows of a request's keys lie: packed new tokens (ragged, varlen), pool slots listed
// per token (FlashInfer's CSR with page size 1), pool pages through a page table (FA3), or the
// cached prefix through CSR slots followed by the new tokens packed (Triton's extend: one online
// softmax over both).
enum class KeySource : int { Packed = 0, Slots = 1, Pages = 2, PrefixThenPacked = 3 };

struct PagedAttentionParams {
  // Queries: bf16 rows of [num_q_heads, head_dim], q_stride elements apart (token t at
  // q + t·q_stride); out and lse likewise (lse [num_tokens, num_q_heads] natural log, may be null).
  const void* q = nullptr;
  int64_t q_stride = 0;
  void* out = nullptr;
  int64_t out_stride = 0;
  float* lse = nullptr;
  int64_t num_tokens = 0, num_q_heads = 0, group = 1, head_dim = 0;
  // Width of V and out rows when it differs from head_dim: multi-head latent attention, whose V is
  // the first v_dim columns of the K row (the latent kernel; 0: head_dim).
  int64_t v_dim = 0;
  // q, k, v and out in float32 instead of bf16 (the row kernel only; no pool): the exact mode.
  bool fp32 = false;
  float scale = 1.0f;
  bool causal = false;
  int64_t window = -1;
  const float* bias = nullptr;  // fp32 [num_q_heads, 2·bias_max_len − 1], or null
  int64_t bias_max_len = 0;

  // Per request, device int32 [batch]:
  const int32_t* q_start = nullptr;    // first packed token of its new tokens
  const int32_t* q_len = nullptr;      // its new tokens
  const int32_t* q_pos0 = nullptr;     // position of its first new token (the prefix length)
  const int32_t* valid_len = nullptr;  // keys at positions ≥ this are padding; null: none
  const int32_t* kv_pos0 = nullptr;    // first position of its key run; null: 0
  const int32_t* kv_len = nullptr;     // length of its key run
  const int32_t* kv_start = nullptr;   // Packed: row of the run's first key; Slots: its offset in
                                       // `indices` (kv_indptr); Pages: unused
  KeySource source = KeySource::Packed;
  // Packed: the new tokens' k and v rows (k_stride, v_stride elements apart); pools: one layer's
  // buffers, rows of [kv_heads, head_dim] (k_stride = v_stride = kv_heads · head_dim).
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_stride = 0, v_stride = 0;
  const int32_t* indices = nullptr;  // Slots: token slots; Pages: page table [batch, max_pages]
  int64_t max_pages = 0, page_size = 1;
  // PrefixThenPacked: positions below q_pos0[r] are the prefix, read through `indices` from
  // kv_start[r] in the pool (k, v); the rest are the new tokens, row q_start[r] + (pos − q_pos0[r])
  // of these packed rows (bf16, strides in elements).
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  int64_t k_new_stride = 0, v_new_stride = 0;

  // Dual chunk attention (attention/paged/paged_layer.h): chunk_len > 0 cuts a query's keys to
  // one region of its chunk c = qp / chunk_len — 0 intra: [c·L, ...) (with the causal rule),
  // 1 succ: [(c − 1)·L, c·L), 2 inter: [0, (c − 1)·L). length_scale_base > 0 multiplies request
  // r's scores by max(1, 0.1·ln(seq_len[r] / length_scale_base) + 1).
  int64_t chunk_len = 0;
  int chunk_region = 0;
  float length_scale_base = 0.0f;
  const int32_t* seq_len = nullptr;

  // Work lists, device int32: the request of each packed token (row kernel), and the
  // (request, first query within it) pair of each 64-token query tile (tile kernel).
  const int32_t* token_request = nullptr;
  const int32_t* tiles = nullptr;
  int64_t num_tiles = 0;
};

// Query tokens per CTA of the tile kernel.
inline constexpr int kPagedTileQueries = 64;
// The split-KV decode gives each split at least this many keys.
inline constexpr int kPagedSplitMinKeys = 64;

bool paged_tile_kernel_supports(int64_t head_dim);
bool paged_row_kernel_supports(int64_t head_dim);
// The latent (MLA) kernel: head_dim 576 = latent 512 + rope 64, value_dim 512, one KV head.
bool paged_latent_kernel_supports(int64_t head_dim, int64_t value_dim);

// The tile kernel over params.tiles (grid: tiles × query heads).
void paged_attention_tiles(const PagedAttentionParams& params, cudaStream_t stream);

// The row kernel over every packed token and query head (the latent kernel when params.v_dim
// differs from head_dim). max_splits > 1: each row's visible keys
// are cut into min(max_splits, ⌈keys / kPagedSplitMinKeys⌉) splits (from the lengths on the
// device, so a captured graph replays any lengths), the partial results go to
// partial_out [num_tokens, num_q_heads, max_splits, head_dim] and partial_lse
// [num_tokens, num_q_heads, max_splits] (fp32) and a second kernel merges them into out and lse.
void paged_attention_rows(const PagedAttentionParams& params, int64_t max_splits,
                          float* partial_out, float* partial_lse, cudaStream_t stream);

// Scatters n new tokens' K and V rows (bf16 [kv_heads · head_dim], k_stride / v_stride elements
// apart) to the pool rows slots[i] (set_kv_buffer). row_elems = kv_heads · head_dim, a multiple
// of 8. v null: K only (a keys-only pool).
void store_kv(const void* k, int64_t k_stride, const void* v, int64_t v_stride,
              const int32_t* slots, int64_t n, void* pool_k, void* pool_v, int64_t row_elems,
              cudaStream_t stream);

// FlashInfer's merge_state: out_a = the LSE-weighted combination of two partial results over
// disjoint key sets (out_a / out_b bf16 rows of [heads, head_dim], lse fp32 [tokens, heads]).
// lse_out (not lse_a: other threads still read it), when given, gets the merged LSE.
void merge_attention_states(void* out_a, int64_t out_a_stride, const float* lse_a,
                            const void* out_b, int64_t out_b_stride, const float* lse_b,
                            int64_t tokens, int64_t heads, int64_t head_dim, cudaStream_t stream,
                            float* lse_out = nullptr);

}  // namespace mmgen::cuda::paged
