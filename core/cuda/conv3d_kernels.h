// The launcher behind conv3d_forward (defined in conv3d.cu; the checks live in conv3d.cpp, since
// nvcc cannot compile fmt's compile-time format checks).
#pragma once

#include "core/cuda/conv3d.h"

namespace mmgen::cuda {

// `block_rows` is conv_block_rows(args.out_channels); the arguments are already checked.
// `variant`: see set_conv3d_variant.
void launch_conv3d(const Conv3dArgs& args, int block_rows, ConvPrecision precision, int variant,
                   cudaStream_t stream);

}  // namespace mmgen::cuda
