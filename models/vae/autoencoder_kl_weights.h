// The construction-time weight check of the AutoencoderKL decoder's layers: every tensor a layer
// will read must be in the checkpoint with the shape its config implies, so a wrong or truncated
// checkpoint fails before the first decode, in one line naming the tensor and the file.
#pragma once

#include <string>

#include "core/safetensors.h"
#include "core/tensor.h"

namespace mmgen::vae {

void check_kl_weight(const WeightStore& store, const std::string& name, const Shape& shape);

}  // namespace mmgen::vae
