// torch_sdpa: plain dense attention (scores, softmax, weighted sum), the reference every other
// backend is checked against.
#include "attention/backends/factories.h"
#include "attention/dense_attention.h"

namespace mmgen::attention {

namespace {

class TorchSdpaBackend final : public AttentionBackend {
 public:
  std::string_view name() const override { return "torch_sdpa"; }
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const AttentionContext&, AttentionStats* stats) override {
    if (stats) {
      const int64_t pairs = q.size(0) * q.size(2);
      stats->visited_blocks += pairs;
      stats->total_blocks += pairs;
    }
    return dense_attention({.q = q, .k = k, .v = v, .scale = scale});
  }
};

}  // namespace

BackendFactory torch_sdpa_factory() {
  return [](const nlohmann::json&) { return std::make_unique<TorchSdpaBackend>(); };
}

}  // namespace mmgen::attention
