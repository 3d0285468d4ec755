// sage_attn: SageAttention's INT8 Q·Kᵀ (K mean-smoothed, per-group scales) with float32 softmax
// and P·V, on the CPU (attention/kernels/sage_attention.h); on the GPU the same integers on the
// Hopper kernel's wgmma s8 scores with SageAttention2's FP8 P·V or a bf16 one (pv_dtype;
// sage_attn_cuda.cpp). Dense: every key is attended.
#include "attention/backends/descriptor.h"
#include "attention/kernels/sage_attention.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/backends/sage_attn/sage_attn_cuda.h"
#endif

namespace mmgen::attention::sage_attn {

namespace {

using P = Platform;

using json = nlohmann::json;

class SageAttnBackend final : public AttentionBackend {
 public:
  explicit SageAttnBackend(const nlohmann::json& config) {
    options_.granularity = sage::parse_granularity(config.at("qk_quant_gran").get<std::string>());
    options_.smooth_k = config.at("smooth_k").get<bool>();
  }
  std::string_view name() const override { return "sage_attn"; }
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const AttentionContext&, AttentionStats* stats) override {
    if (stats) {
      const int64_t pairs = q.size(0) * q.size(2);
      stats->visited_blocks += pairs;
      stats->total_blocks += pairs;
    }
    return sage::sage_int8_attention(q, k, v, scale, options_);
  }

 private:
  sage::Int8Options options_;
};

}  // namespace

const BackendDescriptor& descriptor() {
  static const BackendDescriptor d = {
      .info = {.name = "sage_attn",
               .family = Family::Dit,
               .summary = "SageAttention: dense attention with INT8 Q and K (K mean-smoothed)",
               .aliases = {},
               .platforms = {P::Cuda, P::Cpu},
               .build_needs = "CUDA: mmgen's INT8 and FP8 quantisers and wgmma s8/e4m3 attention "
                              "kernel (self-attention; cross-attention runs fa); CPU: mmgen's INT8 "
                              "kernel",
               .gpu_arch = "sm90",
               .dtypes = {"bf16", "fp32 (CPU)"},
               .head_sizes = "GPU: 64, 128; CPU: any",
               .fallback = "fa",
               .config =
                   {
                       {.name = "qk_quant_gran",
                        .type = ConfigType::Choice,
                        .default_value = "per_block",
                        .help = "granularity of the Q and K quantisation scales",
                        .choices = {"per_block", "per_warp", "per_thread"}},
                       {.name = "smooth_k",
                        .type = ConfigType::Bool,
                        .default_value = true,
                        .help = "subtract the mean of K before quantising it"},
                       {.name = "pv_dtype",
                        .type = ConfigType::Choice,
                        .default_value = "fp8",
                        .help = "P·V on the GPU: fp8 (SageAttention2's on Hopper: e4m3 V with "
                                "per-channel scales, e4m3 P, float32 sums per 128-key tile) or "
                                "bf16; the CPU's is float32 either way",
                        .choices = {"fp8", "bf16"}},
                   }},
      .kernels = {cpu_kernel("sage_attn")
#ifdef MMGEN_HAVE_CUDA
                      ,
                  hopper_kernel("sage_attn")
#endif
      },
      .cpu = [](const json& settings,
                const BackendResources&) -> std::unique_ptr<AttentionBackend> {
        return std::make_unique<SageAttnBackend>(settings);
      },
#ifdef MMGEN_HAVE_CUDA
      .cuda = make_cuda,
#endif
  };
  return d;
}

}  // namespace mmgen::attention::sage_attn
