// The request checks and notes several pipelines' registrations share (pipeline/<name>/
// <name>_spec.cpp): sizes that must be multiples of the VAE's factor, VAE tiles, which options
// the user gave, and the one-line guidance summary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/model_index.h"
#include "pipeline/request.h"

namespace mmgen {

// --vae-tile-size and --vae-tile-overlap (output pixels) with --vae-tiling: the VAE tiles its
// latents, `factor` times smaller, so both must be multiples of it.
void check_vae_tiles(const Request& request, int64_t factor);

// Sizes must be multiples of `multiple` (the VAE's factor times the 2x2 patch); one line naming
// both flags as the log states sizes (width first) and the nearest smaller sizes that fit.
void check_size_multiple(const Request& request, int64_t multiple, const char* model);

// An AutoencoderKL's spatial factor f = 2^(levels − 1) (8 for the FLUX VAE), from its
// block_out_channels.
int64_t kl_vae_spatial_factor(const ModelIndex& index);

// Whether the user gave `option` (a flag or a config key), not a default.
bool given(const Request& request, const char* option);
bool has_negative(const Request& request);

// Z-Image's own guidance options, set for another pipeline (`model`): one note each.
void note_zimage_options(const Request& request, const char* model,
                         std::vector<std::string>& notes);

// "guidance 5": the summary of a classifier-free guidance scale.
std::string guidance_of_cfg(const Request& request);

}  // namespace mmgen
