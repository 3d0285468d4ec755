#include "pipeline/qwenimage/qwenimage_pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/npy.h"
#include "pipeline/attention_layers.h"
#include "pipeline/component_models.h"
#include "pipeline/component_weights.h"
#include "pipeline/decoded_image.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/guidance.h"
#include "pipeline/image_schedule.h"
#include "pipeline/packed_latents.h"
#include "pipeline/progress.h"
#include "pipeline/prompt_encoding.h"

namespace mmgen {
QwenImagePipeline::QwenImagePipeline(const ModelIndex& index)
    : QwenImagePipeline(index, plan_attention(index, Request{})) {}

QwenImagePipeline::QwenImagePipeline(const ModelIndex& index, AttentionPlan plan)
    : index_(index), attention_plan_(std::move(plan)) {
  check_components(find_pipeline("QwenImagePipeline", index.root / "model_index.json"), index);
  tokenizer_ = tokenizers::Tokenizer::load(index.component("tokenizer").path);
  text_encoder_ = load_component<text_encoders::Qwen3TextModel, text_encoders::Qwen3Config>(
      index, "text_encoder");
  transformer_ =
      load_component<dit::QwenImageTransformer, dit::QwenImageConfig>(index, "transformer");
  vae_ = load_component<vae::WanVaeDecoder, vae::WanVaeConfig>(index, "vae");
  scheduler_ = SchedulerSpec::load(index);
  text_backend_ = planned_backend(attention_plan_, "text_encoder");
  plan_vae_attention(*vae_, attention_plan_);
}

void QwenImagePipeline::place(bool cuda) const {
  place_models(cuda, {plain_move(*text_encoder_), plain_move(*transformer_), plain_move(*vae_)});
}

std::vector<Tensor> QwenImagePipeline::encode_prompts(const std::vector<std::string>& prompts,
                                                      int64_t max_sequence_length) const {
  const std::string backend =
      text_encoder_->device() == Device::CUDA
          ? gpu_text_backend(attention_plan_, text_encoder_->config().head_dim)
          : text_backend_;
  return encode_qwen_image_prompts_paged(*tokenizer_, *text_encoder_, prompts, max_sequence_length,
                                         backend);
}

Shape QwenImagePipeline::latent_shape(int64_t height, int64_t width) const {
  const int64_t factor = vae_->config().scale_factor_spatial;
  return {1, vae_->config().z_dim, 2 * (height / (2 * factor)), 2 * (width / (2 * factor))};
}

QwenImageGenerationOutput QwenImagePipeline::generate(const QwenImageGenerationInput& input,
                                                      bool keep_step_latents) const {
  place(input.cuda);
  // diffusers runs true CFG only with a negative prompt (has_neg_prompt) and a scale above 1.
  const bool true_cfg_on = input.true_cfg_scale > 1.0 && (!input.negative_prompt.empty() ||
                                                          input.negative_prompt_embeds.defined());
  Progress encode_stage("encode", 1);
  // Precomputed embeddings skip the text encoder; what is left goes through it in one call.
  std::vector<Tensor> embeds = {input.prompt_embeds,
                                true_cfg_on ? input.negative_prompt_embeds : Tensor()};
  std::vector<std::string> prompts;
  std::vector<size_t> slots;
  if (!embeds[0].defined()) prompts.push_back(input.prompt), slots.push_back(0);
  if (true_cfg_on && !embeds[1].defined())
    prompts.push_back(input.negative_prompt), slots.push_back(1);
  if (!prompts.empty()) {
    std::vector<Tensor> encoded = encode_prompts(prompts, input.max_sequence_length);
    for (size_t i = 0; i < slots.size(); ++i) embeds[slots[i]] = std::move(encoded[i]);
  }
  encode_stage.finish();

  const Shape shape = latent_shape(input.height, input.width);
  Tensor latents = initial_packed_latents(input.initial_latents, shape, input.seed);
  const dit::QwenImageShape grid{1, shape[2] / 2, shape[3] / 2};
  auto scheduler = make_image_scheduler(scheduler_.class_name, scheduler_.config, input.flow_shift,
                                        numpy_linspace_sigmas(int(input.num_inference_steps)),
                                        shape[2], shape[3]);

  attention::Layers attention =
      transformer_layers(attention_plan_, *transformer_, input.cuda ? Device::CUDA : Device::CPU);
  QwenImageGenerationOutput output;
  const auto predict = [&](const DenoiseStep& step, const Tensor& sample) {
    const float timestep = step.timestep / 1000.0f;
    const Tensor image = sample.select(0, 0).contiguous();
    std::vector<dit::QwenImageItem> batch = {{image, embeds[0], timestep, grid}};
    if (true_cfg_on) batch.push_back({image, embeds[1], timestep, grid});
    const std::vector<Tensor> predictions =
        transformer_->forward(batch, {step.index, step.steps}, &attention);
    const Tensor prediction =
        true_cfg_on ? guided_prediction(predictions[0], predictions[1],
                                        {.scale = input.true_cfg_scale,
                                         .rescale = GuidancePolicy::Rescale::RowsToConditionalNorm})
                    : predictions[0];
    return prediction.view(sample.shape());
  };
  latents = run_denoise_loop(
      *scheduler, latents, predict,
      {.latents_after_step = keep_step_latents ? &output.latents_after_step : nullptr});

  Progress decode("decode", 1);
  const Tensor unpacked = unpack_latents_2x2(latents, shape[1], shape[2], shape[3]);
  const Tensor z = vae_->denormalize(unpacked.view({1, shape[1], 1, shape[2], shape[3]}));
  // One frame: [1, 3, 1, H, W] → [1, 3, H, W].
  output.frames = decoded_images_to_frames(vae_->decode(z).select(2, 0));
  decode.finish();
  return output;
}

QwenImageGenerationInput qwen_image_input_from_request(const Request& request,
                                                       const QwenImagePipeline& pipeline) {
  check(!request.gpu_fp8_products,
        "--gpu-matmul-precision fp8: FP8 products are built for Wan's transformer so far; "
        "Qwen-Image runs its products in bf16, so leave it at bf16");
  check(!request.vae_tiling, "--vae-tiling: not wired for Qwen-Image yet; leave it off");
  QwenImageGenerationInput input;
  input.prompt = request.prompt;
  input.negative_prompt = request.negative_prompt;
  input.height = request.height;
  input.width = request.width;
  input.num_inference_steps = request.num_inference_steps;
  input.max_sequence_length = request.max_sequence_length;
  input.true_cfg_scale = request.true_cfg_scale;
  input.flow_shift = request.flow_shift;
  input.seed = request.seed;
  if (request.latents) input.initial_latents = read_tensor_file(*request.latents);
  input.cuda = request.device == "cuda";
  const int64_t width = pipeline.caption_dim();
  if (request.prompt_embeds)
    input.prompt_embeds = read_prompt_embeddings(*request.prompt_embeds, width, "--prompt-embeds");
  if (request.negative_prompt_embeds)
    input.negative_prompt_embeds =
        read_prompt_embeddings(*request.negative_prompt_embeds, width, "--negative-prompt-embeds");
  // (A scale above 1 without a negative prompt is warned about before loading:
  // PipelineSpec::unused_settings.)
  return input;
}

PipelineRunner load_qwen_image_pipeline(const ModelIndex& index, const AttentionPlan& plan) {
  return plain_runner<QwenImagePipeline>(index, plan, qwen_image_input_from_request);
}

}  // namespace mmgen
