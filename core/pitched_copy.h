// Copies between views whose elements form rows at a fixed pitch: a slice of a contiguous tensor
// along one dimension ([B, S, H, D] sliced in H is B·S rows of the slice's H·D elements, H·D
// apart), on the host or the GPU (one cudaMemcpy2D). The sequence-parallel exchanges
// (attention/ulysses.h) pack and unpack head and sequence slices with it.
#pragma once

#include "core/tensor.h"

namespace mmgen {

// `to` ← `from`: one shape, dtype and device; each a view whose elements are rows of one length
// at one pitch (any contiguous tensor is one). Refuses other layouts in one line.
void copy_pitched(const Tensor& to, const Tensor& from);

}  // namespace mmgen
