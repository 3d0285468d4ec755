// sage_attn_3: SageAttention3's FP4 microscaling (e2m1 values, an e4m3 scale per 16) of Q, K, P
// and V, emulated exactly on the CPU so its accuracy can be studied anywhere
// (attention/sage_attention.h). Dense: every key is attended.
#include "attention/backends/factories.h"
#include "attention/sage_attention.h"

namespace mmgen::attention {

namespace {

class SageAttn3Backend final : public AttentionBackend {
 public:
  explicit SageAttn3Backend(const nlohmann::json& config) {
    options_.per_block_mean = config.value("per_block_mean", true);
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

BackendFactory sage_attn_3_factory() {
  return [](const nlohmann::json& config) { return std::make_unique<SageAttn3Backend>(config); };
}

}  // namespace mmgen::attention
