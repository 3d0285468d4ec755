// What the AutoencoderKL decoder's construction-time weight checks call its checkpoint: every
// tensor a layer will read must be in it with the shape its config implies
// (models::expect_tensor), so a wrong or truncated checkpoint fails before the first decode, in
// one line naming the tensor and the file.
#pragma once

#include "models/parameters.h"

namespace mmgen::vae {

inline constexpr models::CheckpointKind kAutoencoderKlCheckpoint{"VAE", "diffusers AutoencoderKL"};

}  // namespace mmgen::vae
