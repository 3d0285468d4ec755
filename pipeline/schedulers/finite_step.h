// NaN or infinity in a denoising step stops the run at that step with one line, rather than
// running every remaining step and the VAE to write an all-black picture: NaN weights, a NaN
// --latents file or an overflowing model show here first. Each scheduler's step() calls it on its
// float32 inputs (a pass over the latents, small beside a transformer forward).
#pragma once

#include "core/tensor.h"

namespace mmgen::schedulers {

// `model_output` and `sample` are contiguous float32 tensors on the CPU. Says which holds the
// first non-finite value: the sample entering the first step is the starting latents (--latents),
// a later one the previous step's result; the model output is the transformer's prediction.
void check_step_finite(const Tensor& model_output, const Tensor& sample, int step_index, int steps);

}  // namespace mmgen::schedulers
