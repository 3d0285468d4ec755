// ZImagePipeline (Z-Image text-to-image), as diffusers runs it: render each prompt with the Qwen
// chat template and encode it to Qwen3's hidden_states[-2] at its real tokens (ragged, no
// padding), and the negative prompt too when guidance is on (guidance_scale > 0); draw the latents
// [1, 16, H/f, W/f] (no frame axis); denoise with FlowMatchEulerDiscrete over Z-Image's sigmas,
// the transformer seeing (1000 − t)/1000 and its output negated, prompt and negative prompt as
// two items of one ragged forward; de-normalise and decode with the AutoencoderKL (whole, or in
// tiles with `vae_tiles`: models/vae/autoencoder_kl_tiled_decode.h); map to [0, 1].
//
// On the GPU (`cuda` in the input) every component runs there as the same class: the Qwen3 encoder
// on the GPU paged backends with a device KV pool, the transformer with bf16 products, the VAE
// with TF32 convolutions; the weights go up once per pipeline, on the first GPU run.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/dit/zimage/zimage_transformer.h"
#include "models/text_encoders/qwen3_model.h"
#include "models/text_encoders/qwen3_paged.h"
#include "models/vae/autoencoder_kl_decoder.h"
#include "models/vae/tiling.h"
#include "pipeline/attention_plan.h"
#include "pipeline/component_models.h"
#include "pipeline/model_index.h"
#include "pipeline/parallel_run.h"
#include "pipeline/registry.h"
#include "pipeline/request.h"
#include "pipeline/zimage/zimage_guidance.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mmgen {

struct ZImageGenerationInput {
  std::string prompt;
  std::string negative_prompt;
  int64_t height = 0, width = 0;
  int64_t num_inference_steps = 0;
  int64_t max_sequence_length = 0;
  ZImageGuidance guidance;
  std::optional<double> flow_shift;  // replaces the scheduler config's `shift`
  uint64_t seed = 0;
  Tensor initial_latents;  // when defined, used instead of noise drawn from `seed`
  bool cuda = false;       // run on the GPU (a CUDA build); else the CPU
  // Decode in tiles of this layout, latent pixels (--vae-tiling;
  // models/vae/autoencoder_kl_tiled_decode.h), on the device the VAE runs on; else whole.
  std::optional<vae::TileLayout> vae_tiles;
  // When defined, [tokens, cap_feat_dim] used instead of encoding prompt / negative_prompt (the
  // negative one only with guidance on).
  Tensor prompt_embeds, negative_prompt_embeds;
  // Several ranks (`--gpus N`, Ulysses sequence parallel only): the leader encodes and
  // broadcasts, every rank steps the same latents on its rows, the leader decodes. Null: alone.
  const ParallelRun* parallel = nullptr;
};

struct ZImageGenerationOutput {
  Tensor frames;                           // [1, H, W, 3] float32 in [0, 1]; the leader's only
  std::vector<Tensor> latents_after_step;  // kept when asked (tests compare them)
};

class ZImagePipeline {
 public:
  // Loads every component (weights are mapped, not read). `plan` gives the transformer's
  // per-layer backends, the text encoder's paged backend and the VAE's; the first form plans with
  // default settings (auto selection, MMGEN_ATTENTION_BACKEND honoured).
  explicit ZImagePipeline(const ModelIndex& index);
  ZImagePipeline(const ModelIndex& index, AttentionPlan plan);

  // Each prompt's embedding, [tokens, hidden] on the host, through the plan's paged text-encoder
  // backend (pipeline/prompt_encoding.h's Qwen3 path, the one `mmgen encode` runs), on the device
  // the encoder is on.
  // All prompts of one call share one prefix cache (a later prompt reuses the chat template's
  // KV and hidden states from an earlier one); `report`, when given, gets its counts.
  std::vector<Tensor> encode_prompts(const std::vector<std::string>& prompts,
                                     int64_t max_sequence_length,
                                     text_encoders::PrefixCacheReport* report = nullptr) const;

  // The width of the prompt embeddings the transformer takes (its cap_feat_dim).
  int64_t caption_dim() const;

  // [1, in_channels, height / f, width / f], f the VAE's spatial factor.
  Shape latent_shape(int64_t height, int64_t width) const;
  int64_t vae_spatial_factor() const { return vae_->config().spatial_factor(); }

  ZImageGenerationOutput generate(const ZImageGenerationInput& input,
                                  bool keep_step_latents = false) const;

  const AttentionPlan& attention_plan() const { return attention_plan_; }
  // The paged backend the text encoder runs where it is now.
  std::string text_encoder_backend() const;

  // Moves every component to the device a run asks for (the weights go up once; a CPU run after a
  // GPU one moves them back). generate() calls it; a batch's encode_ahead calls it first. A rank
  // other than the leader of a parallel run needs the transformer only.
  void place(bool cuda, bool transformer_only = false) const;

 private:
  ModelIndex index_;
  std::unique_ptr<tokenizers::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizers::ChatTemplate> chat_template_;  // the tokenizer's, read once
  std::unique_ptr<text_encoders::Qwen3TextModel> text_encoder_;
  std::unique_ptr<dit::ZImageTransformer> transformer_;
  std::unique_ptr<vae::AutoencoderKLDecoder> vae_;
  SchedulerSpec scheduler_;  // model_index.json's, which picks the scheduler
  AttentionPlan attention_plan_;
  std::string text_backend_;
};

// A request's generation input: reads --latents (its shape is checked by generate) and
// --prompt-embeds / --negative-prompt-embeds (their width against the transformer's) when given;
// --vae-tile-size / --vae-tile-overlap become latent pixels of `pipeline`'s VAE.
ZImageGenerationInput zimage_input_from_request(const Request& request,
                                                const ZImagePipeline& pipeline);

// Loads the pipeline once with the plan's backends; each runner call runs one request and returns
// frames [1, H, W, 3] in [0, 1]. encode_ahead (a batch, on the device the requests run on)
// encodes the prompts of a chunk and their negative prompts in one call, through one prefix cache:
// every prompt after the first reuses the chat template's prefix, and a log line reports the hits.
// The cache lives for the chunk (generate_command's 32 prompts), not across chunks, so its KV pool
// is freed before the transformer runs; a shared negative prompt is encoded once per run and kept.
PipelineRunner load_zimage_pipeline(const ModelIndex& index, const AttentionPlan& plan);

}  // namespace mmgen
