// sage_sla_attn: SageSLA, SLA (attention/kernels/sla_core.h) whose sparse branch computes Q·K in
// INT8 as SageAttention does (attention/kernels/sla_quant.h: smoothed K, per-block scales),
// emulated on the CPU by quantising and dequantising before the float block-sparse kernel. P·V
// stays float32 (the GPU kernel's FP8 P·V is not emulated). Block map, linear branch and proj_l as
// in sla_attn. On the GPU it is sla_attn's GPU half with the INT8 score kernel (sla_attn_cuda.h,
// make_sla_cuda): the same integers as the CPU, a bf16 P·V.
#include "attention/backends/descriptor.h"
#include "attention/kernels/sla_core.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/backends/sla_attn/sla_attn_cuda.h"
#endif

namespace mmgen::attention::sage_sla_attn {

namespace {

using P = Platform;

using json = nlohmann::json;

class SageSlaBackend final : public AttentionBackend {
 public:
  explicit SageSlaBackend(const nlohmann::json& config)
      : settings_(sla::SlaSettings::from_json(config, /*int8_qk=*/true)) {}

  std::string_view name() const override { return "sage_sla_attn"; }

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
      .info = {.name = "sage_sla_attn",
               .family = Family::Dit,
               .summary =
                   "SageSLA: SLA whose sparse branch computes Q·K in INT8 as SageAttention does",
               .aliases = {},
               .platforms = {P::Cuda, P::Cpu},
               .build_needs = "CUDA: mmgen's SLA kernels with the INT8 (wgmma s8) block-sparse "
                              "kernel; CPU: mmgen's kernel",
               .gpu_arch = "sm90",
               .dtypes = {"bf16", "fp32 (CPU)"},
               .head_sizes = "64, 128",
               .sparse = true,
               .extra_weights = "proj_l per layer (SLA-trained checkpoints); zero without it",
               .per_step_state = "step index",
               .config = sla::config_keys()},
      .kernels = {cpu_kernel("sage_sla_attn")
#ifdef MMGEN_HAVE_CUDA
                      ,
                  hopper_kernel("sage_sla_attn")
#endif
      },
      .cpu = [](const json& settings,
                const BackendResources&) -> std::unique_ptr<AttentionBackend> {
        return std::make_unique<SageSlaBackend>(settings);
      },
#ifdef MMGEN_HAVE_CUDA
      .cuda =
          [](const json& settings, const BackendResources&) {
            return sla_attn::make_sla_cuda(sla::SlaSettings::from_json(settings, /*int8_qk=*/true));
          },
#endif
      .extra_weights = {"proj_l."},
  };
  return d;
}

}  // namespace mmgen::attention::sage_sla_attn
