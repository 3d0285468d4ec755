// sage_attn on the GPU: SageAttention's dense attention with INT8 Q·Kᵀ. q and k are quantised on
// the device exactly as the CPU backend quantises them (attention/kernels/sage_attention.cpp: K
// smoothed by its mean over tokens, one scale per group of rows at the chosen granularity;
// int8_quantize.h), then the Hopper kernel runs every key block with wgmma s8 scores, dequantised
// per row and key group. P·V is, by pv_dtype:
// - fp8 (the default, SageAttention2's on Hopper): V in e4m3 with one scale per channel
//   (fp8_values.h), P in e4m3 scaled by 448, each tile's product added in float32;
// - bf16: the bf16 P·V of `fa`. The integer products equal the CPU's, so the two then differ by
//   the float rounding after them (the softmax, bf16 P and output).
// The CPU backend's P·V is float32 either way.
#include "attention/backends/sage_attn/sage_attn_cuda.h"

#include "attention/cuda/fp8_values.h"
#include "attention/kernels/sage_attention.h"
#include "core/error.h"

namespace mmgen::attention::sage_attn {

namespace {

using namespace mmgen::cuda;

class SageAttnCuda final : public SparseSelfAttentionCuda {
 public:
  explicit SageAttnCuda(const nlohmann::json& settings)
      : granularity_(sage::parse_granularity(settings.at("qk_quant_gran").get<std::string>())),
        smooth_k_(settings.at("smooth_k").get<bool>()),
        fp8_values_(settings.at("pv_dtype").get<std::string>() == "fp8") {}

  std::string_view name() const override { return "sage_attn"; }
  // Every scale and K's mean are per batch element; nothing is kept between calls.
  bool batch_elements_alone() const override { return true; }

  void run(const SelfAttentionCall& call) override {
    check(flash_attention_supports_head_dim(call.head_dim),
          "sage_attn on the GPU: head size {} is not compiled in (64 and 128 are); use --device "
          "cpu",
          call.head_dim);
    start_steps();
    Int8QuantizeArgs query, key;
    query.arithmetic = key.arithmetic = Int8Arithmetic::Sage;
    key.smooth = smooth_k_;
    switch (granularity_) {  // attention/kernels/sage_quant.h's groups
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
    DeviceBuffer values, value_scales;
    if (fp8_values_) {
      const int64_t keys = fp8_value_keys(call.tokens);
      values = DeviceBuffer(size_t(call.batch * call.heads * call.head_dim * keys));
      value_scales = DeviceBuffer(size_t(call.batch * call.heads * call.head_dim) * 4);
      Fp8ValuesArgs fp8;
      fp8.v = call.v, fp8.strides = args.v_strides;
      fp8.batch = call.batch, fp8.seq = call.tokens, fp8.heads = call.heads;
      fp8.head_dim = call.head_dim;
      fp8.out = values.as<uint8_t>(), fp8.scales = value_scales.as<float>();
      fp8_quantize_values(fp8);
      args.v = values.data(), args.v_scales = value_scales.as<float>(), args.v_keys = keys;
      mark_step("quantise v (e4m3)");
    }
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
  bool fp8_values_;  // pv_dtype fp8
};

}  // namespace

std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources&) {
  return std::make_unique<SageAttnCuda>(settings);
}

}  // namespace mmgen::attention::sage_attn
