// WanTransformer3DModel, the Wan2.1 / Wan2.2 text-to-video diffusion transformer, written once
// over the device-neutral ops (core/ops.h) and run where set_device() puts it.
// On the CPU (the default) it computes in float32: weights stay memory-mapped in their stored
// dtype (bf16 for the released checkpoints) and are converted to float32 one block at a time as
// the forward reaches them, so resident memory is about the checkpoint's size plus one block's
// float32 weights and activations (and the time embedder's, converted once).
// On the GPU the weights are uploaded once in the compute dtype (bf16): bf16 products with
// float32 accumulation (bias and GELU in cuBLASLt's epilogue), fused row kernels between them
// (modulated LayerNorm, q/k RMSNorm with RoPE, gated residual), the residual stream in float32,
// attention through the GPU kernels the plan chose. The time embedder runs on the host in float32
// on both (as diffusers keeps it), and so do patchify and unpatchify.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "core/safetensors.h"
#include "core/weight_stream.h"
#include "models/dit/wan/wan_block.h"
#include "models/dit/wan/wan_rope.h"
#include "models/dit/wan/wan_transformer_config.h"
#include "models/dit/wan/wan_weights.h"
#include "models/lora/lora_file.h"

namespace mmgen::dit {

// The condition embedder's time branch for one timestep, in float32 (diffusers keeps it there):
// temb [D] for the output head, timestep_proj [6·D] for the blocks' modulation.
struct TimeConditioning {
  std::vector<float> temb, timestep_proj;
};
// The time branch's weights as float32 (load once, reuse for every step), on the host or, for a
// GPU run, on the GPU: there its products take a fraction of a millisecond, where the host spent
// tens (Wan2.1-14B's time projection is 630 MB of float32) and, with one process per GPU, did so
// on a share of the cores.
struct TimeEmbedderWeights {
  int64_t dim = 0, freq_dim = 0;
  Tensor linear_1_weight, linear_1_bias, linear_2_weight, linear_2_bias, proj_weight, proj_bias;
  static TimeEmbedderWeights shaped(const WanTransformerConfig& config);
  static TimeEmbedderWeights load(const WeightStore& store, const WanTransformerConfig& config);
  void parameters(const models::ParameterVisitor& visit);  // float32 wherever they are
};
// Runs where the weights are, in float32; the results come back to the host.
TimeConditioning time_conditioning(const TimeEmbedderWeights& weights,
                                   const WanTransformerConfig& config, float timestep);

// Where a forward pass sits in the denoising loop.
struct WanStep {
  int64_t index = 0;  // 0-based
  int64_t count = 1;
  int branch = 0;  // 0: conditional prompt, 1: unconditional (classifier-free guidance)
};

class WanTransformer {
 public:
  // Checks every tensor the config implies (names, shapes, float dtypes) up front.
  WanTransformer(WanTransformerConfig config, WeightStore weights);
  // A diffusers `transformer/` folder: config.json and the safetensors weights.
  static WanTransformer load(const fs::path& folder);

  const WanTransformerConfig& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }
  // Its attention layers, for the attention builder: each block's self-attention over the video
  // tokens alone (extra checkpoint weights under blocks.N.) and its cross-attention to the text.
  std::vector<attention::StackTraits> attention_stacks() const;

  // Runs the model on `device` from now on; `compute` is the dtype the GPU's products read (bf16;
  // the CPU computes in float32). Moving to the GPU uploads every weight once. `fp8_products`
  // (GPU only): the blocks' products in FP8 on Hopper's tensor cores, weights e4m3 with one scale
  // per output channel, their inputs e4m3 with one scale per token (--gpu-matmul-precision fp8).
  // `stream_blocks` (GPU only): the blocks' weights stay in page-locked host memory and visit
  // the GPU two at a time, each copied in on a second stream while the block before it runs
  // (core/weight_stream.h); the rest stays resident. The same numbers as resident blocks.
  void set_device(Device device, DType compute = DType::BF16, bool fp8_products = false,
                  bool stream_blocks = false);
  Device device() const { return resident_.device; }
  bool fp8_products() const { return resident_.block_inputs == DType::F8E4M3Rows; }
  bool streams_blocks() const { return resident_.stream != nullptr; }
  // Bytes of weights resident on the GPU (0 on the CPU, where they stay mapped); with streamed
  // blocks, the two slots they visit.
  size_t resident_weight_bytes() const { return resident_.bytes; }
  // Every tensor of the checkpoint as the model reads it (host copies, loaded block by block),
  // under its checkpoint name (models/parameters.h): the model's tree for what works by name.
  void list_parameters(const models::ParameterVisitor& visit) const;
  // A layer's diffusers name for its name in the original release, as LoRA files for Wan
  // (ComfyUI, lightx2v, musubi-tuner) give it: "blocks.0.self_attn.q" -> "blocks.0.attn1.to_q".
  static std::vector<lora::LoraTarget> lora_targets(const std::string& original) {
    return {{wan_lora_module_name(original), {}}};
  }
  // What resident_weight_bytes() is after set_device(Device::CUDA, DType::BF16, fp8_products,
  // stream_blocks), from the config (the memory plan of --max-gpu-memory, before anything is
  // loaded) and, where `store` is given, its stored types (a GGUF file's matrices stay blocks).
  static uint64_t gpu_weight_bytes(const WanTransformerConfig& config, bool fp8_products,
                                   bool stream_blocks = false, const WeightStore* store = nullptr);

  // latents [B, in_channels, F, H, W] (F, H, W divisible by the patch size), one timestep for the
  // whole batch (the scheduler's value, e.g. 999.0), text_embeds [B, L, text_dim], both on the
  // host. Returns the prediction [B, out_channels, F, H, W], float32 on the host. `step` says
  // where this forward sits in the denoising loop; `attention` holds the layers the pipeline built
  // for the run's device (pipeline/attention_layers.h; null: the dense reference everywhere).
  // `sequence` (Ulysses sequence parallel): this rank computes only its rows of the latent
  // tokens, exchanging them with the group around each self-attention, and the whole prediction
  // is gathered on every rank at the end.
  Tensor forward(const Tensor& latents, float timestep, const Tensor& text_embeds,
                 const WanStep& step = {}, attention::Layers* attention = nullptr,
                 const attention::SequenceParallel* sequence = nullptr) const;

 private:
  // The condition embedder's text MLP, the patch embedding and the output projection where the
  // model runs (see WanBlockWeights for the dtypes).
  // The output head's modulation table [1, 2, D] stays on the host, float32.
  struct OuterWeights {
    Shape patch_shape;  // the Conv3d's [D, in_channels, pt, ph, pw]
    int64_t text_dim = 0, out_dim = 0;
    Tensor patch_weight, patch_bias, text_1_weight, text_1_bias, text_2_weight, text_2_bias,
        proj_weight, proj_bias, head_table;
    static OuterWeights shaped(const WanTransformerConfig& config);
    void parameters(const models::ParameterVisitor& visit);
  };
  // Where the model runs (models::move_model's state). The GPU's resident weights, empty on the
  // CPU, which loads them as the forward goes; with streamed blocks only their modulation tables,
  // the rest visiting through `stream`.
  struct Resident {
    Device device = Device::CPU;
    DType compute = DType::F32;
    DType block_inputs = DType::F32;  // what the blocks' products read (WanBlockWeights::inputs)
    TimeEmbedderWeights time;         // on the GPU; the CPU reads host_time_
    std::vector<WanBlockWeights> blocks;
    std::shared_ptr<WeightStream> stream;
    OuterWeights outer;
    size_t bytes = 0;
  };
  // The GPU's weights added to `next` from the checkpoint (models::move_resident's fill).
  void place_resident(Resident& next, const models::PlacementRule& plain, bool fp8_products,
                      bool stream_blocks) const;
  OuterWeights outer_weights() const;
  OuterWeights host_outer_weights() const;  // loaded from the checkpoint (models::loaded)
  // A block's weights where the model runs (streamed: acquired; release_block after its work).
  WanBlockWeights block_weights(int64_t layer) const;
  void release_block(int64_t layer) const;
  const WanRopeTables& rope_tables(int64_t grid_t, int64_t grid_h, int64_t grid_w) const;

  WanTransformerConfig config_;
  WeightStore weights_;
  WanRope rope_;
  // The time branch's weights, float32 on the host, converted once: a CPU forward runs it there
  // (released while the GPU holds its copy, loaded again before a move).
  TimeEmbedderWeights host_time_;
  Resident resident_;
  // RoPE tables for the last latent grid (the same for every step of a run).
  mutable std::array<int64_t, 3> rope_grid_{-1, -1, -1};
  mutable WanRopeTables rope_tables_;
};

}  // namespace mmgen::dit
