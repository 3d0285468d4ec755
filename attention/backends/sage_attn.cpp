// sage_attn: SageAttention's INT8 Q·Kᵀ (K mean-smoothed, per-group scales) with float32 softmax
// and P·V, on the CPU (attention/sage_attention.h). Dense: every key is attended.
#include "attention/backends/factories.h"
#include "attention/sage_attention.h"

namespace mmgen::attention {

namespace {

class SageAttnBackend final : public AttentionBackend {
 public:
  explicit SageAttnBackend(const nlohmann::json& config) {
    options_.granularity =
        sage::parse_granularity(config.value("qk_quant_gran", std::string("per_block")));
    options_.smooth_k = config.value("smooth_k", true);
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

BackendFactory sage_attn_factory() {
  return [](const nlohmann::json& config) { return std::make_unique<SageAttnBackend>(config); };
}

}  // namespace mmgen::attention
