#include "pipeline/flux/flux_pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/npy.h"
#include "models/vae/autoencoder_kl_tiled_decode.h"
#include "pipeline/attention_layers.h"
#include "pipeline/component_models.h"
#include "pipeline/component_weights.h"
#include "pipeline/decoded_image.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/guidance.h"
#include "pipeline/image_schedule.h"
#include "pipeline/progress.h"
#include "pipeline/schedulers/scheduler.h"

namespace mmgen {
namespace {}  // namespace

FluxPipeline::FluxPipeline(const ModelIndex& index)
    : FluxPipeline(index, plan_attention(index, Request{})) {}

FluxPipeline::FluxPipeline(const ModelIndex& index, AttentionPlan plan)
    : index_(index), attention_plan_(std::move(plan)) {
  check_components(find_pipeline("FluxPipeline", index.root / "model_index.json"), index);
  clip_tokenizer_ = tokenizers::Tokenizer::load(index.component("tokenizer").path);
  t5_tokenizer_ = tokenizers::Tokenizer::load(index.component("tokenizer_2").path);
  clip_ = load_component<text_encoders::ClipTextModel, text_encoders::ClipTextConfig>(
      index, "text_encoder");
  t5_ =
      load_component<text_encoders::UMT5Encoder, text_encoders::T5Config>(index, "text_encoder_2");
  transformer_ = load_component<dit::FluxTransformer, dit::FluxConfig>(index, "transformer");
  vae_ = load_component<vae::AutoencoderKLDecoder, vae::AutoencoderKLConfig>(index, "vae");
  scheduler_ = SchedulerSpec::load(index);
  clip_backend_ = planned_backend(attention_plan_, "text_encoder");
  if (!clip_backend_.empty()) clip_->set_attention_backend(clip_backend_);
  t5_backend_ = planned_backend(attention_plan_, "text_encoder_2");
  if (!t5_backend_.empty()) t5_->set_attention_backend(t5_backend_);
  plan_vae_attention(*vae_, attention_plan_);
}

void FluxPipeline::place(bool cuda) const {
  // The text encoders take the GPU's paged backend along (a CPU plan names a CPU design).
  const auto text_move = [&](auto& encoder, const std::string& component, int64_t head_dim,
                             const std::string& cpu_backend) {
    return ModelMove{[&encoder] { return encoder.device(); },
                     [&, component, head_dim](Device to) {
                       encoder.set_device(to, DType::BF16,
                                          to == Device::CUDA ? gpu_text_backend(attention_plan_,
                                                                                head_dim, component)
                                                             : cpu_backend);
                     }};
  };
  place_models(cuda, {text_move(*clip_, "text_encoder", clip_->config().head_dim(), clip_backend_),
                      text_move(*t5_, "text_encoder_2", t5_->config().d_kv, t5_backend_),
                      plain_move(*transformer_), plain_move(*vae_)});
}

FluxPromptEmbedding FluxPipeline::encode_prompt(const std::string& prompt,
                                                int64_t max_sequence_length) const {
  // FluxPipeline pads CLIP to its 77 positions and T5 to max_sequence_length, and passes neither
  // encoder a mask: pad tokens are attended like any other (CLIP's causal mask hides them from
  // the pooled row).
  const tokenizers::Encoding clip_ids =
      clip_tokenizer_->encode_padded(prompt, size_t(clip_->config().max_position_embeddings));
  FluxPromptEmbedding out;
  out.pooled = clip_->forward(std::vector<std::vector<int64_t>>{clip_ids.ids})
                   .pooled.view({-1})
                   .contiguous();
  const tokenizers::Encoding t5_ids =
      t5_tokenizer_->encode_padded(prompt, size_t(max_sequence_length));
  const Tensor ids = Tensor::from_vector({1, int64_t(t5_ids.ids.size())}, t5_ids.ids);
  out.text = t5_->forward(ids).select(0, 0).contiguous();
  return out;
}

Shape FluxPipeline::latent_shape(int64_t height, int64_t width) const {
  const int64_t factor = vae_->config().spatial_factor();
  // diffusers: 2 · (H // (2f)), so that the latent packs into whole 2x2 tokens.
  return {1, vae_->config().latent_channels, 2 * (height / (2 * factor)),
          2 * (width / (2 * factor))};
}

FluxGenerationOutput FluxPipeline::generate(const FluxGenerationInput& input,
                                            bool keep_step_latents) const {
  place(input.cuda);
  const bool true_cfg_on = input.true_cfg_scale > 1.0 && !input.negative_prompt.empty();
  Progress encode_stage("encode", 1);
  const FluxPromptEmbedding positive = encode_prompt(input.prompt, input.max_sequence_length);
  FluxPromptEmbedding negative;
  if (true_cfg_on) negative = encode_prompt(input.negative_prompt, input.max_sequence_length);
  encode_stage.finish();

  const Shape shape = latent_shape(input.height, input.width);
  Tensor latents = initial_packed_latents(input.initial_latents, shape, input.seed);
  const int64_t rows = shape[2] / 2, columns = shape[3] / 2;

  auto scheduler = make_image_scheduler(scheduler_.class_name, scheduler_.config, input.flow_shift,
                                        numpy_linspace_sigmas(int(input.num_inference_steps)),
                                        shape[2], shape[3]);

  attention::Layers attention =
      transformer_layers(attention_plan_, *transformer_, input.cuda ? Device::CUDA : Device::CPU);
  FluxGenerationOutput output;
  const auto predict = [&](const DenoiseStep& step, const Tensor& sample) {
    // timestep / 1000 in float32, as the pipeline divides the scheduler's float32 timestep.
    const float timestep = step.timestep / 1000.0f;
    const Tensor image = sample.select(0, 0).contiguous();
    const auto item = [&](const FluxPromptEmbedding& prompt) {
      return dit::FluxItem{image, prompt.text, prompt.pooled, timestep, float(input.guidance_scale),
                           rows,  columns};
    };
    std::vector<dit::FluxItem> batch = {item(positive)};
    if (true_cfg_on) batch.push_back(item(negative));
    const std::vector<Tensor> predictions =
        transformer_->forward(batch, {step.index, step.steps}, &attention);
    const Tensor prediction = true_cfg_on ? guided_prediction(predictions[0], predictions[1],
                                                              {.scale = input.true_cfg_scale})
                                          : predictions[0];
    return prediction.view(sample.shape());
  };
  latents = run_denoise_loop(
      *scheduler, latents, predict,
      {.latents_after_step = keep_step_latents ? &output.latents_after_step : nullptr});

  const Tensor z = vae_->denormalize(unpack_latents_2x2(latents, shape[1], shape[2], shape[3]));
  Tensor decoded;
  if (input.vae_tiles) {
    Progress decode("decode", 1, "tile");
    decoded = vae::decode_tiled(*vae_, z, *input.vae_tiles, [&](int done, int total) {
      decode.update(done, total);
      stop_if_requested();
    });
    decode.finish();
  } else {
    Progress decode("decode", 1);
    decoded = vae_->decode(z);
    decode.finish();
  }
  output.frames = decoded_images_to_frames(decoded);
  return output;
}

FluxGenerationInput flux_input_from_request(const Request& request, const FluxPipeline& pipeline) {
  check(!request.gpu_fp8_products,
        "--gpu-matmul-precision fp8: FP8 products are built for Wan's transformer so far; FLUX "
        "runs its products in bf16, so leave it at bf16");
  check(!request.prompt_embeds && !request.negative_prompt_embeds,
        "--prompt-embeds: FLUX reads two encoders' outputs (T5 and CLIP's pooled row); pass the "
        "prompt as text");
  FluxGenerationInput input;
  input.prompt = request.prompt;
  input.negative_prompt = request.negative_prompt;
  input.height = request.height;
  input.width = request.width;
  input.num_inference_steps = request.num_inference_steps;
  input.max_sequence_length = request.max_sequence_length;
  input.guidance_scale = request.guidance_scale;
  input.true_cfg_scale = request.true_cfg_scale;
  input.flow_shift = request.flow_shift;
  input.seed = request.seed;
  if (request.latents) input.initial_latents = read_tensor_file(*request.latents);
  input.cuda = request.device == "cuda";
  if (request.vae_tiling) {
    const int64_t factor = pipeline.vae_spatial_factor();
    input.vae_tiles =
        vae::TileLayout{request.vae_tile_size / factor, request.vae_tile_overlap / factor};
  }
  // (A scale above 1 without a negative prompt is warned about before loading:
  // PipelineSpec::unused_settings.)
  return input;
}

PipelineRunner load_flux_pipeline(const ModelIndex& index, const AttentionPlan& plan) {
  return plain_runner<FluxPipeline>(index, plan, flux_input_from_request);
}

}  // namespace mmgen
