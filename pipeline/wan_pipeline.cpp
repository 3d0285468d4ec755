#include "pipeline/wan_pipeline.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/npy.h"
#include "core/random.h"
#include "models/text_encoders/prompt_embedding.h"
#include "models/tokenizers/prompt_clean.h"
#include "pipeline/progress.h"
#include "pipeline/schedulers/scheduler.h"

namespace mmgen {

namespace {

// uncond + g · (cond − uncond), in the order diffusers evaluates it (float32).
Tensor classifier_free_guidance(const Tensor& cond, const Tensor& uncond, float guidance) {
  Tensor out = Tensor::empty(cond.shape());
  const float* c = cond.data<float>();
  const float* u = uncond.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = u[i] + guidance * (c[i] - u[i]);
  return out;
}

// VAE output [1, 3, F, H, W] in [-1, 1] → frames [F, H, W, 3] in [0, 1] (diffusers' postprocess).
Tensor video_to_frames(const Tensor& video) {
  Tensor frames = video.select(0, 0).permute({1, 2, 3, 0}).contiguous().clone();
  float* p = frames.data<float>();
  for (int64_t i = 0; i < frames.numel(); ++i) p[i] = std::clamp(p[i] / 2.0f + 0.5f, 0.0f, 1.0f);
  return frames;
}

}  // namespace

WanPipeline::WanPipeline(const ModelIndex& index) : index_(index) {
  tokenizer_ = tokenizers::Tokenizer::load(index.component("tokenizer").path);
  text_encoder_ = std::make_unique<text_encoders::UMT5Encoder>(
      text_encoders::UMT5Encoder::from_folder(index.component("text_encoder").path));
  transformer_ = std::make_unique<dit::WanTransformer>(
      dit::WanTransformer::load(index.component("transformer").path));
  vae_ = std::make_unique<vae::WanVaeDecoder>(
      vae::WanVaeDecoder::open_folder(index.component("vae").path));
  scheduler_config_ = load_component_config(index.component("scheduler"));
  schedulers::make_scheduler(scheduler_config_);  // reject an unsupported scheduler before any work
}

Tensor WanPipeline::encode_prompt(const std::string& prompt, int64_t max_length) const {
  const tokenizers::Encoding encoding =
      tokenizer_->encode_padded(tokenizers::clean_prompt(prompt), size_t(max_length));
  const Shape shape = {1, int64_t(encoding.ids.size())};
  return text_encoders::encode_wan_prompt_embeddings(
      *text_encoder_, Tensor::from_vector(shape, encoding.ids),
      Tensor::from_vector(shape, encoding.attention_mask));
}

Shape WanPipeline::latent_shape(int64_t height, int64_t width, int64_t num_frames) const {
  const auto& config = vae_->config();
  return {1, config.z_dim, (num_frames - 1) / config.scale_factor_temporal + 1,
          height / config.scale_factor_spatial, width / config.scale_factor_spatial};
}

WanGenerationOutput WanPipeline::generate(const WanGenerationInput& input,
                                          bool keep_step_latents) const {
  const bool guided = input.guidance_scale > 1.0;
  Progress encode_stage("encode", 1);
  const Tensor prompt_embeds = encode_prompt(input.prompt, input.max_sequence_length);
  const Tensor negative_embeds =
      guided ? encode_prompt(input.negative_prompt, input.max_sequence_length) : Tensor();
  encode_stage.finish();

  auto scheduler = schedulers::make_scheduler(scheduler_config_, input.flow_shift);
  scheduler->set_timesteps(int(input.num_inference_steps));

  const Shape shape = latent_shape(input.height, input.width, input.num_frames);
  Tensor latents;
  if (input.initial_latents.defined()) {
    check(input.initial_latents.shape() == shape,
          "--latents has shape {} but this request needs {}",
          shape_string(input.initial_latents.shape()), shape_string(shape));
    latents = input.initial_latents.to(DType::F32).clone();
  } else {
    latents = randn(shape, input.seed);
  }

  WanGenerationOutput output;
  Progress denoise("denoise", scheduler->num_inference_steps());
  for (int i = 0; i < scheduler->num_inference_steps(); ++i) {
    const float t = scheduler->timesteps()[size_t(i)];
    Tensor prediction = transformer_->forward(latents, t, prompt_embeds);
    if (guided) {
      const Tensor unconditional = transformer_->forward(latents, t, negative_embeds);
      prediction = classifier_free_guidance(prediction, unconditional, float(input.guidance_scale));
    }
    latents = scheduler->step(prediction, i, latents);
    if (keep_step_latents) output.latents_after_step.push_back(latents);
    denoise.update(i + 1);
  }
  denoise.finish();

  Progress decode("decode", int(shape[2]));
  const Tensor video =
      vae_->decode(vae_->denormalize(latents), [&](int done, int) { decode.update(done); });
  decode.finish();
  output.frames = video_to_frames(video);
  return output;
}

WanGenerationInput wan_input_from_request(const Request& request, const WanPipeline& pipeline) {
  WanGenerationInput input;
  input.prompt = request.prompt;
  input.negative_prompt = request.negative_prompt;
  input.height = request.height;
  input.width = request.width;
  input.num_frames = request.num_frames;
  input.num_inference_steps = request.num_inference_steps;
  input.guidance_scale = request.guidance_scale;
  input.max_sequence_length = request.max_sequence_length;
  input.flow_shift = request.flow_shift;
  input.seed = request.seed;
  if (request.latents) input.initial_latents = read_tensor_file(*request.latents);
  return input;
}

Tensor run_wan_pipeline(const Request& request, const ModelIndex& index) {
  Progress load("load", 1);
  const WanPipeline pipeline(index);
  load.finish();
  return pipeline.generate(wan_input_from_request(request, pipeline)).frames;
}

}  // namespace mmgen
