// FluxPipeline (FLUX.1 dev and schnell, text-to-image), as diffusers runs it: the prompt through
// CLIP-L (77 tokens, its pooled output) and T5 (max_sequence_length tokens, padded, no mask);
// noise [1, 16, H/f, W/f] drawn by torch's CPU generator and packed into 2x2 tokens; the
// FlowMatchEuler schedule over sigmas linspace(1, 1/N, N) shifted by mu from the image's token
// count; the transformer sees timestep / 1000 and, for dev, the guidance scale as an input
// (guidance-distilled: one forward per step); with true_cfg_scale > 1 and a negative prompt, a
// second forward for it and neg + s·(pos − neg) (FluxPipeline's true CFG); unpack, de-normalise,
// decode with the AutoencoderKL, map to [0, 1].
//
// On the GPU (`cuda` in the input) every component runs there as the same class; the weights go up
// once per pipeline, on the first GPU run.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/dit/flux/flux_transformer.h"
#include "models/text_encoders/clip_text_model.h"
#include "models/text_encoders/umt5_encoder.h"
#include "models/vae/autoencoder_kl_decoder.h"
#include "models/vae/tiling.h"
#include "pipeline/attention_plan.h"
#include "pipeline/component_models.h"
#include "pipeline/model_index.h"
#include "pipeline/packed_latents.h"
#include "pipeline/registry.h"
#include "pipeline/request.h"
#include "text/tokenizer.h"

namespace mmgen {

struct FluxGenerationInput {
  std::string prompt;
  std::string negative_prompt;  // used with true_cfg_scale > 1 only; empty: none
  int64_t height = 0, width = 0;
  int64_t num_inference_steps = 0;
  int64_t max_sequence_length = 0;
  double guidance_scale = 3.5;  // embedded by a dev transformer; schnell has no embedder
  double true_cfg_scale = 1.0;
  std::optional<double> flow_shift;  // replaces the scheduler config's `shift`
  uint64_t seed = 0;
  Tensor initial_latents;  // [1, C, H/f, W/f] (unpacked) instead of noise from `seed`
  bool cuda = false;
  std::optional<vae::TileLayout> vae_tiles;
};

struct FluxGenerationOutput {
  Tensor frames;                           // [1, H, W, 3] float32 in [0, 1]
  std::vector<Tensor> latents_after_step;  // packed [1, tokens, 4·C], when asked (tests)
};

// A prompt as the transformer reads it.
struct FluxPromptEmbedding {
  Tensor text;    // [max_sequence_length, joint_attention_dim] float32, host: T5's output
  Tensor pooled;  // [pooled_projection_dim] float32, host: CLIP's pooled output
};

class FluxPipeline {
 public:
  explicit FluxPipeline(const ModelIndex& index);
  FluxPipeline(const ModelIndex& index, AttentionPlan plan);

  // The prompt through both encoders, where they are (place() moves them).
  FluxPromptEmbedding encode_prompt(const std::string& prompt, int64_t max_sequence_length) const;

  // [1, latent_channels, height / f, width / f], f the VAE's spatial factor.
  Shape latent_shape(int64_t height, int64_t width) const;
  int64_t vae_spatial_factor() const { return vae_->config().spatial_factor(); }

  FluxGenerationOutput generate(const FluxGenerationInput& input,
                                bool keep_step_latents = false) const;

  const AttentionPlan& attention_plan() const { return attention_plan_; }
  void place(bool cuda) const;

 private:
  ModelIndex index_;
  std::unique_ptr<tokenizers::Tokenizer> clip_tokenizer_, t5_tokenizer_;
  std::unique_ptr<text_encoders::ClipTextModel> clip_;
  std::unique_ptr<text_encoders::UMT5Encoder> t5_;
  std::unique_ptr<dit::FluxTransformer> transformer_;
  std::unique_ptr<vae::AutoencoderKLDecoder> vae_;
  SchedulerSpec scheduler_;
  AttentionPlan attention_plan_;
  std::string clip_backend_, t5_backend_;
};

FluxGenerationInput flux_input_from_request(const Request& request, const FluxPipeline& pipeline);

// Loads the pipeline once with the plan's backends; each runner call runs one request.
PipelineRunner load_flux_pipeline(const ModelIndex& index, const AttentionPlan& plan);

}  // namespace mmgen
