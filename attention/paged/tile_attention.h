// The CPU compute core every paged backend design runs on: a tile of queries (some tokens of one
// request × the query heads that share one KV head) attends runs of keys with an online softmax
// (FlashAttention's running max, sum and accumulator), GEMMs through Eigen. The backends differ in
// where the keys come from (the packed new tokens, the pool through token slots, the pool through
// a page table), in how the work is split (two-stage extend, ragged + paged merged by LSE,
// split-KV decode) and in what they plan once per forward; this file is the shared arithmetic.
//
// A query's result does not depend on the rest of its batch: query tiles sit on a grid of
// absolute positions, key blocks on a grid of each run's positions, a tile's rows are padded to a
// multiple of 4 and its GEMMs never run threaded, so Eigen sums every product in the same order
// whatever else is in the batch. A design that reads a request's keys as one run (torch_native,
// fa3, flex_attention) therefore gives the same bits with a cached prefix as without; triton and
// flashinfer split the keys where the prefix ends (two runs, or two softmaxes merged by LSE) and
// agree to rounding only.
#pragma once

// clang-format off
#include "core/x86_intrinsics.h"  // before anything that includes it: see there
// clang-format on
#include <Eigen/Core>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "attention/paged/forward_batch.h"
#include "attention/paged/paged_layer.h"

namespace mmgen::attention::paged {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The tile every CPU design uses: queries per tile, and keys per step (GPU tiles are 64 to 128;
// the CPU's GEMMs like more).
constexpr int64_t kQueryTile = 64;
constexpr int64_t kKeyBlock = 256;

// The keys a query sees are one interval of key positions: causal (k ≤ q), the sliding window
// (causal: k ≥ q − w; encoder-only: |q − k| ≤ w) and padding (k < valid_len) all cut it.
struct VisibleKeys {
  bool causal = true;
  int64_t window = -1;
  int64_t valid_len = std::numeric_limits<int64_t>::max();
  void range(int64_t q_pos, int64_t& lo, int64_t& hi) const {
    lo = 0;
    hi = valid_len;
    if (causal) {
      hi = std::min(hi, q_pos + 1);
      if (window >= 0) lo = std::max<int64_t>(lo, q_pos - window);
    } else if (window >= 0) {
      lo = std::max<int64_t>(lo, q_pos - window);
      hi = std::min(hi, q_pos + window + 1);
    }
  }
};

// The visibility rule of `layer` for request `request` of `batch`.
VisibleKeys visible_keys(const PagedLayer& layer, const ForwardBatch& batch, int64_t request,
                         bool causal);

// A run of consecutive key positions [pos0, pos0 + len) of one request and where its rows are:
//   direct: row of position pos0 + j at k + j·stride ([kv_heads, head_dim] rows: the KV head is
//           added by attend_run);
//   slots:  in the pool at slot slots[j] (token-level indices, CSR style);
//   pages:  in the pool at page pages[(pos0 + j) / page_size], offset (pos0 + j) % page_size
//           (pages of a native page table are indexed by absolute position).
struct KeyRun {
  int64_t pos0 = 0, len = 0;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t stride = 0;
  const int64_t* slots = nullptr;
  const int64_t* pages = nullptr;
  int64_t page_size = 1;
  const float* pool_k = nullptr;  // layer buffers [rows, kv_heads, head_dim]
  const float* pool_v = nullptr;
  int64_t pool_row = 0;  // kv_heads · head_dim
};

// Modifies one row of raw q·k scores for keys k_pos .. k_pos + n − 1 (scaling, biasing, masking
// with kNegInf). Used by flex_attention's score-mod / mask-mod.
using RowScoreFn =
    std::function<void(int64_t head, int64_t q_pos, int64_t k_pos, int64_t n, float* scores)>;

class TileAttention {
 public:
  // Queries of `count` tokens (token t at q + t·token_stride, [heads, head_dim] each) for query
  // heads first_head .. first_head + group − 1, at positions q_pos0 .. q_pos0 + count − 1.
  // value_dim (−1: head_dim) is the width of V and of the output rows; V rows are laid out as K
  // rows are (same strides), their first value_dim columns read (MLA: V is the head of K).
  void begin(const float* q, int64_t token_stride, int64_t count, int64_t first_head, int64_t group,
             int64_t head_dim, int64_t q_pos0, const VisibleKeys& visible, const ScoreBias* bias,
             float scale, int64_t value_dim = -1);
  // The key positions some query of this tile may see: [lo, hi).
  void key_span(int64_t& lo, int64_t& hi) const;
  // Keys at positions k_pos0 .. k_pos0 + n − 1, rows `stride` floats apart (K and V alike).
  void attend(const float* k, const float* v, int64_t stride, int64_t k_pos0, int64_t n);
  // The same with a custom row rule instead of scale / bias / visibility.
  void attend_custom(const float* k, const float* v, int64_t stride, int64_t k_pos0, int64_t n,
                     const RowScoreFn& row_rule);
  // Attends the part of a run this tile can see, `block` keys at a time (gathered from the pool
  // into scratch when the run is not direct).
  void attend_run(const KeyRun& run, int64_t kv_head, int64_t block);
  // flex_attention's hooks for attend_run: `row_rule` replaces scale / bias / visibility, and
  // `keep_block(k_pos0, n)` is asked before each block (false: the block is skipped, no GEMM).
  // Null pointers: the default rules. They must outlive the tile's use.
  using BlockFilter = std::function<bool(int64_t k_pos0, int64_t n)>;
  void set_custom(const RowScoreFn* row_rule, const BlockFilter* keep_block) {
    row_rule_ = row_rule;
    keep_block_ = keep_block;
  }
  int64_t first_head() const { return first_head_; }
  int64_t count() const { return count_; }
  int64_t q_pos0() const { return q_pos0_; }
  // out rows into a packed [tokens, heads, value_dim] batch; lse (natural log, may be null) into
  // [tokens, heads]. A row that saw no key gets zeros and lse −inf.
  void finish(float* out, int64_t out_token_stride, float* lse, int64_t lse_token_stride) const;

  int64_t rows() const { return count_ * group_; }

 private:
  template <typename Prepare>
  void update(const float* k, const float* v, int64_t stride, int64_t k_pos0, int64_t n,
              const Prepare& prepare);

  int64_t count_ = 0, group_ = 1, first_head_ = 0, head_dim_ = 0, v_dim_ = 0, q_pos0_ = 0;
  VisibleKeys visible_;
  const ScoreBias* bias_ = nullptr;
  float scale_ = 1;
  const RowScoreFn* row_rule_ = nullptr;
  const BlockFilter* keep_block_ = nullptr;
  RowMatrix q_, acc_, scores_;
  std::vector<float> max_;
  std::vector<double> sum_;
  std::vector<float> k_scratch_, v_scratch_;
};

// One unit of parallel work: tokens first .. first + count − 1 of a request's new tokens, for the
// query heads of one KV head. Tiles cover positions [j·tile_tokens, (j + 1)·tile_tokens) of the
// sequence, so after a cached prefix a request's first tile is partial.
struct TileTask {
  int64_t request, kv_head, first, count;
};
std::vector<TileTask> make_tile_tasks(const ForwardBatch& batch, const PagedLayer& layer,
                                      int64_t tile_tokens);

// Runs every task on OpenMP threads: each thread's TileAttention begins the task's queries (q is
// the packed [num_tokens, Hq, D] batch), attends the runs `runs_of(task, runs)` lists, and writes
// out [num_tokens, Hq, layer.value_dim()] (and lse [num_tokens, Hq] when not null).
using RunsOf = std::function<void(const TileTask& task, std::vector<KeyRun>& runs)>;
void run_tiles(const std::vector<TileTask>& tasks, const float* q, const PagedLayer& layer,
               const ForwardBatch& batch, bool causal, const RunsOf& runs_of, int64_t block,
               float* out, float* lse);

// Merges partial results over disjoint key sets by their LSEs, in place into (out_a, lse_a):
// FlashInfer's merge_state. out [tokens, heads, D], lse [tokens, heads].
void merge_states(float* out_a, float* lse_a, const float* out_b, const float* lse_b,
                  int64_t tokens, int64_t heads, int64_t head_dim);

}  // namespace mmgen::attention::paged
