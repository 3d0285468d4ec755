// T5's relative position bias: key-minus-query offsets binned into buckets (exact for small
// offsets, logarithmic up to max_distance), each bucket holding one learned bias per head.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mmgen::text_encoders {

// The bucket of `relative_position` (= key position − query position) for a bidirectional
// (encoder) attention: half the buckets for keys before the query, half for keys after.
// Computed in float32 the way transformers does, so bucket edges fall where its do.
int64_t t5_relative_position_bucket(int64_t relative_position, int64_t num_buckets,
                                    int64_t max_distance);

// The bucket of every key − query offset −(max_len − 1) .. max_len − 1, in that order
// (2·max_len − 1 entries): a layer's bias by offset is its table at these buckets.
std::vector<int64_t> t5_offset_buckets(int64_t max_len, int64_t num_buckets, int64_t max_distance);

// bias[h, i, j] = table[bucket(j − i), h] for i, j in [0, length): the additive score bias of one
// attention layer. `table` is the layer's `relative_attention_bias.weight` [num_buckets, heads]
// (any float dtype). Returns [heads, length, length] float32.
Tensor t5_relative_position_bias(const Tensor& table, int64_t length, int64_t max_distance);

}  // namespace mmgen::text_encoders
