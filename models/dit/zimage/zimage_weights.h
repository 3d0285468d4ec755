// The Z-Image transformer's tensors: their names and shapes (checked up front, each failure one
// line naming the tensor and the checkpoint), and where each lives while the model runs.
//
// On the CPU the weights stay memory-mapped in their stored dtype and a block's products are
// converted to float32 just before it runs (one block resident at a time). On the GPU they are
// uploaded once: products in the compute dtype (bf16), norms float32. Either way, what the host
// computes per forward (the timestep MLP) reads host tensors; on the GPU the modulation products
// and their fold into the pre-norms run there, all blocks' stacked into one
// (ZImageStackedModulation, owned by the transformer).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/safetensors.h"
#include "models/dit/zimage/zimage_config.h"
#include "models/parameters.h"

namespace mmgen::dit {

// "noise_refiner.0.", "context_refiner.1.", "layers.29." ...
std::string zimage_block_prefix(std::string_view stack, int64_t layer);

struct ZImageBlockWeights {
  int64_t dim = 0, ffn_dim = 0, head_dim = 0, adaln_dim = 0;
  bool modulated = false;  // false in the context refiner, which has no adaLN product
  // Products (no biases: diffusers builds them with bias=False): on the host in the stored dtype
  // (the CPU product converts as it packs), placed() in the compute dtype on the device.
  Tensor to_q, to_k, to_v, to_out, w1, w2, w3;
  // Per-head q/k RMSNorm [head_dim] and the post-norms, float32 where the model runs.
  Tensor norm_q, norm_k, attention_norm2, ffn_norm2;
  // The pre-norms, float32 on the host: a modulated block folds each item's (1 + scale) into them
  // (on the GPU from ZImageStackedModulation's copy); an unmodulated block's are placed with it.
  Tensor attention_norm1, ffn_norm1;
  // adaLN_modulation.0 [4·dim, adaln_dim] (a table: mapped in the stored dtype; ops::linear
  // converts as it reads) and its bias (float32), on the host; only in a modulated block.
  // On the GPU the transformer uploads every block's once, stacked into one product.
  Tensor modulation_weight, modulation_bias;

  // A block of `config`'s shapes, no tensor loaded (models/parameters.h).
  static ZImageBlockWeights shaped(const ZImageConfig& config, bool modulated);
  static ZImageBlockWeights load(const WeightStore& store, const std::string& prefix,
                                 const ZImageConfig& config, bool modulated);
  // Only what zimage_modulation reads (the pre-norms and the modulation product), the rest
  // undefined: a forward folds every block's modulation before the blocks run.
  static ZImageBlockWeights load_modulation(const WeightStore& store, const std::string& prefix,
                                            const ZImageConfig& config, bool modulated);
  // Named below the block's prefix. Placed, q/k/v and w1/w3 are each one allocation
  // (ops::linear_each runs each set as one product); the host tensors stay where they are.
  void parameters(const models::ParameterVisitor& visit);
};

// The modulated blocks' adaLN products one after another where the model runs: weight
// [blocks · 4·dim, adaln_dim] (the compute dtype), bias [blocks · 4·dim] float32, and the pre-norms
// their scales fold into, norms [blocks, 2, dim] float32 (attention_norm1, ffn_norm1): a forward's
// modulation is one product and one fold there, with nothing read back.
struct ZImageStackedModulation {
  Tensor weight, bias, norms;
};

// The adaLN products of `blocks` (all modulated), stacked in order, placed on `device` with the
// weight in `compute`.
ZImageStackedModulation stack_modulations(const std::vector<const ZImageBlockWeights*>& blocks,
                                          Device device, DType compute);

// Everything outside the blocks.
struct ZImageOuterWeights {
  int64_t dim = 0, adaln_dim = 0, patch_values = 0, cap_feat_dim = 0;
  // Where the model runs: the patch and caption embedders' products, the final projection.
  Tensor x_embed_weight, x_embed_bias, cap_embed_weight, cap_embed_bias, final_weight, final_bias;
  Tensor cap_norm;  // the caption embedder's RMSNorm [cap_feat_dim], float32 where the model runs
  // Host float32: the timestep MLP, the final layer's adaLN (run on the [1, adaln_dim] timestep
  // embedding) and the learned pad tokens [dim] (written into the host-assembled sequences).
  Tensor t_1_weight, t_1_bias, t_2_weight, t_2_bias, final_mod_weight, final_mod_bias;
  Tensor x_pad_token, cap_pad_token;  // [dim] once loaded (the checkpoint's [1, dim])
  std::string patch_key;  // "2-1": the embedder and final layer of the config's patch sizes

  static ZImageOuterWeights shaped(const ZImageConfig& config);
  static ZImageOuterWeights load(const WeightStore& store, const ZImageConfig& config);
  void parameters(const models::ParameterVisitor& visit);
};

// What the checks' errors call a Z-Image transformer checkpoint (models::expect_checkpoint).
inline constexpr models::CheckpointKind kZImageCheckpoint{"transformer", "Z-Image"};

// Checks every tensor the config implies against the checkpoint, before anything is loaded.
void check_zimage_checkpoint(const WeightStore& store, const ZImageConfig& config);

// Every tensor of the checkpoint as the model reads it (host copies, loaded block by block),
// under its checkpoint name: the model's tree for what works by name (tests, LoRA).
void list_zimage_parameters(const WeightStore& store, const ZImageConfig& config,
                            const models::ParameterVisitor& visit);

}  // namespace mmgen::dit
