#include "pipeline/wan/wan_pipeline.h"

#ifdef MMGEN_HAVE_CUDA
#include "core/cuda/device_memory.h"
#endif

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/npy.h"
#include "core/random.h"
#include "core/safetensors.h"
#include "core/system_memory.h"
#include "models/text_encoders/prompt_embedding.h"
#include "pipeline/attention_layers.h"
#include "pipeline/component_models.h"
#include "pipeline/component_weights.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/guidance.h"
#include "pipeline/memory_estimate.h"
#include "pipeline/progress.h"
#include "pipeline/prompt_encoding.h"
#include "pipeline/schedulers/scheduler.h"
#include "text/prompt_clean.h"

namespace mmgen {

namespace {

// Two [1, ...] tensors of one shape as one [2, ...] batch (float32, on the host).
Tensor stack_pair(const Tensor& first, const Tensor& second) {
  Shape shape = first.shape();
  shape[0] = 2;
  Tensor both = Tensor::empty(shape);
  both.select(0, 0).copy_from(first.to(Device::CPU).to(DType::F32).select(0, 0));
  both.select(0, 1).copy_from(second.to(Device::CPU).to(DType::F32).select(0, 0));
  return both;
}

// VAE output [1, 3, F, H, W] in [-1, 1] → frames [F, H, W, 3] in [0, 1] (diffusers' postprocess).
Tensor video_to_frames(const Tensor& video) {
  Tensor frames = video.select(0, 0).permute({1, 2, 3, 0}).contiguous().clone();
  float* p = frames.data<float>();
  for (int64_t i = 0; i < frames.numel(); ++i) p[i] = std::clamp(p[i] / 2.0f + 0.5f, 0.0f, 1.0f);
  return frames;
}

}  // namespace

WanPipeline::WanPipeline(const ModelIndex& index)
    : WanPipeline(index, plan_attention(index, Request{})) {}

WanPipeline::WanPipeline(const ModelIndex& index, AttentionPlan plan)
    : index_(index), attention_plan_(std::move(plan)) {
  // The classes model_index.json names, refused before any weights are mapped (the CLI checked
  // already; a library caller may not have).
  check_components(find_pipeline("WanPipeline", index.root / "model_index.json"), index);
  tokenizer_ = tokenizers::Tokenizer::load(index.component("tokenizer").path);
  text_encoder_ =
      load_component<text_encoders::UMT5Encoder, text_encoders::T5Config>(index, "text_encoder");
  transformer_ =
      load_component<dit::WanTransformer, dit::WanTransformerConfig>(index, "transformer");
  vae_ = load_component<vae::WanVaeDecoder, vae::WanVaeConfig>(index, "vae");
  scheduler_ = SchedulerSpec::load(index);
  // The text encoder runs through the paged backend the plan chose for it (encoder-only layers).
  if (const std::string text = planned_backend(attention_plan_, "text_encoder"); !text.empty())
    text_encoder_->set_attention_backend(text);
  plan_vae_attention(*vae_, attention_plan_);
}

Tensor WanPipeline::encode_prompt(const std::string& prompt, int64_t max_length, bool cuda) const {
  return encode_prompts({prompt}, max_length, cuda)[0];
}

std::vector<Tensor> WanPipeline::encode_prompts(const std::vector<std::string>& prompts,
                                                int64_t max_length, bool cuda) const {
  if (prompts.empty()) return {};
  const int64_t count = int64_t(prompts.size());
  std::vector<int64_t> ids, mask;
  for (const std::string& prompt : prompts) {
    const tokenizers::Encoding encoding =
        tokenizer_->encode_padded(tokenizers::clean_prompt(prompt), size_t(max_length));
    ids.insert(ids.end(), encoding.ids.begin(), encoding.ids.end());
    mask.insert(mask.end(), encoding.attention_mask.begin(), encoding.attention_mask.end());
  }
  const int64_t length = int64_t(ids.size()) / count;
  const Tensor id_batch = Tensor::from_vector({count, length}, ids);
  const Tensor mask_batch = Tensor::from_vector({count, length}, mask);
  Tensor embeds;
  if (!cuda) {
    if (text_encoder_->device() != Device::CPU) text_encoder_->set_device(Device::CPU);
    embeds = text_encoders::encode_wan_prompt_embeddings(*text_encoder_, id_batch, mask_batch);
  } else {
#ifdef MMGEN_HAVE_CUDA
    if (text_encoder_->device() != Device::CUDA) {  // moved on first use: precomputed
                                                    // embeddings need no text encoder
      text_encoder_->set_device(Device::CUDA, DType::BF16,
                                gpu_text_backend(attention_plan_, text_encoder_->config().d_kv));
      spdlog::info("text encoder on the GPU: {} paged attention",
                   text_encoder_->attention_backend());
    }
    embeds = text_encoders::zero_fill_after_length(text_encoder_->forward(id_batch, mask_batch),
                                                   mask_batch);
#else
    fail(
        "--device cuda: this build has no CUDA support; rebuild with -DMMGEN_CUDA=ON or use "
        "--device cpu");
#endif
  }
  if (count == 1) return {embeds};
  std::vector<Tensor> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(embeds.slice(0, i, i + 1).contiguous());
  return out;
}

Shape WanPipeline::latent_shape(int64_t height, int64_t width, int64_t num_frames) const {
  const auto& config = vae_->config();
  return {1, config.z_dim, (num_frames - 1) / config.scale_factor_temporal + 1,
          height / config.scale_factor_spatial, width / config.scale_factor_spatial};
}

namespace {

#ifdef MMGEN_HAVE_CUDA
// Whether the GPU has room for the guidance branches as one batch of two: a second batch
// element's activations in a forward are about tokens · (16 · dim + 2 · ffn_dim) bytes (the
// float32 residual stream, its bf16 norms, q/k/v, the attention output and projection, the
// feed-forward's hidden layer; 1.3 GiB at Wan2.1-1.3B's 480x832x81, whose batch-of-one forward
// measured 1.56 GiB beside its weights), taken with a quarter more for the rest.
bool gpu_room_for_batched_guidance(const dit::WanTransformerConfig& config, int64_t tokens) {
  const double needed =
      1.25 * double(tokens) * double(16 * config.inner_dim() + 2 * config.ffn_dim);
  const size_t available = cuda::CachingAllocator::instance().available_bytes();
  if (double(available) >= needed) return true;
  spdlog::info(
      "guidance: the two branches run one after the other ({} of GPU memory free; one batch of "
      "two needs about {} more)",
      format_bytes(available), format_bytes(uint64_t(needed)));
  return false;
}

#endif

}  // namespace

WanGenerationOutput WanPipeline::generate(const WanGenerationInput& input,
                                          bool keep_step_latents) const {
  const bool guided = input.guidance_scale > 1.0;
  const GuidancePolicy cfg{.scale = input.guidance_scale};  // WanPipeline's u + s·(c − u)
  const ParallelRun* parallel = input.parallel;
  const bool leader = !parallel || parallel->leader();
  const bool cfg_parallel = guided && parallel && parallel->layout.cfg_degree == 2;
  // --device cuda: checked and the weights uploaded before any other work. The attention state
  // (CPU backends, or the GPU's kernels and sparse backend) is built fresh per run below.
  // The weights go up once per pipeline (again only for another product precision); with stage
  // offload, after the prompts are encoded and the text encoder has left the GPU.
  auto upload_transformer = [&] {
    if (transformer_->device() != Device::CUDA ||
        transformer_->fp8_products() != input.fp8_products ||
        transformer_->streams_blocks() != input.stream_blocks) {
      Progress upload("upload", 1);
      transformer_->set_device(Device::CUDA, DType::BF16, input.fp8_products, input.stream_blocks);
      upload.finish();
      if (input.stream_blocks)
        spdlog::info(
            "gpu offload: the transformer's blocks wait in page-locked host memory, two of them "
            "on the GPU at a time ({} resident)",
            format_bytes(transformer_->resident_weight_bytes()));
    }
  };
  if (input.cuda) {
#ifdef MMGEN_HAVE_CUDA
    if (!input.stage_offload) upload_transformer();
    // Every rank decodes its share of the rows (or with --vae-tiling of the tiles).
    if (vae_->device() != Device::CUDA) vae_->set_device(Device::CUDA);
#else
    fail(
        "--device cuda: this build has no CUDA support; rebuild with -DMMGEN_CUDA=ON or use "
        "--device cpu");
#endif
  }
  Progress encode_stage("encode", 1);
  // Precomputed embeddings (--prompt-embeds, from `mmgen encode`) skip the text encoder.
  // The prompt and the negative prompt, when both need the text encoder, go in one batch.
  Tensor prompt_embeds = input.prompt_embeds, negative_embeds = input.negative_prompt_embeds;
  if (!guided) negative_embeds = Tensor();
  std::vector<std::string> to_encode;
  if (!prompt_embeds.defined()) to_encode.push_back(input.prompt);
  if (guided && !negative_embeds.defined()) to_encode.push_back(input.negative_prompt);
  if (!to_encode.empty()) {
    // Several ranks: the leader encodes, the others receive what it encoded.
    std::vector<Tensor> encoded;
    if (leader) encoded = encode_prompts(to_encode, input.max_sequence_length, input.cuda);
    if (parallel) {
      const Shape shape = {1, input.max_sequence_length, text_embedding_dim()};
      for (size_t i = 0; i < to_encode.size(); ++i) {
        if (leader)
          check(encoded[i].shape() == shape && encoded[i].dtype() == DType::F32,
                "parallel run: the text encoder gave {}, {} expected",
                shape_string(encoded[i].shape()), shape_string(shape));
        else
          encoded.push_back(Tensor::zeros(shape));
        encoded[i] = encoded[i].contiguous();
        parallel->world->broadcast(encoded[i], 0);
      }
    }
    if (!prompt_embeds.defined()) prompt_embeds = encoded.front();
    if (guided && !negative_embeds.defined()) negative_embeds = encoded.back();
  }
  encode_stage.finish();
  if (input.cuda && input.stage_offload) {
    if (text_encoder_->device() != Device::CPU) {
      text_encoder_->set_device(Device::CPU);
      spdlog::info("stage offload: the text encoder left the GPU");
    }
    upload_transformer();
  }

  auto scheduler =
      schedulers::make_scheduler(scheduler_.class_name, scheduler_.config, input.flow_shift);
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

  attention::Layers attention =
      transformer_layers(attention_plan_, *transformer_, input.cuda ? Device::CUDA : Device::CPU);
  if (!input.cuda && transformer_->device() != Device::CPU) transformer_->set_device(Device::CPU);
  // Sequence parallel: this rank's rows of the latent tokens (the ranks of its guidance branch
  // share the sequence).
  std::optional<attention::SequenceParallel> sequence;
  if (parallel && parallel->sequence) {
    const auto [pt, ph, pw] = transformer_->config().patch_size;
    const int64_t tokens = (shape[2] / pt) * (shape[3] / ph) * (shape[4] / pw);
    sequence = attention::SequenceParallel{
        parallel->sequence.get(),
        dist::SequenceShards::balanced(tokens, parallel->sequence->size())};
  }
  auto step_timestep = [&](int step) { return scheduler->timesteps()[size_t(step)]; };
  auto predict = [&](const Tensor& sample, const Tensor& embeds, int step, int steps, int call) {
    return transformer_->forward(sample, step_timestep(step), embeds, {step, steps, call},
                                 &attention, sequence ? &*sequence : nullptr);
  };
  // CFG parallel: this rank's branch only; one exchange of the two predictions per step.
  auto predict_cfg_parallel = [&](const Tensor& sample, int step, int steps) {
    const int branch = parallel->branch();
    const Tensor mine =
        predict(sample, branch == 0 ? prompt_embeds : negative_embeds, step, steps, branch)
            .contiguous();
    const Tensor cond = Tensor::empty(mine.shape()), uncond = Tensor::empty(mine.shape());
    parallel->guidance->all_gather(mine, {cond, uncond});
    return guided_prediction(cond, uncond, cfg);
  };
  // With dense attention the two guidance branches run as one batch of two.
  // - On the CPU each weight is packed once per step instead of twice and the products are twice
  //   as tall. Every op of the forward treats rows and batch elements alone (the CPU product's
  //   sums do not depend on the rows beside them), so the predictions are the two separate
  //   forwards' to the bit.
  // - On the GPU one launch sequence serves both branches: the attention kernel's grid is twice
  //   as long (its last partial wave costs half as much) and the host work between forwards
  //   happens once per step. The products may round differently from two separate forwards
  //   (cuBLASLt picks its algorithm by shape); each branch still attends only to itself.
  //   It runs where the GPU has room for the second branch's activations.
  const bool dense = attention.batch_elements_alone();
  bool batch_guidance = guided && !parallel && dense &&
                        prompt_embeds.shape() == negative_embeds.shape() &&
                        prompt_embeds.size(0) == 1;
#ifdef MMGEN_HAVE_CUDA
  if (batch_guidance && input.cuda) {
    const auto [pt, ph, pw] = transformer_->config().patch_size;
    batch_guidance = gpu_room_for_batched_guidance(
        transformer_->config(), (shape[2] / pt) * (shape[3] / ph) * (shape[4] / pw));
  }
#endif
  const Tensor both_embeds = batch_guidance ? stack_pair(prompt_embeds, negative_embeds) : Tensor();
  auto predict_guided = [&](const Tensor& sample, int step, int steps) {
    const Tensor both = transformer_->forward(stack_pair(sample, sample), step_timestep(step),
                                              both_embeds, {step, steps, 0}, &attention);
    return guided_prediction(both.select(0, 0).unsqueeze(0).contiguous(),
                             both.select(0, 1).unsqueeze(0).contiguous(), cfg);
  };
  WanGenerationOutput output;
  const int steps = scheduler->num_inference_steps();
  const auto predict_step = [&](const DenoiseStep& step, const Tensor& sample) {
    const int i = step.index;
    Tensor prediction = cfg_parallel     ? predict_cfg_parallel(sample, i, steps)
                        : batch_guidance ? predict_guided(sample, i, steps)
                                         : predict(sample, prompt_embeds, i, steps, 0);
    if (guided && !batch_guidance && !cfg_parallel) {
      const Tensor unconditional = predict(sample, negative_embeds, i, steps, 1);
      prediction = guided_prediction(prediction, unconditional, cfg);
    }
    return prediction;
  };
  latents = run_denoise_loop(
      *scheduler, latents, predict_step,
      {.latents_after_step = keep_step_latents ? &output.latents_after_step : nullptr});
  const attention::AttentionStats stats = attention.stats(dit::kWanSelfStack);
  const std::string measured =
      stats.total_blocks > 0
          ? fmt::format(" visited {:.1f}% of key blocks", 100.0 * stats.density())
          : std::string(": key blocks not counted on this device");
  if (const auto split = attention_plan_.step_split(steps))
    spdlog::info("attention: transformer self-attention{} ({}: {} sparse and {} dense step(s))",
                 measured, split->backend, split->sparse, split->dense);
  else if (stats.total_blocks > 0 && stats.visited_blocks < stats.total_blocks)
    spdlog::info("attention: transformer self-attention{}", measured);

  if (input.cuda && input.stage_offload) {
    transformer_->set_device(Device::CPU);
    spdlog::info("stage offload: the transformer left the GPU");
  }
  // The rows (or --vae-tiling's tiles) are shared out among the ranks; the leader assembles
  // and writes the video.
  Progress decode("decode", int(shape[2]), "latent frame");
  const Tensor z = vae_->denormalize(latents);
  auto report = [&](int done, int total) {
    decode.update(done, total);
    stop_if_requested();  // between latent frames (or tiles) of the decode
  };
  if (!input.cuda && vae_->device() != Device::CPU) vae_->set_device(Device::CPU);
  dist::Communicator* ranks = parallel ? parallel->world.get() : nullptr;
  Tensor video;
  if (input.vae_tiles)
    video = vae::decode_tiled(*vae_, z, *input.vae_tiles, report, ranks);
  else if (ranks && ranks->size() > 1)
    video = vae::decode_in_bands(*vae_, z, *ranks, report);
  else
    video = vae_->decode(z, report);
  decode.finish();
  if (!leader) return output;
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
  input.cuda = request.device == "cuda";
  input.fp8_products = request.gpu_fp8_products && input.cuda;
  if (input.cuda) {
    // The same figure as the memory plan's (pipeline/wan/wan_memory.cpp): a GGUF file's matrices
    // stay blocks on the GPU, so they count as stored.
    const GpuOffload offload = choose_gpu_offload(
        request.gpu_offload, request.max_gpu_memory, true,
        dit::WanTransformer::gpu_weight_bytes(pipeline.transformer_config(), input.fp8_products,
                                              false, &pipeline.transformer_weights()));
    input.stage_offload = offload.stages;
    input.stream_blocks = offload.blocks;
  }
  input.parallel = request.parallel.get();
  if (request.vae_tiling) {
    const int64_t factor = pipeline.vae_spatial_factor();
    input.vae_tiles =
        vae::TileLayout{request.vae_tile_size / factor, request.vae_tile_overlap / factor};
  }
  if (request.latents) input.initial_latents = read_tensor_file(*request.latents);
  const int64_t text_dim = pipeline.text_embedding_dim();
  // The transformer takes [1, tokens, text_dim].
  if (request.prompt_embeds)
    input.prompt_embeds =
        read_prompt_embeddings(*request.prompt_embeds, text_dim, "--prompt-embeds").unsqueeze(0);
  if (request.negative_prompt_embeds)
    input.negative_prompt_embeds = read_prompt_embeddings(*request.negative_prompt_embeds, text_dim,
                                                          "--negative-prompt-embeds")
                                       .unsqueeze(0);
  return input;
}

PipelineRunner load_wan_pipeline(const ModelIndex& index, const AttentionPlan& plan) {
  auto pipeline = load_pipeline<WanPipeline>(index, plan);
  // Embeddings encoded ahead (a batch's prompts, in one pass) wait here for their run;
  // a batch's shared negative prompt is encoded once and kept (per device).
  using Key = std::tuple<std::string, int64_t, bool>;  // prompt, max_sequence_length, on the GPU
  auto ahead = std::make_shared<std::map<Key, Tensor>>();
  auto negatives = std::make_shared<std::map<Key, Tensor>>();
  PipelineRunner runner;
  runner.run = [pipeline, ahead, negatives](const Request& request) {
    WanGenerationInput input = wan_input_from_request(request, *pipeline);
    // Several ranks: generate() encodes on the leader and broadcasts; nothing is cached here.
    if (input.parallel) return pipeline->generate(input).frames;
    if (!input.prompt_embeds.defined()) {
      auto found = ahead->find({input.prompt, input.max_sequence_length, input.cuda});
      if (found != ahead->end()) {
        input.prompt_embeds = found->second;
        ahead->erase(found);  // each is used once; the memory goes back
      }
    }
    if (input.guidance_scale > 1.0 && !input.negative_prompt_embeds.defined()) {
      Tensor& cached = (*negatives)[{input.negative_prompt, input.max_sequence_length, input.cuda}];
      if (!cached.defined())
        cached =
            pipeline->encode_prompt(input.negative_prompt, input.max_sequence_length, input.cuda);
      input.negative_prompt_embeds = cached;
    }
    return pipeline->generate(input).frames;
  };
  runner.encode_ahead = [pipeline, ahead](const std::vector<Request>& requests) {
    if (!requests.empty() && requests.front().parallel) return;  // the leader encodes per run
    // One forward per (max length, device).
    std::map<std::pair<int64_t, bool>, std::vector<std::string>> groups;
    for (const Request& request : requests)
      if (!request.prompt_embeds)
        groups[{request.max_sequence_length, request.device == "cuda"}].push_back(request.prompt);
    for (const auto& [group, prompts] : groups) {
      const auto [length, cuda] = group;
      const auto start = std::chrono::steady_clock::now();
      const std::vector<Tensor> embeds = pipeline->encode_prompts(prompts, length, cuda);
      for (size_t i = 0; i < prompts.size(); ++i) (*ahead)[{prompts[i], length, cuda}] = embeds[i];
      spdlog::info("encode: {} prompt(s) in one batch of the text encoder, {:.2f} s",
                   prompts.size(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  };
  return runner;
}

Tensor run_wan_pipeline(const Request& request, const ModelIndex& index,
                        const AttentionPlan& plan) {
  return load_wan_pipeline(index, plan)(request);
}

}  // namespace mmgen
