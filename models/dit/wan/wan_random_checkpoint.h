// A random-weight WanTransformer3DModel checkpoint of any size, for benchmarks and tests that need
// real dimensions without a download: every tensor the config implies, in bf16, deterministic,
// filled in parallel. Linear weights are scaled by 1/sqrt(fan_in) so activations stay in range.
#pragma once

#include <cstdint>

#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/dit/wan/wan_transformer_config.h"

namespace mmgen::dit {

// Values center + spread * u, u uniform in [-1, 1) from (seed, index), in `dtype` (bf16 or f32).
Tensor random_tensor(const Shape& shape, float center, float spread, uint64_t seed, DType dtype);

NamedTensors random_checkpoint(const WanTransformerConfig& config);

}  // namespace mmgen::dit
