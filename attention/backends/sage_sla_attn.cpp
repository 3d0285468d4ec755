// sage_sla_attn: SageSLA, SLA (attention/sla_core.h) whose sparse branch computes Q·K in INT8 as
// SageAttention does (attention/sla_quant.h: smoothed K, per-block scales), emulated on the CPU by
// quantising and dequantising before the float block-sparse kernel. P·V stays float32 (the GPU
// kernel's FP8 P·V is not emulated). Block map, linear branch and proj_l as in sla_attn.
#include "attention/backends/factories.h"
#include "attention/sla_core.h"

namespace mmgen::attention {

namespace {

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

BackendFactory sage_sla_attn_factory() {
  return [](const nlohmann::json& config) -> std::unique_ptr<AttentionBackend> {
    return std::make_unique<SageSlaBackend>(config);
  };
}

}  // namespace mmgen::attention
