// Taking a text encoder's weight from its checkpoint after checking that it is there and holds the
// values config.json promises: one line naming the tensor, the file and the checkpoint kind
// otherwise (a mismatched checkpoint is a user's mistake, not a crash).
#pragma once

#include <string>

#include "core/safetensors.h"
#include "core/tensor.h"

namespace mmgen::text_encoders {

// How a weight may be stored. `Float`: a floating-point tensor (CLIP, Qwen3). `Product`: a
// matrix or embedding table the encoder multiplies with, which may also be a GGUF file's
// quantized blocks (WeightStore::get_for_product; the CPU product and Tensor::to read them) or
// scaled FP8 rows (T5/UMT5).
enum class EncoderWeight { Float, Product };

// `checkpoint` names what the file should be, e.g. "a CLIP text encoder", for the error line.
Tensor require_encoder_weight(const WeightStore& weights, const std::string& name,
                              const Shape& shape, const char* checkpoint,
                              EncoderWeight form = EncoderWeight::Float);

}  // namespace mmgen::text_encoders
