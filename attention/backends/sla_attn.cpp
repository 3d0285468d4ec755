// sla_attn: Sparse-Linear Attention (attention/sla_core.h): softmax attention over the top key
// blocks of each query block plus a linear-attention branch through the layer's proj_l weights
// ("proj_l.weight" / "proj_l.bias" in the layer's LayerWeights; zero branch without them).
#include "attention/backends/factories.h"
#include "attention/sla_core.h"

namespace mmgen::attention {

namespace {

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

BackendFactory sla_attn_factory() {
  return [](const nlohmann::json& config) -> std::unique_ptr<AttentionBackend> {
    return std::make_unique<SlaBackend>(config);
  };
}

}  // namespace mmgen::attention
