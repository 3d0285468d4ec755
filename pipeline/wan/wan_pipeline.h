// WanPipeline (Wan2.1 text-to-video / text-to-image), as diffusers runs it: clean and encode the
// prompt (and the negative prompt when guidance is on), draw or take the initial latents, denoise
// with the transformer and the scheduler (two separate forwards per step for classifier-free
// guidance), de-normalise and decode with the VAE, and map to frames in [0, 1].
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/dit/wan/wan_transformer.h"
#include "models/text_encoders/umt5_encoder.h"
#include "models/vae/tiled_decode.h"
#include "models/vae/wan_vae_decoder.h"
#include "pipeline/attention_plan.h"
#include "pipeline/component_models.h"
#include "pipeline/model_index.h"
#include "pipeline/parallel_run.h"
#include "pipeline/registry.h"
#include "pipeline/request.h"
#include "text/tokenizer.h"

namespace mmgen {

struct WanGenerationInput {
  std::string prompt;
  std::string negative_prompt;
  int64_t height = 0, width = 0, num_frames = 1;
  int64_t num_inference_steps = 0;
  double guidance_scale = 1;
  int64_t max_sequence_length = 0;
  std::optional<double> flow_shift;  // replaces the scheduler config's flow_shift
  uint64_t seed = 0;
  Tensor initial_latents;  // when defined, used instead of noise drawn from `seed`
  // When defined, [1, tokens, text_dim] used instead of encoding prompt / negative_prompt.
  Tensor prompt_embeds, negative_prompt_embeds;
  bool cuda = false;  // text encoder, transformer and VAE decoder on the GPU (--device cuda)
  // --gpu-matmul-precision fp8: the transformer blocks' products in FP8 (e4m3, per-channel and
  // per-token scales) on the GPU.
  bool fp8_products = false;
  // --gpu-offload stages (with --device cuda; what --max-gpu-memory chooses by default): the text
  // encoder leaves the GPU before the transformer comes up, and the transformer leaves it before
  // the VAE decodes, so only one large component is resident at a time (diffusers' model CPU
  // offload). The next request uploads it again.
  bool stage_offload = false;
  // --gpu-offload blocks: the transformer's blocks stream in from page-locked host memory, two on
  // the GPU at a time (WanTransformer::set_device's stream_blocks).
  bool stream_blocks = false;
  // --vae-tiling: decode in spatial tiles (latent pixels); nullopt decodes the whole frame.
  std::optional<vae::TileLayout> vae_tiles;
  // Several ranks share the run (pipeline/parallel_run.h); null: this process alone.
  const ParallelRun* parallel = nullptr;
};

struct WanGenerationOutput {
  Tensor frames;  // [F, H, W, 3] float32 in [0, 1] (undefined on ranks other than the leader)
  std::vector<Tensor> latents_after_step;  // kept when asked (tests compare them)
};

class WanPipeline {
 public:
  // Loads every component from the model folder (weights are mapped, not read). `plan` decides
  // the transformer's attention backends (self- and cross-attention, per layer); the first form
  // plans with default settings (auto selection, MMGEN_ATTENTION_BACKEND honoured).
  explicit WanPipeline(const ModelIndex& index);
  WanPipeline(const ModelIndex& index, AttentionPlan plan);

  // The prompt embedding the transformer sees: cleaned, tokenized to max_length, encoded with the
  // mask, zero-filled after the real tokens. [1, max_length, text_dim]. `cuda`: on the GPU (the
  // text encoder's copy made by the first --device cuda run, or made here).
  Tensor encode_prompt(const std::string& prompt, int64_t max_length, bool cuda = false) const;
  // encode_prompt for several prompts in one forward of the text encoder, on the CPU or (`cuda`)
  // the GPU: the [n, max_length] batch diffusers encodes when given a list of prompts. One
  // embedding per prompt, [1, max_length, text_dim] each.
  std::vector<Tensor> encode_prompts(const std::vector<std::string>& prompts, int64_t max_length,
                                     bool cuda = false) const;

  // The initial latent shape for a request.
  Shape latent_shape(int64_t height, int64_t width, int64_t num_frames) const;
  // Output pixels per latent pixel (8 for Wan2.1).
  int64_t vae_spatial_factor() const { return vae_->config().spatial_factor(); }
  // Hidden size of the prompt embeddings the transformer takes.
  int64_t text_embedding_dim() const { return transformer_->config().text_dim; }
  const dit::WanTransformerConfig& transformer_config() const { return transformer_->config(); }
  const WeightStore& transformer_weights() const { return transformer_->weights(); }

  WanGenerationOutput generate(const WanGenerationInput& input,
                               bool keep_step_latents = false) const;

  const AttentionPlan& attention_plan() const { return attention_plan_; }

 private:
  ModelIndex index_;
  std::unique_ptr<tokenizers::Tokenizer> tokenizer_;
  std::unique_ptr<text_encoders::UMT5Encoder> text_encoder_;
  std::unique_ptr<dit::WanTransformer> transformer_;
  std::unique_ptr<vae::WanVaeDecoder> vae_;
  SchedulerSpec scheduler_;  // model_index.json's, which picks the scheduler
  AttentionPlan attention_plan_;
};

// A request's generation input (reads --latents when given, checking its shape).
WanGenerationInput wan_input_from_request(const Request& request, const WanPipeline& pipeline);

// Loads the pipeline from `index` with the attention backends of `plan` (what plan_attention made
// of the requests to run) and returns a runner: each call runs one request, frames [F, H, W, 3]
// in [0, 1]; encode_ahead encodes a batch's prompts together first. The components are loaded
// once and shared by every call.
PipelineRunner load_wan_pipeline(const ModelIndex& index, const AttentionPlan& plan);

// load_wan_pipeline, then one request.
Tensor run_wan_pipeline(const Request& request, const ModelIndex& index, const AttentionPlan& plan);

}  // namespace mmgen
