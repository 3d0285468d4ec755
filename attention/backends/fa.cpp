// fa: FlashAttention-2 style dense attention on the CPU (attention/flash_kernel.h): query tiles,
// online softmax over key chunks, register-blocked AVX2/FMA micro-kernels, OpenMP over
// batch x heads x query tiles. Exact softmax attention up to float32 rounding.
#include "attention/backends/factories.h"
#include "attention/flash_kernel.h"

namespace mmgen::attention {

namespace {

class FlashBackend final : public AttentionBackend {
 public:
  std::string_view name() const override { return "fa"; }
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const AttentionContext&, AttentionStats* stats) override {
    if (stats) {
      // Dense: every key chunk of every query tile, counted in the kernel's own blocking.
      const BlockSparsePattern pattern = flash::dense_pattern(q.size(1), k.size(1));
      const int64_t blocks = q.size(0) * q.size(2) * pattern.total();
      stats->visited_blocks += blocks;
      stats->total_blocks += blocks;
    }
    return flash::flash_attention(q, k, v, scale);
  }
};

}  // namespace

BackendFactory fa_factory() {
  return [](const nlohmann::json&) { return std::make_unique<FlashBackend>(); };
}

}  // namespace mmgen::attention
