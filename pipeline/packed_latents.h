// What FLUX and Qwen-Image share around their transformers: latents packed into 2x2 tokens
// (FluxPipeline._pack_latents; QwenImagePipeline's is the same for its one frame). Their schedule
// is image_schedule.h's.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mmgen {

// [1, C, h, w] → [1, (h/2)·(w/2), 4·C], token (i, j) holding channel c of the 2x2 patch at
// (dy, dx) at 4c + 2dy + dx. unpack is its inverse.
Tensor pack_latents_2x2(const Tensor& latents);
Tensor unpack_latents_2x2(const Tensor& packed, int64_t channels, int64_t height, int64_t width);

// A request's starting latents, packed: `given` (--latents: [1, C, h, w] as `shape`, or diffusers'
// [1, 1, C, h, w] for one frame, which holds the same values) when defined, else torch's CPU randn
// of `shape` from `seed`.
Tensor initial_packed_latents(const Tensor& given, const Shape& shape, uint64_t seed);

}  // namespace mmgen
