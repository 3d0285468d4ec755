// sage_attn_3: SageAttention3's FP4 microscaling (e2m1 values, an e4m3 scale per 16) of Q, K, P
// and V, emulated exactly on the CPU so its accuracy can be studied anywhere
// (attention/kernels/sage_attention.h). Dense: every key is attended.
#include "attention/backends/descriptor.h"
#include "attention/kernels/sage_attention.h"

namespace mmgen::attention::sage_attn_3 {

namespace {

using P = Platform;

using json = nlohmann::json;

class SageAttn3Backend final : public AttentionBackend {
 public:
  explicit SageAttn3Backend(const nlohmann::json& config) {
    options_.per_block_mean = config.at("per_block_mean").get<bool>();
  }
  std::string_view name() const override { return "sage_attn_3"; }
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const AttentionContext&, AttentionStats* stats) override {
    if (stats) {
      const int64_t pairs = q.size(0) * q.size(2);
      stats->visited_blocks += pairs;
      stats->total_blocks += pairs;
    }
    return sage::sage_fp4_attention(q, k, v, scale, options_);
  }

 private:
  sage::Fp4Options options_;
};

}  // namespace

const BackendDescriptor& descriptor() {
  static const BackendDescriptor d = {
      .info = {.name = "sage_attn_3",
               .family = Family::Dit,
               .summary = "SageAttention3: FP4 (e2m1) attention with an e4m3 scale per 16 values",
               .aliases = {},
               .platforms = {P::Cuda, P::Cpu},
               .build_needs = "CUDA 12.8+: the SageAttention3 kernels; CPU: mmgen's FP4 emulation",
               .gpu_arch = "sm100 or sm120 (Blackwell)",
               .min_gpu_sm = 100,  // FP4 (NVFP4) tensor-core products
               .dtypes = {"bf16", "fp16", "fp32 (CPU)"},
               .head_sizes = "64, 128",
               .fallback = "torch_sdpa",
               .config =
                   {
                       {.name = "per_block_mean",
                        .type = ConfigType::Bool,
                        .default_value = true,
                        .help = "smooth Q by its per-block mean before quantising"},
                   }},
      .kernels = {cpu_kernel("sage_attn_3")},
      .cpu = [](const json& settings,
                const BackendResources&) -> std::unique_ptr<AttentionBackend> {
        return std::make_unique<SageAttn3Backend>(settings);
      },
  };
  return d;
}

}  // namespace mmgen::attention::sage_attn_3
