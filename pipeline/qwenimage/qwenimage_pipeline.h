// QwenImagePipeline (Qwen-Image text-to-image), as diffusers runs it: each prompt in the
// pipeline's template through Qwen2.5-VL's language model on the paged backends (hidden_states[-1]
// without the template's first 34 tokens, ragged per prompt); noise [1, 16, H/8, W/8] drawn by
// torch's CPU generator and packed into 2x2 tokens (FLUX's packing); FlowMatchEuler over sigmas
// linspace(1, 1/N, N) with mu from the token count (exponential time shift, shift_terminal from
// the scheduler config); the transformer sees timestep / 1000; with true_cfg_scale > 1 and a
// negative prompt a second forward and neg + s·(pos − neg) rescaled per token to the positive
// prediction's norm; unpack, de-normalise with the VAE's latents_mean / latents_std, decode one
// frame with AutoencoderKLQwenImage (Wan's causal 3D VAE code), map to [0, 1].
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/dit/qwenimage/qwenimage_transformer.h"
#include "models/text_encoders/qwen3_model.h"
#include "models/vae/wan_vae_decoder.h"
#include "pipeline/attention_plan.h"
#include "pipeline/component_models.h"
#include "pipeline/model_index.h"
#include "pipeline/registry.h"
#include "pipeline/request.h"
#include "pipeline/schedulers/scheduler.h"
#include "text/tokenizer.h"

namespace mmgen {

struct QwenImageGenerationInput {
  std::string prompt;
  std::string negative_prompt;  // empty: none (true CFG off, as diffusers without one)
  int64_t height = 0, width = 0;
  int64_t num_inference_steps = 0;
  int64_t max_sequence_length = 0;
  double true_cfg_scale = 4.0;
  std::optional<double> flow_shift;
  uint64_t seed = 0;
  Tensor initial_latents;  // [1, C, H/f, W/f] (or with a frame axis of 1) instead of noise
  bool cuda = false;
  // When defined, [tokens, joint_attention_dim] (`mmgen encode` files) used instead of encoding
  // prompt / negative_prompt (the negative one only with true CFG on).
  Tensor prompt_embeds, negative_prompt_embeds;
};

struct QwenImageGenerationOutput {
  Tensor frames;                           // [1, H, W, 3] float32 in [0, 1]
  std::vector<Tensor> latents_after_step;  // packed [1, tokens, 4·C], when asked (tests)
};

class QwenImagePipeline {
 public:
  explicit QwenImagePipeline(const ModelIndex& index);
  QwenImagePipeline(const ModelIndex& index, AttentionPlan plan);

  // Each prompt's embedding [tokens ≤ max_sequence_length, hidden] on the host.
  std::vector<Tensor> encode_prompts(const std::vector<std::string>& prompts,
                                     int64_t max_sequence_length) const;
  // [1, z_dim, 2·(H / 2f), 2·(W / 2f)], f the VAE's spatial factor.
  Shape latent_shape(int64_t height, int64_t width) const;

  QwenImageGenerationOutput generate(const QwenImageGenerationInput& input,
                                     bool keep_step_latents = false) const;
  // The width of the prompt embeddings the transformer takes (its joint_attention_dim).
  int64_t caption_dim() const { return transformer_->config().joint_attention_dim; }
  void place(bool cuda) const;

 private:
  ModelIndex index_;
  std::unique_ptr<tokenizers::Tokenizer> tokenizer_;
  std::unique_ptr<text_encoders::Qwen3TextModel> text_encoder_;
  std::unique_ptr<dit::QwenImageTransformer> transformer_;
  std::unique_ptr<vae::WanVaeDecoder> vae_;
  SchedulerSpec scheduler_;  // model_index.json's, which picks the scheduler
  AttentionPlan attention_plan_;
  std::string text_backend_;
};

// A request's generation input: --latents, and --prompt-embeds / --negative-prompt-embeds
// (their width checked against the transformer's) when given.
QwenImageGenerationInput qwen_image_input_from_request(const Request& request,
                                                       const QwenImagePipeline& pipeline);
PipelineRunner load_qwen_image_pipeline(const ModelIndex& index, const AttentionPlan& plan);

}  // namespace mmgen
