// numpy .npy files (format versions 1-3, little-endian, C order): the exact-check output format
// and a way to pass initial latents.
#pragma once

#include "core/file.h"
#include "core/tensor.h"

namespace mmgen {

Tensor read_npy(const fs::path& path);
void write_npy(const fs::path& path, const Tensor& tensor);  // atomic

// Initial latents from a .npy or .safetensors file (the single tensor it holds, or `latents`).
Tensor read_tensor_file(const fs::path& path);

}  // namespace mmgen
