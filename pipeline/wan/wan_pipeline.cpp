#include "pipeline/wan/wan_pipeline.h"

#ifdef MMGEN_HAVE_CUDA
#include "attention/backends/video_sparse_attn/vsa_gate.h"
#include "attention/sparse_self_attention_cuda.h"
#include "core/cuda/device_memory.h"
#endif

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/backends/descriptor.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/npy.h"
#include "core/random.h"
#include "core/safetensors.h"
#include "core/system_memory.h"
#include "models/text_encoders/prompt_embedding.h"
#include "models/tokenizers/prompt_clean.h"
#include "pipeline/component_models.h"
#include "pipeline/component_weights.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/memory_estimate.h"
#include "pipeline/progress.h"
#include "pipeline/prompt_encoding.h"
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

// The validated config of `backend` from the plan; defaults when the plan has none for it (the
// dense cross-attention backend, which no --attention-backend-config speaks to).
nlohmann::json backend_config(const AttentionPlan& plan, const std::string& backend) {
  auto it = plan.backend_configs.find(backend);
  if (it != plan.backend_configs.end()) return it->second;
  return attention::validate_backend_config(nlohmann::json::object(), backend);
}

// The checkpoint weights a self-attention backend uses beyond a plain Wan block, by the name
// fragment they carry (any module path inside the block: blocks.3.to_gate_compress.weight,
// blocks.3.attn1.proj_l.weight, ...), as its descriptor lists them.
std::vector<std::string> extra_weight_names(const std::string& backend) {
  const attention::BackendDescriptor* descriptor = attention::find_dit_descriptor(backend);
  if (!descriptor) return {};
  return {descriptor->extra_weights.begin(), descriptor->extra_weights.end()};
}

// Extra weights of block `layer`: keyed by the fragment and what follows it
// ("to_gate_compress.weight"), float32.
attention::LayerWeights layer_weights(const WeightStore& store,
                                      const std::vector<std::string>& names,
                                      const std::vector<std::string>& fragments, int64_t layer) {
  attention::LayerWeights weights;
  const std::string prefix = "blocks." + std::to_string(layer) + ".";
  for (const auto& name : names) {
    if (name.rfind(prefix, 0) != 0) continue;
    for (const auto& fragment : fragments) {
      const size_t at = name.find(fragment, prefix.size());
      if (at == std::string::npos || (at != prefix.size() && name[at - 1] != '.')) continue;
      weights[name.substr(at)] = store.get_f32(name);
    }
  }
  return weights;
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

dit::WanAttention WanPipeline::build_attention() const {
  dit::WanAttention attention;
  auto it = attention_plan_.components.find("transformer");
  if (it == attention_plan_.components.end() || !it->second.has_attention())
    return attention;  // no plan for the transformer: dense reference
  std::string self_backend, cross_backend;
  for (const auto& layer : it->second.layers) {
    if (layer.kind == attention::LayerKind::SelfAttention) self_backend = layer.backend;
    if (layer.kind == attention::LayerKind::CrossAttention) cross_backend = layer.backend;
  }
  if (self_backend.empty()) self_backend = it->second.primary().backend;
  if (cross_backend.empty()) cross_backend = self_backend;
  const nlohmann::json self_config = backend_config(attention_plan_, self_backend);
  const nlohmann::json cross_config = backend_config(attention_plan_, cross_backend);

  const std::vector<std::string> fragments = extra_weight_names(self_backend);
  const std::vector<std::string> names =
      fragments.empty() ? std::vector<std::string>() : transformer_->weights().names();
  const int64_t layers = transformer_->config().num_layers;
  int64_t with_weights = 0;
  attention.layers.resize(size_t(layers));
  for (int64_t i = 0; i < layers; ++i) {
    dit::WanLayerAttention& layer = attention.layers[size_t(i)];
    layer.self_attention =
        attention::make_dit_backend(self_backend, self_config, attention_plan_.resources);
    layer.cross_attention =
        attention::make_dit_backend(cross_backend, cross_config, attention_plan_.resources);
    layer.self_weights = layer_weights(transformer_->weights(), names, fragments, i);
    with_weights += !layer.self_weights.empty();
  }
  if (!fragments.empty())
    spdlog::info("attention: {} found its extra weights ({}*) in {} of {} transformer blocks",
                 self_backend, fragments.front(), with_weights, layers);
  return attention;
}

namespace {

#ifdef MMGEN_HAVE_CUDA
// --device cuda: what the GPU transformer runs for attention, as the plan says. Dense layers run
// the model's own kernels: `fa` the FlashAttention kernel, `torch_sdpa` the reference kernel.
// Self-attention may instead run a GPU sparse backend (one whose descriptor has a CUDA factory).
// The selector planned against the GPU's kernels; the check only guards against a plan made for
// another machine.
attention::GpuAttention gpu_attention(const AttentionPlan& plan) {
  attention::GpuAttention result;
  auto it = plan.components.find("transformer");
  if (it == plan.components.end()) return result;
  // What the GPU runs, from the descriptors: dense backends with a CUDA kernel row run in the
  // model's own attention; the others need a GPU factory (self-attention only).
  // A dense backend with a GPU factory (sage_attn's INT8 kernel) takes the self-attention; its
  // cross-attention layers (Wan's 512 text keys) run the dense FlashAttention kernel, and say so.
  std::vector<std::string> dense, sparse_ok, dense_self_only;
  for (const attention::BackendDescriptor* backend : attention::dit_backends()) {
    bool cuda_row = false;
    for (const auto& kernel : backend->kernels)
      cuda_row |= kernel.platform == attention::Platform::Cuda;
    if (backend->cuda) {
      sparse_ok.emplace_back(backend->info.name);
      if (!backend->info.sparse) dense_self_only.emplace_back(backend->info.name);
    } else if (cuda_row && !backend->info.sparse) {
      dense.emplace_back(backend->info.name);
    }
  }
  const auto contains = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  using Kernel = attention::DenseKernel;
  std::string sparse;
  bool said = false;
  for (const auto& layer : it->second.layers) {
    const bool self = layer.kind == attention::LayerKind::SelfAttention;
    if (!self && contains(dense_self_only, layer.backend)) {
      if (!said)
        spdlog::info("--device cuda: {} runs the self-attention; cross-attention runs fa",
                     layer.backend);
      said = true;
      result.dense.cross = Kernel::Flash;
      continue;
    }
    check(contains(dense, layer.backend) || (self && contains(sparse_ok, layer.backend)),
          "--device cuda: the transformer's {} attention backend runs on the CPU only so far; use "
          "{} or {} (self-attention) with --device cuda, or --device cpu",
          layer.backend, fmt::join(dense, ", "), fmt::join(sparse_ok, ", "));
    if (self && contains(sparse_ok, layer.backend)) {
      sparse = layer.backend;
      continue;
    }
    (self ? result.dense.self : result.dense.cross) = attention::dense_kernel_for(layer.backend);
  }
  if (!sparse.empty())
    result.sparse =
        cuda::make_sparse_self_attention_cuda(sparse, backend_config(plan, sparse), plan.resources);
  return result;
}

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

// A GPU run's attention: the plan's kernels, and for a backend that reads the layers' extra
// checkpoint weights (VSA's to_gate_compress, SLA's proj_l) those of every block on the GPU (the
// gate's weight in bf16, as the model's other products take it; the rest as stored).
dit::WanAttention gpu_wan_attention(const AttentionPlan& plan, const dit::WanTransformer& model) {
  dit::WanAttention attention;
  attention.gpu = gpu_attention(plan);
  if (!attention.gpu.sparse ||
      !attention::sparse_backend_wants_layer_weights(*attention.gpu.sparse))
    return attention;
  const std::vector<std::string> fragments =
      extra_weight_names(std::string(attention.gpu.sparse->name()));
  const std::vector<std::string> names = model.weights().names();
  attention.layers.resize(size_t(model.config().num_layers));
  for (size_t i = 0; i < attention.layers.size(); ++i) {
    attention::LayerWeights& weights = attention.layers[i].self_weights;
    weights = layer_weights(model.weights(), names, fragments, int64_t(i));
    for (auto& [key, tensor] : weights)
      tensor = key == attention::kVsaGateWeightKey ? tensor.to(DType::BF16).to(Device::CUDA)
                                                   : tensor.to(Device::CUDA);
  }
  return attention;
}
#endif

}  // namespace

WanGenerationOutput WanPipeline::generate(const WanGenerationInput& input,
                                          bool keep_step_latents) const {
  const bool guided = input.guidance_scale > 1.0;
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

#ifdef MMGEN_HAVE_CUDA
  dit::WanAttention attention =
      input.cuda ? gpu_wan_attention(attention_plan_, *transformer_) : build_attention();
#else
  dit::WanAttention attention = build_attention();
#endif
  if (!input.cuda && transformer_->device() != Device::CPU) transformer_->set_device(Device::CPU);
  // Sequence parallel: this rank's rows of the latent tokens (the ranks of its guidance branch
  // share the sequence).
  std::optional<dit::WanSequenceParallel> sequence;
  if (parallel && parallel->sequence) {
    const auto [pt, ph, pw] = transformer_->config().patch_size;
    const int64_t tokens = (shape[2] / pt) * (shape[3] / ph) * (shape[4] / pw);
    sequence = dit::WanSequenceParallel{
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
    return classifier_free_guidance(cond, uncond, float(input.guidance_scale));
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
  const bool dense = input.cuda ? attention.dense_on_gpu() : attention.dense_on_cpu();
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
    return classifier_free_guidance(both.select(0, 0).unsqueeze(0).contiguous(),
                                    both.select(0, 1).unsqueeze(0).contiguous(),
                                    float(input.guidance_scale));
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
      prediction = classifier_free_guidance(prediction, unconditional, float(input.guidance_scale));
    }
    return prediction;
  };
  latents = run_denoise_loop(
      *scheduler, latents, predict_step,
      {.latents_after_step = keep_step_latents ? &output.latents_after_step : nullptr});
  const attention::AttentionStats& stats = attention.self_attention_stats;
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
