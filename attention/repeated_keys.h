// Cross-attention over keys whose tail repeats one row. Wan pads every prompt's text embedding
// with zero rows to a fixed 512 tokens, and the model attends to all of them: every pad row
// projects to the same key and value, so a short prompt's cross-attention is a few distinct keys
// and one key repeated some 500 times. n equal keys add n·exp(s)·v to the softmax's sum and
// n·exp(s) to its normaliser, so attending to the repeated key once, with log n added to its
// score, gives the same values up to rounding, without projecting or reading the copies.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace mmgen::attention {

// Keys [B, Lk, H, D] standing for `total` keys per batch element: element b's keys are rows
// [0, distinct[b]) followed by total − distinct[b] copies of row Lk − 1. Rows distinct[b] .. Lk − 1
// all equal that row. Empty: every key is a key of its own.
struct RepeatedTail {
  std::vector<int64_t> distinct;
  int64_t total = 0;
  bool empty() const { return distinct.empty(); }
};

// The repeated tail of `rows` [B, L, C] on the host: distinct[b] is where the run of rows equal
// (bit for bit) to element b's last row begins; total is L. Row-wise ops keep equal rows equal, so
// this holds for everything computed from the rows, row by row (the keys and values of a
// cross-attention over them).
RepeatedTail find_repeated_tail(const Tensor& rows);

// The rows one forward needs to compute: max distinct[b] + 1 (the last one is the repeated row
// of every element).
int64_t kept_rows(const RepeatedTail& tail);

// keys [B, Lk, H, D] on the host, expanded to the [B, total, H, D] they stand for (for a backend
// that does not count copies).
Tensor expand_repeated_tail(const Tensor& keys, const RepeatedTail& tail);

// Dense attention with its log-sum-exp: q [1, Sq, H, D] over k, v [1, n, H, D] (n >= 1), returns
// [1, Sq, H, D] and sets *lse to [1, H, Sq] (natural log of Σ exp(scale · q·k)).
using DenseWithLse = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v,
                                          float scale, Tensor* lse)>;

// softmax(scale · q·kᵀ)·v over the keys `tail` says k and v stand for. q [B, Sq, H, D], k and v
// [B, Lk, H, D] float32 on the host. Each batch element runs alone (`attend` over its distinct
// keys), so an element's values do not depend on the batch around it; the repeated key is then
// merged in with its count.
Tensor attend_repeated_tail(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                            const RepeatedTail& tail, const DenseWithLse& attend);

}  // namespace mmgen::attention
