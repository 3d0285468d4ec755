// torch_sdpa: plain dense attention (scores, softmax, weighted sum), the reference every other
// backend is checked against.
#include "attention/backends/descriptor.h"
#include "attention/kernels/dense_attention.h"

namespace mmgen::attention::torch_sdpa {

namespace {

using P = Platform;

using json = nlohmann::json;

class TorchSdpaBackend final : public AttentionBackend {
 public:
  std::string_view name() const override { return "torch_sdpa"; }
  bool batch_elements_alone() const override { return true; }
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const AttentionContext&, AttentionStats* stats) override {
    if (stats) {
      const int64_t pairs = q.size(0) * q.size(2);
      stats->visited_blocks += pairs;
      stats->total_blocks += pairs;
    }
    return dense_attention({.q = q, .k = k, .v = v, .scale = scale, .bias = {}, .key_mask = {}});
  }
};

}  // namespace

const BackendDescriptor& descriptor() {
  static const BackendDescriptor d = {
      .info = {.name = "torch_sdpa",
               .family = Family::Dit,
               .summary =
                   "plain dense attention (scores, softmax, weighted sum); the reference every "
                   "other backend is checked against",
               .aliases = {},
               .platforms = {P::Cuda, P::Rocm, P::Xpu, P::Musa, P::Mps, P::Npu, P::Cpu},
               .build_needs = "nothing (always built)",
               .dtypes = {"fp32", "bf16", "fp16"},
               .head_sizes = "any",
               .paged_counterpart = "torch_native"},
      .kernels = {cpu_kernel("torch_sdpa")
#ifdef MMGEN_HAVE_CUDA
                      ,
                  hopper_kernel("torch_sdpa", {})
#endif
      },
      .cpu = [](const json&, const BackendResources&) -> std::unique_ptr<AttentionBackend> {
        return std::make_unique<TorchSdpaBackend>();
      },
      .gpu_dense_reference = true,
  };
  return d;
}

}  // namespace mmgen::attention::torch_sdpa
