#include "attention/catalogue.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#ifdef MMGEN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "attention/backend.h"
#include "attention/paged/paged_backend.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/cuda/paged_backend_cuda.h"
#endif
#include "core/error.h"

namespace mmgen::attention {

namespace {

using json = nlohmann::json;
using P = Platform;
using T = ConfigType;

constexpr std::string_view kNotNative = "1 (larger pages are converted to slots)";
constexpr std::string_view kNative = "native (> 1)";
constexpr std::string_view kUnconfirmed = "unconfirmed";

const std::vector<Platform> kAllPlatforms = {P::Cuda, P::Rocm, P::Xpu, P::Musa,
                                             P::Mps,  P::Npu,  P::Cpu};

// The settings SLA and SageSLA share; only the sparse kernel differs.
std::vector<ConfigKey> sla_settings() {
  return {
      {.name = "topk",
       .type = T::Float,
       .default_value = 0.1,
       .help = "fraction of key blocks each query block attends with softmax attention (at least "
               "one block is kept)",
       .min = 0.0,
       .max = 1.0,
       .min_inclusive = false,
       .aliases = {"topk_ratio"}},
      {.name = "block_q",
       .type = T::Int,
       .default_value = 128,
       .help = "query block size in tokens",
       .min = 1,
       .aliases = {"BLKQ"}},
      {.name = "block_k",
       .type = T::Int,
       .default_value = 64,
       .help = "key block size in tokens",
       .min = 1,
       .aliases = {"BLKK"}},
      {.name = "feature_map",
       .type = T::Choice,
       .default_value = "softmax",
       .help = "feature map of the linear-attention branch",
       .choices = {"softmax", "elu", "relu"}},
  };
}

const std::vector<BackendInfo>& build_catalogue() {
  static const std::vector<BackendInfo> catalogue = {
      // ---------------------------------------------------------------- DiT family
      {.name = "fa",
       .family = Family::Dit,
       .summary = "FlashAttention: exact dense attention, tiled with an online softmax",
       .aliases = {"fa3", "fa4"},
       .platforms = {P::Cuda, P::Rocm, P::Cpu},
       .build_needs = "CUDA: the FlashAttention kernel (FA3 on Hopper, FA4 on Blackwell); "
                      "CPU: mmgen's tiled CPU kernel",
       .gpu_arch = "sm80 to sm10x (not sm12x)",
       .dtypes = {"bf16", "fp16", "fp32 (CPU)"},
       .head_sizes = "GPU: 32 to 256 in steps of 32; CPU: any",
       .fallback = "torch_sdpa",
       .paged_counterpart = "fa3"},
      {.name = "torch_sdpa",
       .family = Family::Dit,
       .summary = "plain dense attention (scores, softmax, weighted sum); the reference every "
                  "other backend is checked against",
       .aliases = {},
       .platforms = kAllPlatforms,
       .build_needs = "nothing (always built)",
       .dtypes = {"fp32", "bf16", "fp16"},
       .head_sizes = "any",
       .paged_counterpart = "torch_native"},
      {.name = "sliding_tile_attn",
       .family = Family::Dit,
       .summary = "Sliding Tile Attention: each query tile of 6x8x8 tokens attends a window of "
                  "key tiles chosen per step, layer and head",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: the STA kernel; CPU: mmgen's block-sparse kernel",
       .gpu_arch = "sm90",
       .dtypes = {"bf16", "fp32 (CPU)"},
       .head_sizes = "GPU: 128; CPU: any",
       .sparse = true,
       .per_step_state = "step index, layer index, latent grid; windows from the mask-strategy "
                         "file",
       .config =
           {
               {.name = "mask_strategy_file_path",
                .type = T::Path,
                .default_value = nullptr,
                .help = "JSON file of \"step_layer_head\": [wt, wh, ww] windows in tiles",
                .required_when = "sta_mode=STA_inference"},
               {.name = "sta_mode",
                .type = T::Choice,
                .default_value = "STA_inference",
                .help = "run with a mask file, or search / tune one",
                .choices = {"STA_inference", "STA_searching", "STA_tuning", "STA_tuning_cfg"},
                .aliases = {"STA_mode"}},
               {.name = "skip_time_steps",
                .type = T::Int,
                .default_value = 15,
                .help = "leading denoising steps that use full attention",
                .min = 0},
               {.name = "tile_size",
                .type = T::IntList,
                .default_value = {6, 8, 8},
                .help = "tile size in latent tokens [t, h, w]",
                .min = 1,
                .list_length = 3},
           }},
      {.name = "sage_attn",
       .family = Family::Dit,
       .summary = "SageAttention: dense attention with INT8 Q and K (K mean-smoothed)",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: the SageAttention kernels; CPU: mmgen's INT8 kernel",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp32 (CPU)"},
       .head_sizes = "GPU: 64, 128 (smaller ones padded); CPU: any",
       .fallback = "fa",
       .config =
           {
               {.name = "qk_quant_gran",
                .type = T::Choice,
                .default_value = "per_block",
                .help = "granularity of the Q and K quantisation scales",
                .choices = {"per_block", "per_warp", "per_thread"}},
               {.name = "smooth_k",
                .type = T::Bool,
                .default_value = true,
                .help = "subtract the mean of K before quantising it"},
           }},
      {.name = "sage_attn_3",
       .family = Family::Dit,
       .summary = "SageAttention3: FP4 (e2m1) attention with an e4m3 scale per 16 values",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA 12.8+: the SageAttention3 kernels; CPU: mmgen's FP4 emulation",
       .gpu_arch = "sm100 or sm120 (Blackwell)",
       .dtypes = {"bf16", "fp16", "fp32 (CPU)"},
       .head_sizes = "64, 128",
       .fallback = "torch_sdpa",
       .config =
           {
               {.name = "per_block_mean",
                .type = T::Bool,
                .default_value = true,
                .help = "smooth Q by its per-block mean before quantising"},
           }},
      {.name = "video_sparse_attn",
       .family = Family::Dit,
       .summary = "Video Sparse Attention: coarse attention over 4x4x4 cube means picks the "
                  "top-k key cubes; fine attention inside them; gated sum of both",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: the VSA kernel; CPU: mmgen's block-sparse kernel",
       .gpu_arch = "sm90",
       .dtypes = {"bf16", "fp32 (CPU)"},
       .head_sizes = "64, 128",
       .sparse = true,
       .extra_weights = "to_gate_compress projection (VSA-trained checkpoints); zero gate "
                        "without it",
       .per_step_state = "latent grid",
       .config =
           {
               {.name = "sparsity",
                .type = T::Float,
                .default_value = 0.0,
                .help = "fraction of key cubes dropped",
                .min = 0.0,
                .max = 1.0,
                .max_inclusive = false,
                .aliases = {"VSA_sparsity"}},
           }},
      {.name = "vmoba_attn",
       .family = Family::Dit,
       .summary = "V-MoBA: mixture of block attention; temporal, spatial and spatio-temporal "
                  "chunks cycle by layer and each query keeps its most similar chunks",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: the V-MoBA varlen kernel; CPU: mmgen's block-sparse kernel",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp32 (CPU)"},
       .head_sizes = "any FlashAttention head size (GPU); any (CPU)",
       .sparse = true,
       .per_step_state = "step index, layer index, latent grid",
       // Chunk sizes default to FastVideo's wan_1.3B_77_480_832.json so the backend runs without
       // a config; the cycle is temporal, spatial, spatio-temporal layers.
       .config =
           {
               {.name = "temporal_chunk_size",
                .type = T::Int,
                .default_value = 2,
                .help = "frames per temporal chunk",
                .min = 1},
               {.name = "temporal_topk",
                .type = T::Int,
                .default_value = 3,
                .help = "chunks kept per query in topk mode (temporal layers)",
                .min = 1},
               {.name = "spatial_chunk_size",
                .type = T::IntList,
                .default_value = {3, 4},
                .help = "spatial chunk [h, w] in latent tokens",
                .min = 1,
                .list_length = 2},
               {.name = "spatial_topk",
                .type = T::Int,
                .default_value = 20,
                .help = "chunks kept per query in topk mode (spatial layers)",
                .min = 1},
               {.name = "st_chunk_size",
                .type = T::IntList,
                .default_value = {4, 6, 4},
                .help = "spatio-temporal chunk [t, h, w] in latent tokens",
                .min = 1,
                .list_length = 3},
               {.name = "st_topk",
                .type = T::Int,
                .default_value = 15,
                .help = "chunks kept per query in topk mode (spatio-temporal layers)",
                .min = 1},
               {.name = "moba_select_mode",
                .type = T::Choice,
                .default_value = "threshold",
                .help = "keep chunks up to a similarity mass, or a fixed number",
                .choices = {"threshold", "topk"}},
               {.name = "moba_threshold",
                .type = T::Float,
                .default_value = 0.25,
                .help = "cumulative normalised similarity kept in threshold mode",
                .min = 0.0,
                .max = 1.0,
                .min_inclusive = false},
               {.name = "moba_threshold_type",
                .type = T::Choice,
                .default_value = "query_head",
                .help = "over what the threshold is applied",
                .choices = {"query_head", "head_global", "overall"}},
               {.name = "first_full_step",
                .type = T::Int,
                .default_value = 12,
                .help = "leading denoising steps that use full attention",
                .min = 0},
               {.name = "first_full_layer",
                .type = T::Int,
                .default_value = 0,
                .help = "leading layers that use full attention",
                .min = 0},
               {.name = "temporal_layer",
                .type = T::Int,
                .default_value = 1,
                .help = "temporal layers per cycle",
                .min = 0},
               {.name = "spatial_layer",
                .type = T::Int,
                .default_value = 1,
                .help = "spatial layers per cycle",
                .min = 0},
               {.name = "st_layer",
                .type = T::Int,
                .default_value = 1,
                .help = "spatio-temporal layers per cycle",
                .min = 0},
           }},
      {.name = "sla_attn",
       .family = Family::Dit,
       .summary = "Sparse-Linear Attention: softmax attention on the top key blocks, linear "
                  "attention on the rest through a learned projection",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: the SLA Triton kernels; CPU: mmgen's block-sparse kernel",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp32 (CPU)"},
       .head_sizes = "64, 128",
       .sparse = true,
       .extra_weights = "proj_l per layer (SLA-trained checkpoints such as TurboWan); zero "
                        "without it",
       .per_step_state = "step index",
       .config = sla_settings()},
      {.name = "sage_sla_attn",
       .family = Family::Dit,
       .summary = "SageSLA: SLA whose sparse branch uses SageAttention's INT8 Q·K and FP8 P·V",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: the SpargeAttn (spas_sage_attn) kernels; CPU: mmgen's kernel",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp32 (CPU)"},
       .head_sizes = "64, 128",
       .sparse = true,
       .extra_weights = "proj_l per layer (SLA-trained checkpoints); zero without it",
       .per_step_state = "step index",
       .config = sla_settings()},
      {.name = "sparse_video_gen_2_attn",
       .family = Family::Dit,
       .summary = "Sparse VideoGen 2: k-means clusters of queries and keys per head, permuted "
                  "contiguous; the top-p cluster pairs are attended",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: the Sparse-VideoGen kernels; CPU: mmgen's block-sparse kernel",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp32 (CPU)"},
       .head_sizes = "64, 128, 256",
       .sparse = true,
       .per_step_state = "k-means centroids per layer, warm-started across steps; timestep; "
                         "latent grid",
       .config =
           {
               {.name = "num_q_centroids",
                .type = T::Int,
                .default_value = 300,
                .help = "query clusters per head",
                .min = 1,
                .aliases = {"svg2_num_q_centroids"}},
               {.name = "num_k_centroids",
                .type = T::Int,
                .default_value = 1000,
                .help = "key clusters per head",
                .min = 1,
                .aliases = {"svg2_num_k_centroids"}},
               {.name = "top_p_kmeans",
                .type = T::Float,
                .default_value = 0.9,
                .help = "attention mass the kept cluster pairs must cover",
                .min = 0.0,
                .max = 1.0,
                .min_inclusive = false,
                .aliases = {"svg2_top_p_kmeans"}},
               {.name = "min_kc_ratio",
                .type = T::Float,
                .default_value = 0.1,
                .help = "minimum fraction of key clusters kept",
                .min = 0.0,
                .max = 1.0,
                .aliases = {"svg2_min_kc_ratio"}},
               {.name = "kmeans_iter_init",
                .type = T::Int,
                .default_value = 50,
                .help = "k-means iterations the first time a layer clusters",
                .min = 1,
                .aliases = {"svg2_kmeans_iter_init"}},
               {.name = "kmeans_iter_step",
                .type = T::Int,
                .default_value = 2,
                .help = "warm-started k-means iterations on later steps",
                .min = 0,
                .aliases = {"svg2_kmeans_iter_step"}},
               {.name = "zero_step_kmeans_init",
                .type = T::Bool,
                .default_value = false,
                .help = "also cluster during the dense steps",
                .aliases = {"svg2_zero_step_kmeans_init"}},
               {.name = "first_layers_fp",
                .type = T::Float,
                .default_value = 0.03,
                .help = "leading dense layers: a fraction of the layers if <= 1, else a count",
                .min = 0.0,
                .aliases = {"svg2_first_layers_fp"}},
               {.name = "first_times_fp",
                .type = T::Float,
                .default_value = 0.2,
                .help = "leading dense steps: a fraction of the steps if <= 1, else a count",
                .min = 0.0,
                .aliases = {"svg2_first_times_fp"}},
           }},
      {.name = "aiter",
       .family = Family::Dit,
       .summary = "AMD AITER dense attention kernels",
       .aliases = {},
       .platforms = {P::Rocm},
       .build_needs = "a ROCm build with AITER",
       .gpu_arch = "gfx942 / gfx950 (MI300 / MI355)",
       .dtypes = {"bf16", "fp16"},
       .head_sizes = "64, 128",
       .paged_counterpart = "aiter"},
      {.name = "aiter_sage",
       .family = Family::Dit,
       .summary = "AMD AITER attention with SageAttention-style INT8 quantisation",
       .aliases = {},
       .platforms = {P::Rocm},
       .build_needs = "a ROCm build with AITER",
       .gpu_arch = "gfx942 / gfx950 (MI300 / MI355)",
       .dtypes = {"bf16", "fp16"},
       .head_sizes = "64, 128"},

      // ---------------------------------------------------------------- paged family
      {.name = "torch_native",
       .family = Family::Paged,
       .summary = "gathers each request's K/V from the pool and runs dense attention; the "
                  "reference",
       .aliases = {},
       .platforms = kAllPlatforms,
       .build_needs = "nothing (always built)",
       .dtypes = {"fp32", "bf16", "fp16"},
       .head_sizes = "any",
       .page_sizes = kNotNative},
      {.name = "triton",
       .family = Family::Paged,
       .summary = "two-stage extend (cached prefix from the pool, new tokens contiguous); "
                  "split-KV decode merged by log-sum-exp",
       .aliases = {},
       .platforms = {P::Cuda, P::Rocm, P::Xpu, P::Cpu},
       .build_needs = "GPU: the Triton kernels; CPU: mmgen's port of the design",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp32"},
       .head_sizes = "any",
       .page_sizes = kNotNative},
      {.name = "flashinfer",
       .family = Family::Paged,
       .summary = "plan/run: ragged attention over new tokens plus paged attention over the "
                  "prefix, merged by log-sum-exp",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: FlashInfer; CPU: mmgen's port of the design",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp8 KV", "fp32 (CPU)"},
       .head_sizes = "64, 128, 256 (GPU); any (CPU)",
       .page_sizes = kNotNative},
      {.name = "fa3",
       .family = Family::Paged,
       .summary = "FlashAttention 3 over a native page table",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: the FA3 kernel; CPU: mmgen's port of the design",
       .gpu_arch = "sm90",
       .dtypes = {"bf16", "fp16", "fp8", "fp32 (CPU)"},
       .head_sizes = "up to 256",
       .page_sizes = kNative},
      {.name = "fa4",
       .family = Family::Paged,
       .summary = "FlashAttention 4 (Blackwell)",
       .aliases = {},
       .platforms = {P::Cuda},
       .build_needs = "the FA4 kernel",
       .gpu_arch = "sm100",
       .dtypes = {"bf16", "fp16"},
       .head_sizes = "up to 256",
       .page_sizes = kNotNative},
      {.name = "flex_attention",
       .family = Family::Paged,
       .summary = "score-mod and mask-mod callbacks (T5 bias, sliding windows, padding)",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: compiled flex kernels; CPU: mmgen's implementation",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp32"},
       .head_sizes = "any",
       .page_sizes = kNotNative},
      {.name = "trtllm_mha",
       .family = Family::Paged,
       .summary = "TensorRT-LLM multi-head attention kernels",
       .aliases = {},
       .platforms = {P::Cuda},
       .build_needs = "the TensorRT-LLM kernels",
       .gpu_arch = "sm100",
       .dtypes = {"bf16", "fp16", "fp8"},
       .head_sizes = "64, 128, 256",
       .page_sizes = kNative},
      {.name = "dual_chunk_flash_attn",
       .family = Family::Paged,
       .summary = "dual-chunk attention for very long contexts (Qwen2.5-1M style)",
       .aliases = {},
       .platforms = {P::Cuda},
       .build_needs = "the FlashAttention kernel",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16"},
       .head_sizes = "up to 256",
       .page_sizes = kNotNative},
      {.name = "aiter",
       .family = Family::Paged,
       .summary = "AMD AITER paged attention kernels",
       .aliases = {},
       .platforms = {P::Rocm},
       .build_needs = "a ROCm build with AITER",
       .gpu_arch = "gfx942 / gfx950 (MI300 / MI355)",
       .dtypes = {"bf16", "fp16", "fp8"},
       .head_sizes = "64, 128",
       .page_sizes = kNative},
      {.name = "wave",
       .family = Family::Paged,
       .summary = "AMD Wave kernels",
       .aliases = {},
       .platforms = {P::Rocm},
       .build_needs = "a ROCm build with Wave",
       .gpu_arch = "gfx942+",
       .dtypes = {"bf16", "fp16"},
       .head_sizes = "64, 128",
       .page_sizes = kNotNative},
      {.name = "ascend",
       .family = Family::Paged,
       .summary = "Huawei Ascend NPU kernels",
       .aliases = {},
       .platforms = {P::Npu},
       .build_needs = "an Ascend (CANN) build",
       .dtypes = {"bf16", "fp16"},
       .head_sizes = "64, 128",
       .page_sizes = kNative},
      {.name = "intel_xpu",
       .family = Family::Paged,
       .summary = "Intel GPU (XPU) kernels",
       .aliases = {},
       .platforms = {P::Xpu},
       .build_needs = "an XPU build",
       .dtypes = {"bf16", "fp16"},
       .head_sizes = "64, 128",
       .page_sizes = kUnconfirmed},
      {.name = "intel_amx",
       .family = Family::Paged,
       .summary = "Intel AMX CPU kernels",
       .aliases = {},
       .platforms = {P::Cpu},
       .build_needs = "an AMX kernel and a CPU with AMX (Sapphire Rapids or newer)",
       .dtypes = {"bf16"},
       .head_sizes = "any",
       .page_sizes = kUnconfirmed},
      {.name = "flashinfer_mla",
       .family = Family::Paged,
       .summary = "multi-head latent attention (compressed KV, DeepSeek-style) on FlashInfer; "
                  "MLA models only",
       .aliases = {},
       .platforms = {P::Cuda},
       .build_needs = "FlashInfer",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16"},
       .head_sizes = "MLA latent 512 + rope 64",
       .page_sizes = kNotNative},
      {.name = "flashmla",
       .family = Family::Paged,
       .summary = "FlashMLA decode kernels; MLA models only",
       .aliases = {},
       .platforms = {P::Cuda},
       .build_needs = "the FlashMLA kernels",
       .gpu_arch = "sm90",
       .dtypes = {"bf16", "fp8"},
       .head_sizes = "MLA latent 512 + rope 64",
       .page_sizes = kNative},
      {.name = "cutlass_mla",
       .family = Family::Paged,
       .summary = "CUTLASS MLA kernels; MLA models only",
       .aliases = {},
       .platforms = {P::Cuda},
       .build_needs = "the CUTLASS MLA kernels",
       .gpu_arch = "sm100",
       .dtypes = {"bf16", "fp8"},
       .head_sizes = "MLA latent 512 + rope 64",
       .page_sizes = kNative},
      {.name = "trtllm_mla",
       .family = Family::Paged,
       .summary = "TensorRT-LLM MLA kernels; MLA models only",
       .aliases = {},
       .platforms = {P::Cuda},
       .build_needs = "the TensorRT-LLM kernels",
       .gpu_arch = "sm100",
       .dtypes = {"bf16", "fp8"},
       .head_sizes = "MLA latent 512 + rope 64",
       .page_sizes = kNative},
  };
  return catalogue;
}

std::string lower(std::string_view text) {
  std::string out;
  for (char c : text) out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(begin, end - begin + 1));
}

// Auto choice order per platform: the first backend with a usable kernel wins.
const std::vector<std::string_view>& preference(Platform platform, Family family) {
  static const std::vector<std::string_view> dit_cuda = {"fa", "torch_sdpa"},
                                             dit_rocm = {"aiter", "fa", "torch_sdpa"},
                                             dit_cpu = {"fa", "torch_sdpa"},
                                             dit_other = {"torch_sdpa"},
                                             // CPU: triton first, measured with
                                             // bench/paged_attention_bench (docs/performance.md):
                                             // fastest or within 3% on UMT5- and Qwen3-sized
                                             // attention; flashinfer and flex_attention slower.
      paged_cpu = {"intel_amx", "triton", "flashinfer", "torch_native"},
                                             paged_cuda = {"fa3", "flashinfer", "triton",
                                                           "torch_native"},
                                             paged_rocm = {"aiter", "triton", "torch_native"},
                                             paged_xpu = {"intel_xpu", "triton", "torch_native"},
                                             paged_npu = {"ascend", "torch_native"},
                                             paged_other = {"triton", "torch_native"};
  if (family == Family::Dit) {
    switch (platform) {
      case P::Cuda:
        return dit_cuda;
      case P::Rocm:
        return dit_rocm;
      case P::Cpu:
        return dit_cpu;
      default:
        return dit_other;
    }
  }
  switch (platform) {
    case P::Cuda:
      return paged_cuda;
    case P::Rocm:
      return paged_rocm;
    case P::Xpu:
      return paged_xpu;
    case P::Npu:
      return paged_npu;
    case P::Cpu:
      return paged_cpu;
    default:
      return paged_other;
  }
}

std::string describe_sm(int sm) {
  return fmt::format("sm{}", sm);
}

// Why one kernel does not take this case; empty when it does.
std::string kernel_mismatch(const KernelBuild& kernel, const Machine& machine,
                            std::string_view dtype, int64_t head_size) {
  if (kernel.min_sm > 0 && machine.sm < kernel.min_sm)
    return fmt::format("its kernel needs {} or newer; this GPU is {}", describe_sm(kernel.min_sm),
                       describe_sm(machine.sm));
  if (kernel.max_sm > 0 && machine.sm > kernel.max_sm)
    return fmt::format("its kernel supports up to {}; this GPU is {}", describe_sm(kernel.max_sm),
                       describe_sm(machine.sm));
  if (!dtype.empty() &&
      std::find(kernel.dtypes.begin(), kernel.dtypes.end(), dtype) == kernel.dtypes.end())
    return fmt::format("its kernel takes {}; the model runs in {}", fmt::join(kernel.dtypes, ", "),
                       dtype);
  if (head_size > 0 && !kernel.head_sizes.empty() &&
      std::find(kernel.head_sizes.begin(), kernel.head_sizes.end(), head_size) ==
          kernel.head_sizes.end())
    return fmt::format("its kernel takes head sizes {}; this model's is {}",
                       fmt::join(kernel.head_sizes, ", "), head_size);
  return {};
}

}  // namespace

std::string_view family_name(Family family) {
  return family == Family::Dit ? "dit" : "paged";
}

std::string_view platform_name(Platform platform) {
  switch (platform) {
    case P::Cuda:
      return "cuda";
    case P::Rocm:
      return "rocm";
    case P::Xpu:
      return "xpu";
    case P::Musa:
      return "musa";
    case P::Mps:
      return "mps";
    case P::Npu:
      return "npu";
    case P::Cpu:
      return "cpu";
  }
  return "?";
}

const std::vector<BackendInfo>& backend_catalogue() {
  return build_catalogue();
}

const BackendInfo* find_backend(Family family, std::string_view name) {
  const std::string wanted = lower(trim(name));
  for (const auto& entry : backend_catalogue()) {
    if (entry.family != family) continue;
    if (entry.name == wanted) return &entry;
    for (auto alias : entry.aliases)
      if (alias == wanted) return &entry;
  }
  return nullptr;
}

bool is_known_backend(std::string_view name) {
  return find_backend(Family::Dit, name) || find_backend(Family::Paged, name);
}

std::vector<std::string> backend_names(Family family, bool with_aliases) {
  std::vector<std::string> names;
  for (const auto& entry : backend_catalogue()) {
    if (entry.family != family) continue;
    names.emplace_back(entry.name);
    if (with_aliases)
      for (auto alias : entry.aliases) names.emplace_back(alias);
  }
  return names;
}

std::string normalize_backend_name(Family family, std::string_view name) {
  const BackendInfo* entry = find_backend(family, name);
  return entry ? std::string(entry->name) : lower(trim(name));
}

// Kernels are listed here and nowhere else.
//  - torch_sdpa on CPU is attention/dense_attention.
//  - the paged family on CPU: the designs in attention/paged/ (torch_native, triton, flashinfer,
//    fa3, flex_attention), over a float32 KV pool.
//  - with MMGEN_CUDA: the GPU kernels in attention/cuda/ (built for sm_90a only, cmake/cuda.cmake,
//    so sm 90 exactly): fa (our FlashAttention kernel, head sizes 64 and 128), torch_sdpa (the
//    plain reference kernel, any head size up to 256), and the block-sparse self-attention
//    backends driven through that kernel (models/cuda/sparse_attention_cuda.h).
//  - the paged family on CUDA (MMGEN_CUDA builds): fa3 and flashinfer in attention/cuda/paged_*,
//    bf16 over a bf16 device KV pool.
const std::vector<KernelBuild>& compiled_kernels() {
  static const std::vector<KernelBuild> kernels = [] {
    std::vector<KernelBuild> list;
    // The paged backends with a CPU implementation in attention/paged/.
    for (std::string_view name : paged::cpu_paged_backends())
      list.push_back(
          {.family = Family::Paged, .backend = name, .platform = P::Cpu, .dtypes = {"fp32"}});
#ifdef MMGEN_HAVE_CUDA
    // The paged backends with a CUDA implementation in attention/cuda/paged_* (bf16; built for
    // sm_90a only, as the DiT kernels below are, so sm 90 exactly).
    for (std::string_view name : cuda::paged::cuda_paged_backends())
      list.push_back({.family = Family::Paged,
                      .backend = name,
                      .platform = P::Cuda,
                      .dtypes = {"bf16"},
                      .head_sizes = cuda::paged::cuda_paged_head_sizes(),
                      .min_sm = 90,
                      .max_sm = 90});
#endif
    // The DiT backends with a CPU implementation in attention/backends/.
    for (std::string_view name : cpu_dit_backends())
      list.push_back(
          {.family = Family::Dit, .backend = name, .platform = P::Cpu, .dtypes = {"fp32"}});
#ifdef MMGEN_HAVE_CUDA
    for (std::string_view name : {"fa", "sliding_tile_attn", "video_sparse_attn"})
      list.push_back({.family = Family::Dit,
                      .backend = name,
                      .platform = P::Cuda,
                      .dtypes = {"bf16"},
                      .head_sizes = {64, 128},
                      .min_sm = 90,
                      .max_sm = 90});
    list.push_back({.family = Family::Dit,
                    .backend = "torch_sdpa",
                    .platform = P::Cuda,
                    .dtypes = {"bf16"},
                    .min_sm = 90,
                    .max_sm = 90});
#endif
    return list;
  }();
  return kernels;
}

const Machine& this_machine() {
  static const Machine machine = [] {
    Machine m;
    m.platform = P::Cpu;
    m.dtype = "fp32";
    m.description = "cpu";
    for (const auto& kernel : compiled_kernels())
      if (kernel.platform == P::Cpu) m.kernels.push_back(kernel);
    return m;
  }();
  return machine;
}

const Machine& machine_for_device(std::string_view device) {
  if (device != "cuda") return this_machine();
  static const Machine machine = [] {
    Machine m;
    m.platform = P::Cuda;
    m.dtype = "bf16";
#ifdef MMGEN_HAVE_CUDA
    int index = 0, major = 0, minor = 0;
    if (cudaGetDevice(&index) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index) == cudaSuccess)
      m.sm = major * 10 + minor;
    else
      cudaGetLastError();  // no GPU here: clear the error, sm stays 0
#endif
    m.description = m.sm > 0 ? fmt::format("cuda sm{}", m.sm) : std::string("cuda (no GPU found)");
    for (const auto& kernel : compiled_kernels())
      if (kernel.platform == P::Cuda) m.kernels.push_back(kernel);
    return m;
  }();
  return machine;
}

Availability kernel_availability(const Machine& machine, Family family, std::string_view backend,
                                 std::string_view dtype, int64_t head_size) {
  const BackendInfo* entry = find_backend(family, backend);
  if (!entry) return {false, fmt::format("'{}' is not a {} backend", backend, family_name(family))};
  const auto& platforms = entry->platforms;
  if (std::find(platforms.begin(), platforms.end(), machine.platform) == platforms.end()) {
    std::vector<std::string_view> names;
    for (auto p : platforms) names.push_back(platform_name(p));
    return {false, fmt::format("it runs on {} only; this machine is {}", fmt::join(names, ", "),
                               machine.description)};
  }
  std::string first_mismatch;
  bool any_kernel = false;
  for (const auto& kernel : machine.kernels) {
    if (kernel.family != family || kernel.backend != entry->name ||
        kernel.platform != machine.platform)
      continue;
    any_kernel = true;
    std::string mismatch = kernel_mismatch(kernel, machine, dtype, head_size);
    if (mismatch.empty()) return {true, {}};
    if (first_mismatch.empty()) first_mismatch = mismatch;
  }
  if (!any_kernel)
    return {false, machine.platform == P::Cpu
                       ? std::string("this build has no cpu kernel for it yet")
                       : fmt::format("this build has no {} kernel for it (needs {})",
                                     platform_name(machine.platform), entry->build_needs)};
  return {false, first_mismatch};
}

std::string auto_backend(const Machine& machine, Family family, std::string_view dtype,
                         int64_t head_size) {
  std::vector<std::string> reasons;
  for (auto name : preference(machine.platform, family)) {
    Availability availability = kernel_availability(machine, family, name, dtype, head_size);
    if (availability.ok) return std::string(name);
    reasons.push_back(fmt::format("{}: {}", name, availability.reason));
  }
  fail("no {} attention backend runs on {} ({}); see `mmgen backends`", family_name(family),
       machine.description, fmt::join(reasons, "; "));
}

}  // namespace mmgen::attention
