// The CUDA kernels behind ops::group_norm (core/ops.h) for GPU tensors: torch.nn.GroupNorm over
// channels-first float32 [N, C, P] in device memory, with the optional fused SiLU of a VAE's
// norm-then-activation. Device pointers, default stream.
//
// A group's C / groups channel planes are consecutive, so each group is one contiguous run of
// per_group · P values; a VAE's groups are large (16 planes of 128·128 pixels at 1024²: 262144
// values), so each group is split into chunks that separate blocks reduce. Two passes, as the CPU
// does: the sum, then the centred squares around the group mean, each value accumulated in float
// per thread and the chunks' partial sums combined in double; the affine part is the CPU's folded
// y = x · scale + shift per plane.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// The chunks a group of `group_values` values is split into (at least 1).
int64_t group_norm_chunks(int64_t group_values);

// What group_norm_f32 needs besides its input and output, in device memory: `partial` holds
// batch · groups · group_norm_chunks(per_group · positions) doubles, `mean` batch · groups
// doubles, `factors` 2 · batch · channels floats.
struct GroupNormWorkspace {
  double* partial = nullptr;
  double* mean = nullptr;
  float* factors = nullptr;
};

// x, y [batch, channels, positions] (y may not be x); weight and bias [channels] or null.
void group_norm_f32(const float* x, float* y, int64_t batch, int64_t channels, int64_t positions,
                    int64_t groups, float eps, const float* weight, const float* bias, bool silu,
                    const GroupNormWorkspace& workspace, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
