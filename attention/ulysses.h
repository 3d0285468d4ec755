// Ulysses sequence parallelism (DeepSpeed-Ulysses, SGLang diffusion's default for video DiTs):
// each rank of the group holds a shard of the token sequence with every head. Before attention one
// all-to-all gives each rank the whole sequence for its 1/n of the heads; attention runs there
// unchanged (any backend whose work is per head: dense, STA, VSA without a gate, V-MoBA, SLA);
// a second all-to-all brings the output back to the sequence shards. Heads must divide by n.
#pragma once

#include "core/communicator.h"
#include "core/tensor.h"

namespace mmgen::attention {

// x [B, s_rank, H, D] (this rank's rows of the sequence, every head) → [B, S, H/n, D] (the whole
// sequence, heads rank·H/n up to (rank+1)·H/n). Contiguous in and out, on the group's device.
Tensor sequence_to_heads(const Tensor& x, const dist::SequenceShards& shards,
                         dist::Communicator& group);

// The inverse: x [B, S, H/n, D] → [B, s_rank, H, D].
Tensor heads_to_sequence(const Tensor& x, const dist::SequenceShards& shards,
                         dist::Communicator& group);

// Every rank's rows of a sequence into the whole: x [B, s_rank, F] → [B, S, F] on every rank.
Tensor gather_sequence(const Tensor& x, const dist::SequenceShards& shards,
                       dist::Communicator& group);

}  // namespace mmgen::attention
