// sparse_video_gen_2_attn: Sparse VideoGen 2 (k-means clusters of queries and keys per head,
// top-p cluster pairs, permuted block-sparse attention); the kernel is svg2_attention.h.
#include <fmt/format.h>

#include <algorithm>

#include "attention/backends/descriptor.h"
#include "attention/backends/sparse_video_gen_2_attn/svg2_attention.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/backends/sparse_video_gen_2_attn/svg2_cuda.h"
#endif

namespace mmgen::attention::sparse_video_gen_2_attn {

using json = nlohmann::json;
using P = Platform;

const BackendDescriptor& descriptor() {
  static const BackendDescriptor d = {
      .info =
          {.name = "sparse_video_gen_2_attn",
           .family = Family::Dit,
           .summary = "Sparse VideoGen 2: k-means clusters of queries and keys per head, permuted "
                      "contiguous; the top-p cluster pairs are attended",
           .aliases = {"svg2"},
           .platforms = {P::Cuda, P::Cpu},
           .build_needs = "CUDA: mmgen's k-means and block-sparse kernels; CPU: mmgen's "
                          "block-sparse kernel",
           .gpu_arch = "sm90",
           .dtypes = {"bf16", "fp32 (CPU)"},
           .head_sizes = "64, 128 (GPU); any (CPU)",
           .sparse = true,
           .per_step_state = "k-means centroids per layer, warm-started across steps; timestep; "
                             "latent grid",
           .config =
               {
                   {.name = "num_q_centroids",
                    .type = ConfigType::Int,
                    .default_value = 300,
                    .help = "query clusters per head",
                    .min = 1,
                    .max = 1 << 20,
                    .aliases = {"svg2_num_q_centroids"}},
                   {.name = "num_k_centroids",
                    .type = ConfigType::Int,
                    .default_value = 1000,
                    .help = "key clusters per head",
                    .min = 1,
                    .max = 1 << 20,
                    .aliases = {"svg2_num_k_centroids"}},
                   {.name = "top_p_kmeans",
                    .type = ConfigType::Float,
                    .default_value = 0.9,
                    .help = "attention mass the kept cluster pairs must cover",
                    .min = 0.0,
                    .max = 1.0,
                    .min_inclusive = false,
                    .aliases = {"svg2_top_p_kmeans"}},
                   {.name = "min_kc_ratio",
                    .type = ConfigType::Float,
                    .default_value = 0.1,
                    .help = "minimum fraction of key clusters kept",
                    .min = 0.0,
                    .max = 1.0,
                    .aliases = {"svg2_min_kc_ratio"}},
                   {.name = "kmeans_iter_init",
                    .type = ConfigType::Int,
                    .default_value = 50,
                    .help = "k-means iterations the first time a layer clusters",
                    .min = 1,
                    .max = 10000,
                    .aliases = {"svg2_kmeans_iter_init"}},
                   {.name = "kmeans_iter_step",
                    .type = ConfigType::Int,
                    .default_value = 2,
                    .help = "warm-started k-means iterations on later steps",
                    .min = 0,
                    .max = 10000,
                    .aliases = {"svg2_kmeans_iter_step"}},
                   {.name = "zero_step_kmeans_init",
                    .type = ConfigType::Bool,
                    .default_value = false,
                    .help = "also cluster during the dense steps",
                    .aliases = {"svg2_zero_step_kmeans_init"}},
                   {.name = "first_layers_fp",
                    .type = ConfigType::Float,
                    .default_value = 0.03,
                    .help = "leading dense layers: a fraction of the layers if <= 1, else a count",
                    .min = 0.0,
                    .aliases = {"svg2_first_layers_fp"}},
                   {.name = "first_times_fp",
                    .type = ConfigType::Float,
                    .default_value = 0.2,
                    .help = "leading dense steps: a fraction of the steps if <= 1, else a count",
                    .min = 0.0,
                    .aliases = {"svg2_first_times_fp"}},
               }},
      .kernels = {cpu_kernel("sparse_video_gen_2_attn")
#ifdef MMGEN_HAVE_CUDA
                      ,
                  hopper_kernel("sparse_video_gen_2_attn")
#endif
      },
      .cpu = [](const json& settings,
                const BackendResources&) -> std::unique_ptr<AttentionBackend> {
        return std::make_unique<svg2::Svg2Attention>(svg2::Options::from_json(settings));
      },
#ifdef MMGEN_HAVE_CUDA
      .cuda = svg2::make_cuda,
#endif
      .dense_steps = [](const json& settings, int64_t steps) -> DenseSteps {
        const double first = settings.at("first_times_fp").get<double>();
        return {
            std::clamp<int64_t>(svg2::Options::from_json(settings).dense_steps(steps), 0, steps),
            fmt::format("first_times_fp {}", first)};
      },
  };
  return d;
}

}  // namespace mmgen::attention::sparse_video_gen_2_attn
