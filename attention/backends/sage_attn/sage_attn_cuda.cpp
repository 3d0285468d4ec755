// sage_attn on the GPU: SageAttention's dense attention with INT8 Q·Kᵀ. q and k are quantised on
// the device exactly as the CPU backend quantises them (attention/sage_attention.cpp: K smoothed by
// its mean over tokens, one scale per group of rows at the chosen granularity; int8_quantize.h),
// then the Hopper kernel runs every key block with wgmma s8 scores, dequantised per row and key
// group, and the bf16 P·V of `fa`. The integer products equal the CPU's, so the two differ by the
// float rounding after them (the softmax, bf16 P and output).
#include "attention/backends/sage_attn/sage_attn_cuda.h"

#include "attention/sage_attention.h"
#include "core/error.h"

namespace mmgen::attention::sage_attn {

namespace {

using namespace mmgen::cuda;

class SageAttnCuda final : public SparseSelfAttentionCuda {
 public:
  explicit SageAttnCuda(const nlohmann::json& settings)
      : granularity_(sage::parse_granularity(settings.at("qk_quant_gran").get<std::string>())),
        smooth_k_(settings.at("smooth_k").get<bool>()) {}

  std::string_view name() const override { return "sage_attn"; }

  void forward(const SelfAttentionCall& call) override {
    check(flash_attention_supports_head_dim(call.head_dim),
          "sage_attn on the GPU: head size {} is not compiled in (64 and 128 are); use --device "
          "cpu",
          call.head_dim);
    start_steps();
    Int8QuantizeArgs query, key;
    query.arithmetic = key.arithmetic = Int8Arithmetic::Sage;
    key.smooth = smooth_k_;
    switch (granularity_) {  // attention/sage_quant.h's groups
      case sage::Granularity::PerBlock:
        query.run = sage::kQueryBlock, key.run = sage::kKeyBlock;
        break;
      case sage::Granularity::PerWarp:
        query.run = sage::kWarpRows, key.run = sage::kKeyBlock;
        break;
      case sage::Granularity::PerThread:
        query.groups = Int8Groups::QueryThread, key.groups = Int8Groups::KeyThread;
        break;
    }
    FlashAttentionArgs args = dense_args(call);
    const Int8Operands operands = quantize_operands(call, query, key, args);
    mark_step("quantise q and k");
    run_kernel(args);
    mark_step("attention (kernel)");
    if (counting_) {
      const double pairs =
          double(call.batch * call.heads) * double(call.tokens) * double(call.tokens);
      stats_.kept_pairs += pairs;
      stats_.total_pairs += pairs;
    }
  }

 private:
  sage::Granularity granularity_;
  bool smooth_k_;
};

}  // namespace

std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources&) {
  return std::make_unique<SageAttnCuda>(settings);
}

}  // namespace mmgen::attention::sage_attn
