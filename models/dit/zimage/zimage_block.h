// One ZImageTransformerBlock over one item's tokens: RMSNorm'd self-attention (per-head q/k
// RMSNorm, 3-axis RoPE) and a SwiGLU feed-forward, each output RMSNorm'd again before it joins
// the residual. Modulated blocks (noise refiner, main blocks) scale the pre-norms by 1 + scale and
// gate the residuals by tanh(gate) from the timestep embedding; the context refiner does neither.
#pragma once

#include <string_view>
#include <vector>

#include "attention/layer.h"
#include "core/tensor.h"
#include "models/dit/zimage/zimage_config.h"
#include "models/dit/zimage/zimage_rope.h"
#include "models/dit/zimage/zimage_weights.h"

namespace mmgen::dit {

// The three block stacks, in the order a forward runs them.
enum class ZImageStage { NoiseRefiner, ContextRefiner, Main };
// A stack's checkpoint name ("noise_refiner", "context_refiner", "layers"), which is also the
// name of its attention layers (ZImageTransformer::attention_stacks()).
std::string_view zimage_stack_name(ZImageStage stage);

// One block's modulation for one item, on the model's device: the pre-norm weights with 1 + scale
// folded in (RMSNorm(x)·w·(1 + s) = x·rms⁻¹·(w·(1 + s))) and the residual gates, float32 [dim].
// An unmodulated block: the plain pre-norm weights, gates undefined (plain residual).
struct ZImageModulation {
  Tensor attention_norm, attention_gate, ffn_norm, ffn_gate;
};

// Every block's modulation for one item, in the order of `blocks` (their host pre-norms, and for
// a modulated block its adaLN product). `adaln` is the item's timestep embedding (adaln_dim
// float32 values). With `stacked` (the modulated blocks' products and pre-norms in the order they
// appear in `blocks`) one product and one ops::fold_scale_gate serve them all where `stacked`
// lives: on the GPU nothing is read back, so the forward's kernels queue without a host round trip
// (the host fold of 32 blocks' 4·3840 values, tanh included, had left the GPU idle every step).
std::vector<ZImageModulation> zimage_modulations(const std::vector<ZImageBlockWeights>& blocks,
                                                 const std::vector<float>& adaln, Device device,
                                                 const ZImageStackedModulation* stacked = nullptr);

// Runs the block on x [tokens, dim] (float32, the item's residual stream) in place, where x lives;
// `compute` is the dtype the products read (float32 on the CPU; bf16 on the GPU). Each residual
// update is fused with the pre-norm that follows it: `normed` is this block's attention input
// (RMSNorm(x) with the folded attention norm, in `compute`) when the previous block returned it,
// undefined to compute it here; with `next_attention_norm` (the next block's folded attention
// norm) the block returns the next block's `normed`, else an undefined tensor.
Tensor run_zimage_block(Tensor& x, const ZImageBlockWeights& weights,
                        const ZImageModulation& modulation, const ZImageConfig& config,
                        const ZImageRopeTables& rope, DType compute, const attention::Call& call,
                        Tensor normed = Tensor(), const Tensor& next_attention_norm = Tensor());

}  // namespace mmgen::dit
