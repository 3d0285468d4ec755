// V-MoBA's chunk selection: every query token scores every chunk by the dot product of its query
// with the chunk's mean key (no 1/√D), keeps its own chunk, and keeps further chunks either by a
// cumulative-similarity threshold or by a fixed count. The result is in the transposed ("expert")
// form the attention pass needs: for each (batch, head, chunk), the queries that chose it.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/kernels/block_sparse.h"
#include "core/tensor.h"

namespace mmgen::attention::vmoba {

enum class SelectMode { Threshold, TopK };
// The group over which scores are min-max normalised and the threshold or count applies:
// one (head, query) pair; all queries and chunks of one head; everything of one batch element.
enum class SelectGroup { QueryHead, HeadGlobal, Overall };

struct SelectOptions {
  SelectMode mode = SelectMode::Threshold;
  SelectGroup group = SelectGroup::QueryHead;
  double threshold = 0.25;  // threshold mode: share of the normalised similarity mass to reach
  int64_t topk = 3;         // topk mode: chunks per query, its own included (capped at #chunks)
};

// The non-own chunks chosen by the queries of one (batch, head): queries[indptr[c] ..
// indptr[c + 1]) are the (reordered) positions of the queries that chose chunk c, ascending.
struct ChunkSelection {
  std::vector<int64_t> indptr;
  std::vector<int32_t> queries;
  int64_t entries() const { return int64_t(queries.size()); }
};

// q and k: [B, S, H, D] contiguous float32 whose first tokens, those `chunks` cover, are the video
// tokens in chunk order (tokens after them, e.g. text, are ignored). Returns B·H selections, index
// b·H + h.
//
// Threshold mode, per group: scores are min-max normalised (a range under 1e-6 counts as 1);
// own = normalised mass of the own chunks / (total mass + 1e-6); need = max(0, threshold − own);
// the other (query, chunk) entries are taken in descending order (ties: lower index first) until
// their mass / (total + 1e-6) reaches `need` — at least one, and all of them when it never does.
// Top-k mode: per group, the (topk − 1) · (queries in the group) highest raw scores among the
// other entries.
std::vector<ChunkSelection> select_chunks(const Tensor& q, const Tensor& k,
                                          const BlockLayout& chunks, const SelectOptions& options);

}  // namespace mmgen::attention::vmoba
