// `mmgen attention` end to end: small .npy inputs, each dense backend, the output checked against
// the dense reference, the printed timing and block counts, and one-line errors.
#include <gtest/gtest.h>

#include <random>

#include "attention/dense_attention.h"
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

TEST(AttentionCommand, HelpAndErrors) {
  auto result = testing::run_command(testing::mmgen_binary().string() + " attention --help");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("--backend NAME"), std::string::npos) << result.out;
  const Inputs in = write_inputs("attention-cmd-errors", 10, 12);
  const std::string out = " --out " + (in.dir / "o.npy").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--backend zzz" + in.flags() + out, "not a DiT attention backend"},
      {"--backend fa --q " + (in.dir / "q.npy").string() + out, "--k is required"},
      {"--backend fa" + in.flags() + out + " --grid 2,3", "--grid expects"},
      {"--backend fa" + in.flags() + out + " --grid 1,2,3", "does not match 10 queries"},
      {"--backend fa" + in.flags() + out + " --bogus 1", "unknown option --bogus"},
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
