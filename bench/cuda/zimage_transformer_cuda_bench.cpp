// One forward of a Z-Image-Turbo-sized transformer (dim 3840, 30 + 2 + 2 layers, 30 heads x 128,
// cap_feat_dim 2560; random bf16 weights, 6.15B parameters) on the GPU at 1024x1024 (latents
// [16, 1, 128, 128]: 4096 image tokens) with a caption of `--caption` tokens (default 64):
// wall-clock seconds per forward, which is one denoising step at guidance 0 (median of repeats
// after a warm-up, host work included), the peak GPU memory the caching allocator handed out,
// and the bf16 throughput that implies. diffusers takes 0.158 s per step on this request on an
// H100 (../shared/tools/peers/zimage_anchor.py).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "attention/device_attention.h"
#include "core/cuda/device_memory.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/zimage/zimage_random_checkpoint.h"
#include "models/dit/zimage/zimage_transformer.h"

using namespace mmgen;
namespace fs = std::filesystem;

namespace {

// Milliseconds per call of `op` (median of 9, each ended by a one-value download, which waits for
// the GPU).
template <typename Op>
double milliseconds(Op&& op) {
  std::vector<double> times;
  for (int i = 0; i < 10; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const Tensor out = op();
    out.view({-1}).slice(0, 0, 1).to(Device::CPU);
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin() + 1, times.end());
  return times[5];
}

// Where a main block's time goes at this size: each op of run_zimage_block alone, with the
// count per block, so the sum can be set against the measured forward.
void time_block_ops(const dit::ZImageConfig& config, int64_t tokens) {
  const int64_t d = config.dim, ffn = config.ffn_dim(), heads = config.n_heads,
                head_dim = config.head_dim();
  const auto device = [](const Tensor& t) { return t.to(Device::CUDA); };
  const Tensor x = device(dit::random_tensor({tokens, d}, 0.0f, 1.0f, 1, DType::F32));
  const Tensor xb = x.to(DType::BF16);
  const Tensor w_dd = device(dit::random_tensor({d, d}, 0.0f, 0.02f, 2, DType::BF16));
  const Tensor w_fd = device(dit::random_tensor({ffn, d}, 0.0f, 0.02f, 3, DType::BF16));
  const Tensor w_df = device(dit::random_tensor({d, ffn}, 0.0f, 0.02f, 4, DType::BF16));
  const Tensor hidden = device(dit::random_tensor({tokens, ffn}, 0.0f, 1.0f, 5, DType::F32));
  const Tensor norm = device(Tensor::full({d}, 1.0f));
  const Tensor qk_norm = device(Tensor::full({head_dim}, 1.0f));
  const Tensor rope = device(Tensor::full({tokens, head_dim / 2}, 0.5f));
  const Shape heads_shape = {1, tokens, heads, head_dim};
  struct Row {
    const char* what;
    int per_block;
    double ms;
  };
  std::vector<Row> rows;
  const auto gemm_ms = [&](const Tensor& in, const Tensor& w, DType out) {
    return milliseconds([&] { return ops::linear(in, w, Tensor(), out); });
  };
  rows.push_back({"q/k/v projection (bf16 out)", 3, gemm_ms(xb, w_dd, DType::BF16)});
  rows.push_back({"output projection (bf16 out)", 1, gemm_ms(xb, w_dd, DType::BF16)});
  rows.push_back({"w1 / w3 (bf16 out)", 2, gemm_ms(xb, w_fd, DType::BF16)});
  rows.push_back({"w2 (bf16 out)", 1, gemm_ms(hidden.to(DType::BF16), w_df, DType::BF16)});
  rows.push_back({"attention (flash)", 1, milliseconds([&] {
                    return attention::dense_attention_gpu(
                        xb.view(heads_shape), xb.view(heads_shape), xb.view(heads_shape), 0.088f,
                        attention::DenseKernel::Flash);
                  })});
  rows.push_back({"rms_norm (bf16 out)", 2,
                  milliseconds([&] { return ops::rms_norm(x, norm, 1e-5f, DType::BF16); })});
  rows.push_back({"rms_norm_rope_ (q, k)", 2, milliseconds([&] {
                    Tensor q = xb.clone();
                    Tensor view = q.view({tokens * heads, head_dim});
                    ops::rms_norm_rope_(view, qk_norm, 1e-5f, rope, rope, head_dim, heads);
                    return q;
                  })});
  rows.push_back(
      {"  (the clone inside the row above)", -1, milliseconds([&] { return xb.clone(); })});
  rows.push_back({"add_rms_norm_gated_ (bf16 y)", 2, milliseconds([&] {
                    Tensor y = x.clone();
                    ops::add_rms_norm_gated_(y, xb, norm, 1e-5f, norm);
                    return y;
                  })});
  rows.push_back(
      {"  (the clone inside the row above)", -1, milliseconds([&] { return x.clone(); })});
  const Tensor hidden_bf16 = hidden.to(DType::BF16);
  rows.push_back({"silu_mul on [tokens, ffn] bf16", 1, milliseconds([&] {
                    return ops::silu_mul(hidden_bf16, hidden_bf16, DType::BF16);
                  })});
  // The float32 feed-forward tail silu_mul replaced, for comparison (not in the sum).
  double total = 0;
  std::printf("one main block's ops alone at %lld tokens (ms per call x calls per block):\n",
              (long long)tokens);
  for (const Row& row : rows) {
    std::printf("  %-38s %8.3f x %d\n", row.what, row.ms, row.per_block);
    total += row.ms * row.per_block;
  }
  std::printf("  sum per block %.2f ms; x %lld blocks = %.1f ms\n", total,
              (long long)config.n_layers, total * double(config.n_layers));
}

}  // namespace

int main(int argc, char** argv) try {
  int repeats = 5;
  int64_t caption_tokens = 64, side = 1024;
  bool breakdown = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats") repeats = std::stoi(argv[i + 1]);
    if (flag == "--caption") caption_tokens = std::stoll(argv[i + 1]);
    if (flag == "--side") side = std::stoll(argv[i + 1]);
    if (flag == "--breakdown") breakdown = std::string(argv[i + 1]) == "1";
  }
  const dit::ZImageConfig config = dit::ZImageConfig::from_json(nlohmann::json::object());
  const fs::path file = fs::temp_directory_path() / "mmgen_zimage_turbo_random.safetensors";
  if (!fs::exists(file))
    write_safetensors(file, dit::zimage_random_checkpoint(config), {{"format", "pt"}});
  dit::ZImageTransformer gpu(config, WeightStore::open_file(file));
  const auto load_start = std::chrono::steady_clock::now();
  gpu.set_device(Device::CUDA);
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();

  const int64_t latent_side = side / 8;
  const Tensor latents =
      dit::random_tensor({16, 1, latent_side, latent_side}, 0.0f, 1.0f, 101, DType::F32);
  const Tensor caption =
      dit::random_tensor({caption_tokens, config.cap_feat_dim}, 0.0f, 1.0f, 102, DType::F32);
  const int64_t image_tokens = (latent_side / 2) * (latent_side / 2);
  const int64_t caption_padded = (caption_tokens + 31) / 32 * 32;
  const int64_t joint = image_tokens + caption_padded;
  // Products: 4·d² (attention projections) + 3·d·ffn (SwiGLU) per token per block; attention:
  // 4·tokens²·d per block. Refiners run over their own part only.
  const double d = double(config.dim), ffn = double(config.ffn_dim());
  const auto block_flops = [&](double tokens) {
    return 2.0 * tokens * (4 * d * d + 3 * d * ffn) + 4.0 * tokens * tokens * d;
  };
  const double flops = double(config.n_layers) * block_flops(double(joint)) +
                       double(config.n_refiner_layers) * (block_flops(double(image_tokens)) +
                                                          block_flops(double(caption_padded)));

  std::printf(
      "Z-Image-Turbo-sized transformer, %lldx%lld (%lld image tokens), %lld caption tokens\n",
      (long long)side, (long long)side, (long long)image_tokens, (long long)caption_tokens);
  std::printf("weights on GPU: %.2f GiB (uploaded in %.1f s)\n",
              gpu.resident_weight_bytes() / double(1 << 30), load_seconds);
  std::vector<Tensor> out = gpu.forward({{latents, caption, 0.1f}});  // warm-up
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    out = gpu.forward({{latents, caption, 0.1f + 0.1f * float(i)}});
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  double sum_abs = 0;
  for (int64_t i = 0; i < out[0].numel(); ++i) sum_abs += std::abs(out[0].data<float>()[i]);
  const double median = seconds[seconds.size() / 2];
  std::printf(
      "forward (one step at guidance 0): median %.4f s, min %.4f s, max %.4f s over %d "
      "repeats; %.1f TFLOP, %.0f TFLOP/s\n",
      median, seconds.front(), seconds.back(), repeats, flops / 1e12, flops / median / 1e12);
  std::printf("peak GPU memory (allocator): %.2f GiB; output mean |x| %.4f\n",
              cuda::CachingAllocator::instance().peak_bytes_in_use() / double(1 << 30),
              sum_abs / double(out[0].numel()));
  if (breakdown) time_block_ops(config, joint);
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "zimage_transformer_cuda_bench: %s\n", error.what());
  return 1;
}
