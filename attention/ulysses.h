// Ulysses sequence parallelism (DeepSpeed-Ulysses, SGLang diffusion's default for video DiTs):
// each rank of the group holds a shard of the token sequence with every head. Before attention one
// all-to-all gives each rank the whole sequence for its 1/n of the heads; attention runs there
// unchanged (any backend whose work is per head: dense, STA, VSA without a gate, V-MoBA, SLA);
// a second all-to-all brings the output back to the sequence shards. Heads that do not divide by
// n are shared out as evenly as the sequence is (Z-Image's 30 heads over 4 ranks: 8, 8, 7, 7).
#pragma once

#include "core/communicator.h"
#include "core/tensor.h"

namespace mmgen::attention {

// Which heads each rank attends to: H over n ranks, balanced, in rank order.
dist::SequenceShards head_shares(int64_t heads, int ranks);

// x [B, s_rank, H, D] (this rank's rows of the sequence, every head) → [B, S, h_rank, D] (the
// whole sequence, this rank's share of the heads). Contiguous in and out, on the group's device.
Tensor sequence_to_heads(const Tensor& x, const dist::SequenceShards& shards,
                         dist::Communicator& group);

// The inverse: x [B, S, h_rank, D] → [B, s_rank, H, D]; `heads` is H.
Tensor heads_to_sequence(const Tensor& x, const dist::SequenceShards& shards,
                         dist::Communicator& group, int64_t heads);

// Every rank's rows of a sequence into the whole: x [B, s_rank, F] → [B, S, F] on every rank.
Tensor gather_sequence(const Tensor& x, const dist::SequenceShards& shards,
                       dist::Communicator& group);

}  // namespace mmgen::attention
