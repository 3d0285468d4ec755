// Seconds per forward and peak memory of a Wan2.1-1.3B-sized transformer (30 layers, 12 heads of
// 128, ffn 8960, text_dim 4096) with random bf16 weights, on the CPU.
//
// The weights are written once to a temporary safetensors file and memory-mapped, exactly as a real
// checkpoint is used. Each case runs in a fresh process (this program re-executed with --run-case)
// so its peak RSS (getrusage ru_maxrss) is its own and not the weight writer's.
//
//   wan_transformer_bench [--repeats N] [--layers N] [--cases 1f480,5f240] [--dir DIR]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "attention/kernels/dense_attention.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/wan/wan_transformer.h"

namespace {

using namespace mmgen;
using mmgen::dit::random_checkpoint;
using mmgen::dit::random_tensor;
using mmgen::dit::WanTransformer;
using mmgen::dit::WanTransformerConfig;
namespace fs = std::filesystem;

struct BenchCase {
  std::string name;
  std::string label;
  Shape latents;
};

const std::vector<BenchCase> kCases = {
    {"1f480", "1 frame 480x832", {1, 16, 1, 60, 104}},
    {"5f240", "5 frames 240x416", {1, 16, 5, 30, 52}},
};
constexpr int64_t kTextTokens = 512;

WanTransformerConfig wan_1_3b_config(int64_t layers) {
  return mmgen::dit::wan21_1_3b_config(layers);
}

// Multiply-add FLOPs (2 per MAC) of one forward: per block the self-attention projections and
// attention (4·N²·D), the cross-attention (q/o on the latents, k/v on the text, 4·N·L·D), and the
// FFN; plus the text embedder and the output head. Elementwise work is left out.
double forward_flops(const WanTransformerConfig& config, int64_t tokens) {
  const double n = double(tokens), l = double(kTextTokens), d = double(config.inner_dim());
  const double f = double(config.ffn_dim), text = double(config.text_dim);
  const double self_attention = 8 * n * d * d + 4 * n * n * d;
  const double cross_attention = 4 * n * d * d + 4 * l * d * d + 4 * n * l * d;
  const double ffn = 4 * n * d * f;
  const double once = 2 * l * text * d + 2 * l * d * d + 2 * n * d * 64;
  return double(config.num_layers) * (self_attention + cross_attention + ffn) + once;
}

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Child process: one case. Prints "RESULT <median s> <min s> <peak rss bytes> <attention s>".
int run_case(const fs::path& weights_file, const BenchCase& bench, int64_t layers, int repeats) {
  WanTransformer model(wan_1_3b_config(layers), WeightStore::open_file(weights_file));
  const WanTransformerConfig& config = model.config();
  Tensor latents = random_tensor(bench.latents, 0.0f, 1.7f, 101, DType::F32);
  Tensor text = random_tensor({1, kTextTokens, config.text_dim}, 0.0f, 0.3f, 102, DType::F32);
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    Tensor out = model.forward(latents, 999.0f, text);
    seconds.push_back(seconds_since(start));
    for (int64_t i = 0; i < out.numel(); ++i)
      if (!std::isfinite(out.data<float>()[i])) fail("non-finite output at {}", i);
    std::fprintf(stderr, "  %s repeat %d: %.2f s\n", bench.name.c_str(), r + 1, seconds.back());
  }
  const double peak = peak_rss_bytes();

  // What the attention kernel alone costs at these shapes (once per layer, self + cross), so the
  // table shows how much of a forward is attention rather than GEMMs.
  const auto [pt, ph, pw] = config.patch_size;
  const int64_t tokens =
      (bench.latents[2] / pt) * (bench.latents[3] / ph) * (bench.latents[4] / pw);
  const int64_t heads = config.num_attention_heads, head_dim = config.attention_head_dim;
  attention::DenseAttentionArgs self_args, cross_args;
  self_args.q = self_args.k = self_args.v =
      random_tensor({1, tokens, heads, head_dim}, 0.0f, 1.0f, 103, DType::F32);
  self_args.scale = cross_args.scale = float(1.0 / std::sqrt(double(head_dim)));
  cross_args.q = self_args.q;
  cross_args.k = cross_args.v =
      random_tensor({1, kTextTokens, heads, head_dim}, 0.0f, 1.0f, 104, DType::F32);
  auto start = std::chrono::steady_clock::now();
  attention::dense_attention(self_args);
  attention::dense_attention(cross_args);
  const double attention_per_forward = seconds_since(start) * double(layers);

  // The yardstick, in the same process right after the forwards: Eigen's float32 GEMM at the shape
  // of the block's projections ([tokens, D] x [D, D]); median of 5.
  const int64_t d = config.inner_dim();
  Tensor a = random_tensor({tokens, d}, 0.0f, 1.0f, 105, DType::F32);
  Tensor w = random_tensor({d, d}, 0.0f, 1.0f, 106, DType::F32);
  Tensor c = Tensor::empty({tokens, d});
  std::vector<double> gemm_seconds;
  for (int r = 0; r < 5; ++r) {
    start = std::chrono::steady_clock::now();
    ops::gemm_bt(a.data<float>(), w.data<float>(), c.data<float>(), tokens, d, d);
    gemm_seconds.push_back(seconds_since(start));
  }
  const double gemm_gflops =
      2.0 * double(tokens) * double(d) * double(d) / median(gemm_seconds) / 1e9;

  std::printf("RESULT %.6f %.6f %.0f %.6f %.3f\n", median(seconds),
              *std::min_element(seconds.begin(), seconds.end()), peak, attention_per_forward,
              gemm_gflops);
  return 0;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int drive(int64_t layers, int repeats, const std::vector<std::string>& wanted, fs::path dir) {
  const WanTransformerConfig config = wan_1_3b_config(layers);
  const bool own_dir = dir.empty();
  if (own_dir) dir = fs::temp_directory_path() / ("mmgen-wan-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path weights_file = dir / "diffusion_pytorch_model.safetensors";
  if (!fs::exists(weights_file)) {
    std::fprintf(stderr, "writing random bf16 weights to %s ...\n", weights_file.c_str());
    const auto start = std::chrono::steady_clock::now();
    write_safetensors(weights_file, random_checkpoint(config), {{"format", "pt"}});
    std::fprintf(stderr, "  done in %.1f s\n", seconds_since(start));
  }
  const double stored = double(WeightStore::open_file(weights_file).stored_bytes());

  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::printf(
      "Wan2.1-1.3B-sized transformer (%lld layers, D %lld, ffn %lld), random bf16 weights, "
      "%d repeat(s), text %lld tokens, OMP_NUM_THREADS=%s\n",
      (long long)layers, (long long)config.inner_dim(), (long long)config.ffn_dim, repeats,
      (long long)kTextTokens,
      std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "(unset)");
  std::printf("stored weights: %.3f GB\n\n", stored / 1e9);
  std::printf(
      "| case | latents | tokens | s/forward (median) | s (min) | attention s (est.) | peak RSS GB "
      "| RSS / weights | forward GFLOP/s | Eigen GEMM GFLOP/s | ratio |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  int status = 0;
  for (const BenchCase& bench : kCases) {
    if (std::find(wanted.begin(), wanted.end(), bench.name) == wanted.end()) continue;
    const std::string command = shell_quote(self) + " --run-case " + bench.name + " --weights " +
                                shell_quote(weights_file.string()) + " --layers " +
                                std::to_string(layers) + " --repeats " + std::to_string(repeats);
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) fail("cannot start {}", command);
    std::string output;
    char buffer[512];
    while (fgets(buffer, sizeof buffer, pipe)) output += buffer;
    const int code = pclose(pipe);
    double med = 0, min = 0, peak = 0, attention_s = 0, gemm_gflops = 0;
    const size_t at = output.find("RESULT ");
    if (code != 0 || at == std::string::npos ||
        std::sscanf(output.c_str() + at, "RESULT %lf %lf %lf %lf %lf", &med, &min, &peak,
                    &attention_s, &gemm_gflops) != 5) {
      std::printf("| %s | failed (exit %d) |\n", bench.label.c_str(), code);
      status = 1;
      continue;
    }
    const int64_t tokens = bench.latents[2] * (bench.latents[3] / 2) * (bench.latents[4] / 2);
    const double gflops = forward_flops(config, tokens) / med / 1e9;
    std::printf("| %s | %s | %lld | %.2f | %.2f | %.2f | %.3f | %.2f | %.1f | %.1f | %.2f |\n",
                bench.label.c_str(), shape_string(bench.latents).c_str(), (long long)tokens, med,
                min, attention_s, peak / 1e9, peak / stored, gflops, gemm_gflops,
                gflops / gemm_gflops);
    std::fflush(stdout);
  }
  if (own_dir) fs::remove_all(dir);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::map<std::string, std::string> options;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string key = argv[i];
      if (key.rfind("--", 0) != 0) fail("unexpected argument '{}'", key);
      options[key.substr(2)] = argv[i + 1];
    }
    if (argc % 2 == 0) fail("options come in pairs: --name value");
    const int64_t layers = options.count("layers") ? std::stoll(options["layers"]) : 30;
    const int repeats = options.count("repeats") ? std::stoi(options["repeats"]) : 2;
    if (options.count("run-case")) {
      for (const BenchCase& bench : kCases)
        if (bench.name == options["run-case"])
          return run_case(options.at("weights"), bench, layers, repeats);
      fail("unknown case '{}'", options["run-case"]);
    }
    std::vector<std::string> wanted;
    std::stringstream list(options.count("cases") ? options["cases"] : "1f480,5f240");
    for (std::string item; std::getline(list, item, ',');) wanted.push_back(item);
    return drive(layers, repeats, wanted,
                 options.count("dir") ? fs::path(options["dir"]) : fs::path());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wan_transformer_bench: %s\n", e.what());
    return 1;
  }
}
