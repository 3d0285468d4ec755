// `mmgen attention` end to end: small .npy inputs, each dense backend, the output checked against
// the dense reference; sparse backends (grid, text length, backend config, --gate with
// --attention-input, --proj) checked against the library call with the same context; the printed
// timing and block counts, and one-line errors.
#include <gtest/gtest.h>

#include <random>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/backends/video_sparse_attn/vsa_gate.h"
#include "attention/kernels/dense_attention.h"
#include "core/npy.h"
#include "test_support.h"

namespace mmgen {
namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

struct Inputs {
  fs::path dir;
  Tensor q, k, v;
  std::string flags() const {
    return " --q " + (dir / "q.npy").string() + " --k " + (dir / "k.npy").string() + " --v " +
           (dir / "v.npy").string();
  }
};

Inputs write_inputs(const std::string& name, int64_t q_len, int64_t kv_len) {
  Inputs in{testing::scratch_dir(name), random_tensor({1, q_len, 2, 64}, 1),
            random_tensor({1, kv_len, 2, 64}, 2), random_tensor({1, kv_len, 2, 64}, 3)};
  write_npy(in.dir / "q.npy", in.q);
  write_npy(in.dir / "k.npy", in.k);
  write_npy(in.dir / "v.npy", in.v);
  return in;
}

TEST(AttentionCommand, DenseBackendsMatchTheReference) {
  const Inputs in = write_inputs("attention-cmd", 2 * 4 * 6, 2 * 4 * 6);
  attention::DenseAttentionArgs args;
  args.q = in.q;
  args.k = in.k;
  args.v = in.v;
  args.scale = 0.125f;
  const Tensor expected = attention::dense_attention(args);
  for (const char* backend : {"fa", "torch_sdpa", "FA3"}) {
    const fs::path out = in.dir / (std::string(backend) + ".npy");
    const auto result = testing::run_command(
        testing::mmgen_binary().string() + " attention --backend " + backend + in.flags() +
        " --grid 2,4,6 --step 1 --num-steps 4 --layer 2 --repeat 3 --out " + out.string());
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_LT(testing::relative_error(read_npy(out), expected), 2e-6) << backend;
    EXPECT_NE(result.out.find(" ms (3 runs, median)"), std::string::npos) << result.out;
    EXPECT_NE(result.out.find("(100.0%)"), std::string::npos) << result.out;
  }
}

// What `mmgen attention` should produce: the backend built from the same validated settings and
// called with the same context; returns the output and the "visited X of Y (Z%)" text.
std::pair<Tensor, std::string> library_call(const std::string& backend,
                                            const nlohmann::json& settings, const Inputs& in,
                                            std::array<int64_t, 3> grid, int64_t text_length,
                                            const attention::LayerWeights& weights) {
  auto instance =
      attention::make_dit_backend(backend, attention::validate_backend_config(settings, backend));
  attention::LayerState state;
  attention::AttentionContext context;
  context.grid = grid;
  context.text_length = text_length;
  context.weights = &weights;
  context.state = &state;
  attention::AttentionStats stats;
  const Tensor out = instance->forward(in.q, in.k, in.v, 0.125f, context, &stats);
  char text[128];
  std::snprintf(text, sizeof text, "visited %lld of %lld (%.1f%%)", (long long)stats.visited_blocks,
                (long long)stats.total_blocks, 100.0 * stats.density());
  return {out, text};
}

TEST(AttentionCommand, SparseBackendsMatchTheLibraryCall) {
  // 2x4x6 video tokens plus 4 text tokens, 2 heads of 64.
  const Inputs in = write_inputs("attention-cmd-sparse", 52, 52);
  const std::string binary = testing::mmgen_binary().string() + " attention";
  {  // SVG2: grid + text length + settings; text tokens are the extra cluster.
    const fs::path out = in.dir / "svg2.npy";
    const auto result =
        testing::run_command(binary +
                             " --backend sparse_video_gen_2_attn --attention-backend-config "
                             "num_q_centroids=4,num_k_centroids=6,top_p_kmeans=0.5,min_kc_ratio=0,"
                             "first_times_fp=0,first_layers_fp=0" +
                             in.flags() + " --grid 2,4,6 --text-len 4 --out " + out.string());
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const auto [expected, visited] = library_call("sparse_video_gen_2_attn",
                                                  {{"num_q_centroids", 4},
                                                   {"num_k_centroids", 6},
                                                   {"top_p_kmeans", 0.5},
                                                   {"min_kc_ratio", 0},
                                                   {"first_times_fp", 0},
                                                   {"first_layers_fp", 0}},
                                                  in, {2, 4, 6}, 4, {});
    EXPECT_LT(testing::max_abs_diff(read_npy(out), expected), 1e-6);
    EXPECT_NE(result.out.find(visited), std::string::npos) << result.out << " vs " << visited;
    EXPECT_EQ(result.out.find("(100.0%)"), std::string::npos) << "should be sparse";
  }
  // VSA with --gate W and --attention-input X: the gate is X·Wᵀ per head.
  const Tensor gate_weight = random_tensor({128, 128}, 7),
               attention_input = random_tensor({1, 48, 128}, 8);
  const Inputs video = write_inputs("attention-cmd-vsa", 48, 48);
  write_npy(video.dir / "w.npy", gate_weight);
  write_npy(video.dir / "x.npy", attention_input);
  {
    const fs::path out = video.dir / "vsa.npy";
    const auto result = testing::run_command(
        binary + " --backend video_sparse_attn --attention-backend-config sparsity=0.5" +
        video.flags() + " --grid 2,4,6 --gate " + (video.dir / "w.npy").string() +
        " --attention-input " + (video.dir / "x.npy").string() + " --out " + out.string());
    ASSERT_EQ(result.exit_code, 0) << result.err;
    attention::LayerWeights projection = {{"to_gate_compress.weight", gate_weight},
                                          {"to_gate_compress.bias", Tensor::zeros({128})}};
    const attention::LayerWeights weights = {
        {attention::kVsaGateKey, attention::vsa_gate(projection, attention_input, 2)}};
    const auto [expected, visited] =
        library_call("video_sparse_attn", {{"sparsity", 0.5}}, video, {2, 4, 6}, 0, weights);
    EXPECT_LT(testing::max_abs_diff(read_npy(out), expected), 1e-6);
    EXPECT_NE(result.out.find(visited), std::string::npos) << result.out << " vs " << visited;
    // The gate matters: without it the output is the fine branch alone.
    const auto [ungated, unused] =
        library_call("video_sparse_attn", {{"sparsity", 0.5}}, video, {2, 4, 6}, 0, {});
    EXPECT_GT(testing::max_abs_diff(expected, ungated), 1e-3);
  }
  {  // SLA with --proj: the linear branch through proj_l.
    const Tensor proj = random_tensor({64, 64}, 9);
    write_npy(video.dir / "p.npy", proj);
    const fs::path out = video.dir / "sla.npy";
    const auto result = testing::run_command(
        binary + " --backend sla_attn --attention-backend-config topk=0.5" + video.flags() +
        " --proj " + (video.dir / "p.npy").string() + " --out " + out.string());
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const attention::LayerWeights weights = {{"proj_l.weight", proj},
                                             {"proj_l.bias", Tensor::zeros({64})}};
    const auto [expected, visited] =
        library_call("sla_attn", {{"topk", 0.5}}, video, {0, 0, 0}, 0, weights);
    EXPECT_LT(testing::max_abs_diff(read_npy(out), expected), 1e-6);
    EXPECT_NE(result.out.find(visited), std::string::npos) << result.out << " vs " << visited;
    const auto [without, unused] =
        library_call("sla_attn", {{"topk", 0.5}}, video, {0, 0, 0}, 0, {});
    EXPECT_GT(testing::max_abs_diff(expected, without), 1e-3);
  }
  // --gate and --proj are refused where they mean nothing, and --gate needs the input.
  const std::string out = " --out " + (video.dir / "o.npy").string();
  const std::string w = " --gate " + (video.dir / "w.npy").string();
  for (const auto& [arguments, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--backend fa" + video.flags() + out + w, "--gate is for video_sparse_attn"},
           {"--backend video_sparse_attn" + video.flags() + out + w, "--gate needs"},
           {"--backend fa" + video.flags() + out + " --proj " + (video.dir / "w.npy").string(),
            "--proj is for sla_attn"},
           {"--backend video_sparse_attn" + video.flags() + out + w + " --attention-input " +
                (video.dir / "w.npy").string(),
            "--attention-input is [128, 128]"}}) {
    const auto result = testing::run_command(binary + " " + arguments);
    EXPECT_NE(result.exit_code, 0) << arguments;
    EXPECT_NE(result.err.find(expected), std::string::npos) << arguments << " -> " << result.err;
  }
}

TEST(AttentionCommand, HelpAndErrors) {
  auto result = testing::run_command(testing::mmgen_binary().string() + " attention --help");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("--backend NAME"), std::string::npos) << result.out;
  const Inputs in = write_inputs("attention-cmd-errors", 10, 12);
  const std::string out = " --out " + (in.dir / "o.npy").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--backend zzz" + in.flags() + out, "unknown attention backend 'zzz'"},
      {"--backend triton" + in.flags() + out, "not a DiT attention backend"},
      {"--backend fa --q " + (in.dir / "q.npy").string() + out, "--k is required"},
      {"--backend fa" + in.flags() + out + " --grid 2,3", "--grid expects"},
      {"--backend fa" + in.flags() + out + " --grid 1,2,3", "does not match 10 queries"},
      {"--backend fa" + in.flags() + out + " --bogus 1", "unknown flag --bogus"},
      {"--backend fa" + in.flags() + out + " --step 4 --num-steps 4", "--step 4 is outside"},
      {"--backend torch_sdpa --attention-backend-config sparsity=0.5" + in.flags() + out,
       "takes no settings"},
  };
  for (const auto& [arguments, expected] : cases) {
    result = testing::run_command(testing::mmgen_binary().string() + " attention " + arguments);
    EXPECT_NE(result.exit_code, 0) << arguments;
    EXPECT_NE(result.err.find(expected), std::string::npos) << arguments << " -> " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
}

}  // namespace
}  // namespace mmgen
