#include "pipeline/zimage/zimage_pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/npy.h"
#include "core/random.h"
#include "core/safetensors.h"
#include "models/vae/autoencoder_kl_tiled_decode.h"
#include "pipeline/attention_layers.h"
#include "pipeline/component_models.h"
#include "pipeline/component_weights.h"
#include "pipeline/decoded_image.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/guidance.h"
#include "pipeline/image_schedule.h"
#include "pipeline/progress.h"
#include "pipeline/prompt_encoding.h"
#include "pipeline/zimage/zimage_schedule.h"

namespace mmgen {

namespace {

// −prediction, [C, 1, h, w] → [1, C, h, w]: Z-Image's transformer predicts the opposite of the
// flow the scheduler integrates, so diffusers negates it before the step. One pass into a fresh
// tensor (it runs on the host between two forwards, while the GPU waits).
Tensor negated_step_input(const Tensor& prediction) {
  const Tensor in = prediction.to(DType::F32).contiguous();
  Tensor out = Tensor::empty(in.shape());
  const float* from = in.data<float>();
  float* to = out.data<float>();
  const int64_t count = in.numel();
  for (int64_t i = 0; i < count; ++i) to[i] = -from[i];
  return out.view({1, prediction.size(0), prediction.size(2), prediction.size(3)});
}

}  // namespace

ZImagePipeline::ZImagePipeline(const ModelIndex& index)
    : ZImagePipeline(index, plan_attention(index, Request{})) {}

ZImagePipeline::ZImagePipeline(const ModelIndex& index, AttentionPlan plan)
    : index_(index), attention_plan_(std::move(plan)) {
  // The classes model_index.json names, refused before any weights are mapped (the CLI checked
  // already; a library caller may not have).
  check_components(find_pipeline("ZImagePipeline", index.root / "model_index.json"), index);
  tokenizer_ = tokenizers::Tokenizer::load(index.component("tokenizer").path);
  // Checked before the weights load: a tokenizer without a template mmgen can render stops here.
  chat_template_ = std::make_unique<tokenizers::ChatTemplate>(
      tokenizers::ChatTemplate::load(index.component("tokenizer").path));
  text_encoder_ = load_component<text_encoders::Qwen3TextModel, text_encoders::Qwen3Config>(
      index, "text_encoder");
  transformer_ = load_component<dit::ZImageTransformer, dit::ZImageConfig>(index, "transformer");
  vae_ = load_component<vae::AutoencoderKLDecoder, vae::AutoencoderKLConfig>(index, "vae");
  scheduler_ = SchedulerSpec::load(index);
  text_backend_ = planned_backend(attention_plan_, "text_encoder");
  plan_vae_attention(*vae_, attention_plan_);
}

std::string ZImagePipeline::text_encoder_backend() const {
  return text_encoder_->device() == Device::CUDA
             ? gpu_text_backend(attention_plan_, text_encoder_->config().head_dim)
             : text_backend_;
}

void ZImagePipeline::place(bool cuda, bool transformer_only) const {
  if (transformer_only) {
    place_models(cuda, {plain_move(*transformer_)});
    return;
  }
  if (place_models(cuda,
                   {plain_move(*text_encoder_), plain_move(*transformer_), plain_move(*vae_)}) &&
      cuda)
    spdlog::info("text encoder on the GPU: {} paged attention", text_encoder_backend());
}

std::vector<Tensor> ZImagePipeline::encode_prompts(const std::vector<std::string>& prompts,
                                                   int64_t max_sequence_length,
                                                   text_encoders::PrefixCacheReport* report) const {
  // The smallest pool, which is allocated whole: more prompts go through it in turns (the
  // encoder evicts the least recently used prefixes, and the template's is used by every prompt).
  return encode_qwen3_prompts(*tokenizer_, *chat_template_, *text_encoder_, prompts,
                              max_sequence_length, text_encoder_backend(), /*page_size=*/1, report,
                              nullptr, kQwen3MinPoolTokensPerLength * max_sequence_length);
}

int64_t ZImagePipeline::caption_dim() const {
  return transformer_->config().cap_feat_dim;
}

Shape ZImagePipeline::latent_shape(int64_t height, int64_t width) const {
  const int64_t factor = vae_->config().spatial_factor();
  return {1, transformer_->config().in_channels, height / factor, width / factor};
}

ZImageGenerationOutput ZImagePipeline::generate(const ZImageGenerationInput& input,
                                                bool keep_step_latents) const {
  const ZImageGuidance& guidance = input.guidance;
  const ParallelRun* parallel = input.parallel;
  const bool leader = !parallel || parallel->leader();
  check(!parallel || parallel->layout.cfg_degree == 1,
        "--cfg-parallel: built for WanPipeline only so far; drop --cfg-parallel");
  place(input.cuda, !leader);
  Progress encode_stage("encode", 1);
  // Precomputed embeddings (--prompt-embeds, from `mmgen encode`) skip the text encoder; the
  // negative one is used only with guidance on. What is left goes through the encoder in one call:
  // the second prompt reuses the chat template's prefix from the cache.
  std::vector<Tensor> embeds = {input.prompt_embeds,
                                guidance.enabled() ? input.negative_prompt_embeds : Tensor()};
  std::vector<std::string> prompts;
  std::vector<size_t> slots;  // where each encoded prompt goes in `embeds`
  if (!embeds[0].defined()) {
    prompts.push_back(input.prompt);
    slots.push_back(0);
  }
  if (guidance.enabled() && !embeds[1].defined()) {
    prompts.push_back(input.negative_prompt);
    slots.push_back(1);
  }
  if (!prompts.empty()) {
    // Several ranks: the leader encodes; the others get each prompt's token count, then its rows.
    std::vector<Tensor> encoded;
    if (leader) encoded = encode_prompts(prompts, input.max_sequence_length);
    if (parallel) {
      Tensor lengths = Tensor::zeros({int64_t(prompts.size())});
      for (size_t i = 0; leader && i < encoded.size(); ++i)
        lengths.data<float>()[i] = float(encoded[i].size(0));
      parallel->world->broadcast(lengths, 0);
      for (size_t i = 0; i < prompts.size(); ++i) {
        if (!leader)
          encoded.push_back(Tensor::zeros({int64_t(lengths.data<float>()[i]), caption_dim()}));
        encoded[i] = encoded[i].to(DType::F32).contiguous();
        parallel->world->broadcast(encoded[i], 0);
      }
    }
    for (size_t i = 0; i < slots.size(); ++i) embeds[slots[i]] = std::move(encoded[i]);
  }
  encode_stage.finish();

  const Shape shape = latent_shape(input.height, input.width);
  Tensor latents;
  if (input.initial_latents.defined()) {
    check(input.initial_latents.shape() == shape,
          "--latents has shape {} but this request needs {}",
          shape_string(input.initial_latents.shape()), shape_string(shape));
    latents = input.initial_latents.to(DType::F32).contiguous().clone();
  } else {
    latents = randn(shape, input.seed);
  }
  auto scheduler = make_image_scheduler(scheduler_.class_name, scheduler_.config, input.flow_shift,
                                        zimage_default_sigmas(int(input.num_inference_steps)),
                                        shape[2], shape[3]);

  attention::Layers attention =
      transformer_layers(attention_plan_, *transformer_, input.cuda ? Device::CUDA : Device::CPU);
  ZImageGenerationOutput output;
  const auto predict = [&](const DenoiseStep& step, const Tensor& sample) {
    // The normalised time the model sees, in float32 as torch computes it: 0 at the start.
    const float t_norm = (1000.0f - step.timestep) / 1000.0f;
    const double scale = guidance.scale_at(t_norm);
    const bool apply_cfg = guidance.enabled() && scale > 0;
    const Tensor item_latents = sample.select(0, 0).unsqueeze(1).contiguous();  // [C, 1, h, w]
    std::vector<dit::ZImageItem> batch = {{item_latents, embeds[0], t_norm}};
    if (apply_cfg) batch.push_back({item_latents, embeds[1], t_norm});
    const std::vector<Tensor> predictions = transformer_->forward(
        batch, {step.index, step.steps}, &attention, parallel ? parallel->sequence.get() : nullptr);
    const Tensor prediction =
        apply_cfg ? guided_prediction(predictions[0], predictions[1], guidance.policy(scale))
                  : predictions[0];
    return negated_step_input(prediction);
  };
  latents = run_denoise_loop(
      *scheduler, latents, predict,
      {.latents_after_step = keep_step_latents ? &output.latents_after_step : nullptr});

  if (!leader) return output;  // the leader decodes and writes
  const Tensor z = vae_->denormalize(latents);
  Tensor image;
  if (input.vae_tiles) {
    Progress decode("decode", 1, "tile");
    image = vae::decode_tiled(*vae_, z, *input.vae_tiles, [&](int done, int total) {
      decode.update(done, total);
      stop_if_requested();  // between tiles of the decode
    });
    decode.finish();
  } else {
    Progress decode("decode", 1);
    image = vae_->decode(z);
    decode.finish();
  }
  output.frames = decoded_images_to_frames(image);
  return output;
}

ZImageGenerationInput zimage_input_from_request(const Request& request,
                                                const ZImagePipeline& pipeline) {
  check(!request.gpu_fp8_products,
        "--gpu-matmul-precision fp8: FP8 products are built for Wan's transformer so far; Z-Image "
        "runs its products in bf16, so leave it at bf16");
  ZImageGenerationInput input;
  input.prompt = request.prompt;
  input.negative_prompt = request.negative_prompt;
  input.height = request.height;
  input.width = request.width;
  input.num_inference_steps = request.num_inference_steps;
  input.max_sequence_length = request.max_sequence_length;
  input.guidance.scale = request.guidance_scale;
  input.guidance.truncation = request.cfg_truncation;
  input.guidance.normalization = request.cfg_normalization;
  input.flow_shift = request.flow_shift;
  input.seed = request.seed;
  if (request.latents) input.initial_latents = read_tensor_file(*request.latents);
  input.cuda = request.device == "cuda";
  input.parallel = request.parallel.get();
  if (request.vae_tiling) {
    const int64_t factor = pipeline.vae_spatial_factor();
    input.vae_tiles =
        vae::TileLayout{request.vae_tile_size / factor, request.vae_tile_overlap / factor};
  }
  const int64_t width = pipeline.caption_dim();
  if (request.prompt_embeds)
    input.prompt_embeds = read_prompt_embeddings(*request.prompt_embeds, width, "--prompt-embeds");
  if (request.negative_prompt_embeds) {
    input.negative_prompt_embeds =
        read_prompt_embeddings(*request.negative_prompt_embeds, width, "--negative-prompt-embeds");
    if (!input.guidance.enabled())
      spdlog::warn("--negative-prompt-embeds: unused, guidance is off (--guidance-scale {})",
                   request.guidance_scale);
  }
  return input;
}

PipelineRunner load_zimage_pipeline(const ModelIndex& index, const AttentionPlan& plan) {
  auto pipeline = load_pipeline<ZImagePipeline>(index, plan);
  spdlog::info("text encoder: {} paged attention", pipeline->text_encoder_backend());
  // Embeddings encoded ahead wait here for their run: a prompt's is used once, a negative
  // prompt's by every run that asks for it.
  using Key = std::tuple<std::string, int64_t, bool>;  // prompt, max_sequence_length, on the GPU
  struct Ahead {
    std::map<Key, Tensor> prompts, negatives;
  };
  auto ahead = std::make_shared<Ahead>();
  PipelineRunner runner;
  runner.run = [pipeline, ahead](const Request& request) {
    ZImageGenerationInput input = zimage_input_from_request(request, *pipeline);
    // Several ranks: generate() encodes on the leader and broadcasts; nothing is cached here.
    if (input.parallel) return pipeline->generate(input).frames;
    const int64_t length = input.max_sequence_length;
    if (auto found = ahead->prompts.find({input.prompt, length, input.cuda});
        found != ahead->prompts.end() && !input.prompt_embeds.defined()) {
      input.prompt_embeds = found->second;
      ahead->prompts.erase(found);  // the memory goes back
    }
    if (auto found = ahead->negatives.find({input.negative_prompt, length, input.cuda});
        found != ahead->negatives.end() && input.guidance.enabled() &&
        !input.negative_prompt_embeds.defined())
      input.negative_prompt_embeds = found->second;
    return pipeline->generate(input).frames;
  };
  runner.encode_ahead = [pipeline, ahead](const std::vector<Request>& requests) {
    if (!requests.empty() && requests.front().parallel) return;  // the leader encodes per run
    // Per device and max_sequence_length, the prompts to encode and whether each is a negative
    // prompt. The encoder runs where the requests will (a GPU run encodes on the GPU).
    std::map<std::pair<bool, int64_t>, std::vector<std::pair<std::string, bool>>> todo;
    for (const Request& request : requests) {
      const bool cuda = request.device == "cuda";
      auto& list = todo[{cuda, request.max_sequence_length}];
      if (!request.prompt_embeds) list.emplace_back(request.prompt, false);
      const std::pair<std::string, bool> negative{request.negative_prompt, true};
      if (request.guidance_scale > 0 && !request.negative_prompt_embeds &&
          !ahead->negatives.contains(
              {request.negative_prompt, request.max_sequence_length, cuda}) &&
          std::find(list.begin(), list.end(), negative) == list.end())
        list.push_back(negative);
    }
    for (const auto& [where, list] : todo) {
      if (list.empty()) continue;
      const auto [cuda, length] = where;
      std::vector<std::string> prompts;
      for (const auto& item : list) prompts.push_back(item.first);
      pipeline->place(cuda);
      const auto start = std::chrono::steady_clock::now();
      text_encoders::PrefixCacheReport report;
      const std::vector<Tensor> embeds = pipeline->encode_prompts(prompts, length, &report);
      for (size_t i = 0; i < list.size(); ++i)
        (list[i].second ? ahead->negatives : ahead->prompts)[{list[i].first, length, cuda}] =
            embeds[i];
      spdlog::info(
          "encode: {} prompt(s) through one prefix cache on the {}, {} hit(s) ({} of {} prompt "
          "tokens reused), {:.2f} s",
          prompts.size(), cuda ? "GPU" : "CPU", report.prompts_hit, report.hit_tokens,
          report.prompt_tokens,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  };
  return runner;
}

}  // namespace mmgen
