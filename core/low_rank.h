// A low-rank update a product's weight carries: what a LoRA in the runtime mode adds to the
// product, y = x · weightᵀ + bias + (x · downᵀ) · upᵀ, without changing the weight (which may be
// FP8 rows or a GGUF file's blocks, or shared with requests that run without the LoRA). Several
// LoRAs on one layer are one update: their down matrices stacked, their up matrices side by side,
// each scaled (the user's scale times alpha / rank) into its up matrix.
//
// A weight tensor carries its update through what placement does to it (Tensor::to, contiguous,
// clone, a slice of its rows or columns, the stacked copies of ops::stack_weights, a weight
// stream's visits) and ops::linear / linear_each add it; ops that reshape a weight refuse one
// that carries an update rather than drop it.
#pragma once

#include <memory>

#include "core/activation.h"
#include "core/tensor.h"

namespace mmgen {

struct LowRankUpdate {
  Tensor down;  // [rank, in]
  Tensor up;    // [out, rank], the scales folded in
};

// `update` as a weight of `weight_dtype` on `device` carries it: float32 on the host; on the GPU
// bf16 (float32 for a float32 weight, the exact mode). Shared when it already is so.
std::shared_ptr<const LowRankUpdate> low_rank_for(
    const std::shared_ptr<const LowRankUpdate>& update, Device device, DType weight_dtype);

// The update of the weight's rows [start, end) (dim 0) or columns (dim 1).
std::shared_ptr<const LowRankUpdate> low_rank_slice(const LowRankUpdate& update, int64_t dim,
                                                    int64_t start, int64_t end);

namespace ops {

// y += (x · downᵀ) · upᵀ, where y lives (y contiguous [rows, out] in float32, or bf16 on the
// GPU; x as a product reads it).
void add_low_rank_(Tensor& y, const Tensor& x, const LowRankUpdate& update);

// ops::linear for a weight that carries an update (`activation` null: none): the plain product,
// the update added, then the activation, in float32 on the CPU.
Tensor linear_with_low_rank(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out,
                            const Activation* activation);

}  // namespace ops
}  // namespace mmgen
