// The whole Wan pipeline with sparse self-attention on the GPU: the wan-tiny model with its
// transformer swapped for a random one of head size 64 (the fixture's 24 is not compiled into the
// flash kernel), planned the way `mmgen generate` plans it (the selector against this build's CUDA
// kernels for --device cuda), against the same request on the CPU with the CPU backends:
// sliding_tile_attn, video_sparse_attn, vmoba_attn, sla_attn, sage_attn with a bf16 P·V (its
// cross-attention runs fa on the GPU), sage_sla_attn and sparse_video_gen_2_attn, 3 steps with
// guidance, video relative error < 1e-2; sage_attn's default FP8 P·V (the CPU's stays float32)
// within what its e4m3 probabilities and values cost each layer, < 3e-2. Both runs take the same
// prompt embeddings, so the difference is the transformer and the VAE.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/safetensors.h"
#include "cuda_test_support.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "pipeline/attention_plan.h"
#include "pipeline/model_index.h"
#include "pipeline/wan/wan_pipeline.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// wan-tiny's transformer config with head size 64, random weights, in `folder`.
void write_transformer(const fs::path& wan_tiny, const fs::path& folder) {
  json config = json::parse(read_text_file(wan_tiny / "transformer/config.json"));
  config["attention_head_dim"] = 64;
  fs::create_directories(folder);
  std::ofstream(folder / "config.json") << config.dump(2);
  write_safetensors(folder / "diffusion_pytorch_model.safetensors",
                    dit::random_checkpoint(dit::WanTransformerConfig::from_json(config)),
                    {{"format", "pt"}});
}

Tensor generate(const ModelIndex& index, const std::string& device, const std::string& backend,
                const json& backend_config, const std::string& label) {
  Request request;
  request.device = device;
  request.attention_backend = backend;
  request.attention_backend_config = backend_config;
  request.num_inference_steps = 3;
  const AttentionPlan plan = plan_attention(index, request);
  const auto& transformer = plan.components.at("transformer");
  expect(transformer.primary().backend == backend,
         fmt::format("{} --device {}: the plan runs the transformer with {} ({})", label, device,
                     transformer.primary().backend, backend));
  const WanPipeline pipeline(index, plan);
  WanGenerationInput input;
  input.prompt = "a red fox running through snow";
  input.negative_prompt = "blurry";
  input.height = 128;  // latents 3 x 16 x 24: a 3 x 8 x 12 patch grid
  input.width = 192;
  input.num_frames = 9;
  input.num_inference_steps = 3;
  input.guidance_scale = 5.0;
  input.max_sequence_length = 16;
  input.seed = 7;
  input.prompt_embeds = dit::random_tensor({1, 16, 32}, 0.0f, 0.5f, 21, DType::F32);
  input.negative_prompt_embeds = dit::random_tensor({1, 16, 32}, 0.0f, 0.5f, 22, DType::F32);
  input.cuda = device == "cuda";
  return pipeline.generate(input).frames;
}

}  // namespace

int main() try {
  const fs::path wan_tiny = fs::path(MMGEN_SOURCE_DIR) / "examples/models/wan-tiny";
  const fs::path folder = fs::temp_directory_path() / "mmgen_wan_tiny_d64_transformer";
  write_transformer(wan_tiny, folder);
  const ModelIndex index = load_model_index(wan_tiny, {{"transformer", folder}});

  // STA: 2x4x4 tiles (2x2x3 of them, partial on two axes), a window per step, layer and head.
  json mask = json::object();
  for (int step = 0; step < 3; ++step)
    for (int layer = 0; layer < 2; ++layer)
      for (int head = 0; head < 2; ++head)
        mask[fmt::format("{}_{}_{}", step, layer, head)] =
            head == 0 ? json{1, 1, 2} : json{2, 1, 1};
  const fs::path mask_file = fs::temp_directory_path() / "mmgen_wan_tiny_sta_mask.json";
  std::ofstream(mask_file) << mask.dump();
  const json sta = {{"mask_strategy_file_path", mask_file.string()},
                    {"skip_time_steps", 1},
                    {"tile_size", {2, 4, 4}}};
  const json vsa = {{"sparsity", 0.5}};  // 1x2x3 cubes, top 3
  // V-MoBA: layer 0 temporal (3 one-frame chunks), layer 1 spatial (4x4: 2x3 chunks), each query
  // keeping one more chunk than its own; the first step dense.
  const json moba = {{"temporal_chunk_size", 1},   {"spatial_chunk_size", {4, 4}},
                     {"moba_select_mode", "topk"}, {"temporal_topk", 2},
                     {"spatial_topk", 2},          {"first_full_step", 1}};
  // SLA: 288 tokens in 3 query blocks and 5 key blocks, 2 kept (no proj_l in this checkpoint:
  // the block-sparse branch alone, as on the CPU).
  const json sla = {{"topk", 0.4}};
  // SVG2: 12 query and 24 key clusters of the 288 tokens, the first step dense (its k-means warms
  // the centroids), the next two clustered from them. The two runs' activations differ by bf16
  // rounding, so a near-tie may put a token in another cluster: the bound stays the same.
  const json svg2 = {{"num_q_centroids", 12},        {"num_k_centroids", 24},
                     {"top_p_kmeans", 0.9},          {"first_times_fp", 0.34},
                     {"first_layers_fp", 0.0},       {"min_kc_ratio", 0.1},
                     {"zero_step_kmeans_init", true}};
  for (const auto& [backend, config] :
       {std::pair{std::string("sliding_tile_attn"), sta},
        std::pair{std::string("video_sparse_attn"), vsa},
        std::pair{std::string("vmoba_attn"), moba}, std::pair{std::string("sla_attn"), sla},
        std::pair{std::string("sage_attn"), json{{"pv_dtype", "bf16"}}},
        std::pair{std::string("sage_attn"), json::object()},
        std::pair{std::string("sage_sla_attn"), sla},
        std::pair{std::string("sparse_video_gen_2_attn"), svg2}}) {
    const Tensor cpu = generate(index, "cpu", backend, config, backend);
    const Tensor gpu = generate(index, "cuda", backend, config, backend);
    const double error = relative_error(gpu, cpu);
    const bool fp8 = backend == "sage_attn" && !config.contains("pv_dtype");
    const double bound = fp8 ? 3e-2 : 1e-2;
    expect(error < bound, fmt::format("{} {}: --device cuda video vs --device cpu: relative error "
                                      "{:.2e} < {:.0e}",
                                      backend, config.dump(), error, bound));
  }
  fs::remove_all(folder);
  return finish("wan_pipeline_sparse_cuda_test");
} catch (const std::exception& error) {
  std::printf("wan_pipeline_sparse_cuda_test: error: %s\n", error.what());
  return 1;
}
