// sla_attn: Sparse-Linear Attention (attention/kernels/sla_core.h): softmax attention over the top
// key blocks of each query block plus a linear-attention branch through the layer's proj_l weights
// ("proj_l.weight" / "proj_l.bias" in the layer's LayerWeights; zero branch without them).
#include "attention/backends/descriptor.h"
#include "attention/kernels/sla_core.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/backends/sla_attn/sla_attn_cuda.h"
#endif

namespace mmgen::attention::sla_attn {

namespace {

using P = Platform;

using json = nlohmann::json;

class SlaBackend final : public AttentionBackend {
 public:
  explicit SlaBackend(const nlohmann::json& config)
      : settings_(sla::SlaSettings::from_json(config, /*int8_qk=*/false)) {}

  std::string_view name() const override { return "sla_attn"; }

  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const AttentionContext& context, AttentionStats* stats) override {
    return sla::sla_forward(name(), q, k, v, scale, settings_, context.weights, stats);
  }

 private:
  sla::SlaSettings settings_;
};

}  // namespace

const BackendDescriptor& descriptor() {
  static const BackendDescriptor d = {
      .info = {.name = "sla_attn",
               .family = Family::Dit,
               .summary =
                   "Sparse-Linear Attention: softmax attention on the top key blocks, linear "
                   "attention on the rest through a learned projection",
               .aliases = {"sla"},
               .platforms = {P::Cuda, P::Cpu},
               .build_needs = "CUDA: mmgen's block map, block-sparse and linear-branch kernels; "
                              "CPU: mmgen's block-sparse kernel",
               .gpu_arch = "sm90",
               .dtypes = {"bf16", "fp32 (CPU)"},
               .head_sizes = "64, 128",
               .sparse = true,
               .extra_weights = "proj_l per layer (SLA-trained checkpoints such as TurboWan); zero "
                                "without it",
               .per_step_state = "step index",
               .config = sla::config_keys()},
      .kernels = {cpu_kernel("sla_attn")
#ifdef MMGEN_HAVE_CUDA
                      ,
                  hopper_kernel("sla_attn")
#endif
      },
      .cpu = [](const json& settings, const BackendResources&)
          -> std::unique_ptr<AttentionBackend> { return std::make_unique<SlaBackend>(settings); },
#ifdef MMGEN_HAVE_CUDA
      .cuda = make_cuda,
#endif
      .extra_weights = {"proj_l."},
  };
  return d;
}

}  // namespace mmgen::attention::sla_attn
