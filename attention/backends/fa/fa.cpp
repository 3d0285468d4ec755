// fa: FlashAttention-2 style dense attention on the CPU (attention/kernels/flash_kernel.h): query
// tiles, online softmax over key chunks, register-blocked AVX2/FMA micro-kernels, OpenMP over batch
// x heads x query tiles. Exact softmax attention up to float32 rounding.
#include "attention/backends/descriptor.h"
#include "attention/kernels/flash_kernel.h"

namespace mmgen::attention::fa {

namespace {

using P = Platform;

using json = nlohmann::json;

class FlashBackend final : public AttentionBackend {
 public:
  std::string_view name() const override { return "fa"; }
  bool counts_repeated_keys() const override { return true; }
  bool batch_elements_alone() const override { return true; }
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const AttentionContext& context, AttentionStats* stats) override {
    if (context.repeated_tail)
      return attend_repeated_tail(
          q, k, v, scale, *context.repeated_tail,
          [](const Tensor& qb, const Tensor& kb, const Tensor& vb, float s, Tensor* lse) {
            return flash::flash_attention(qb, kb, vb, s, lse);
          });
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

const BackendDescriptor& descriptor() {
  static const BackendDescriptor d = {
      .info = {.name = "fa",
               .family = Family::Dit,
               .summary = "FlashAttention: exact dense attention, tiled with an online softmax",
               .aliases = {"fa3", "fa4"},
               .platforms = {P::Cuda, P::Rocm, P::Cpu},
               .build_needs = "CUDA: the FlashAttention kernel (FA3 on Hopper, FA4 on Blackwell); "
                              "CPU: mmgen's tiled CPU kernel",
               .gpu_arch = "sm80 to sm10x (not sm12x)",
               .dtypes = {"bf16", "fp16", "fp32 (CPU)"},
               .head_sizes = "GPU: 32 to 256 in steps of 32; CPU: any",
               .fallback = "torch_sdpa",
               .paged_counterpart = "fa3"},
      .kernels = {cpu_kernel("fa")
#ifdef MMGEN_HAVE_CUDA
                      ,
                  hopper_kernel("fa")
#endif
      },
      .cpu = [](const json&, const BackendResources&) -> std::unique_ptr<AttentionBackend> {
        return std::make_unique<FlashBackend>();
      },
  };
  return d;
}

}  // namespace mmgen::attention::fa
