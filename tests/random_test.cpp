#include "core/random.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/safetensors.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

// FNV-1a over the tensor's float32 bytes: equal only when every bit of every value is equal.
uint64_t fnv1a(const Tensor& t) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(t.data<float>());
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0; i < size_t(t.numel()) * sizeof(float); ++i) {
    hash ^= bytes[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

double sum_of(const Tensor& t) {
  double sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) sum += t.data<float>()[i];
  return sum;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(Random, MatchesFixtureSeedsBitForBit) {
  MMGEN_REQUIRE_SHARED();
  SafetensorsFile ref = SafetensorsFile::open(testing::shared_dir() /
                                              "fixtures/wan-tiny/reference/reference.safetensors");
  for (uint64_t seed : {0u, 42u, 1234u}) {
    Tensor expected = ref.tensor("rng.cpu.seed" + std::to_string(seed));
    Tensor ours = randn({1, 16, 2, 4, 6}, seed);
    EXPECT_TRUE(bitwise_equal(ours, expected))
        << "seed " << seed << ": relative error " << testing::relative_error(ours, expected);
  }
}

// Reference values from python torch 2.15.0 (CPU, AVX2):
//   t = torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed))
// `hash` is FNV-1a (64-bit) over t's float32 bytes in order, `sum` the float64 sum of its values,
// `values` a few elements printed with repr(float(t.view(-1)[i])). Sizes below 16 take torch's
// element-wise double Box-Muller; 16 and above the blocked float path, with its recomputed tail
// when the size is not a multiple of 16.
struct RandnCase {
  Shape shape;
  uint64_t seed;
  uint64_t hash;
  double sum;
  std::vector<std::pair<int64_t, float>> values;
};

const std::vector<RandnCase> kCases = {
    {{1}, 0u, 0xc2f39b9efb475d82ull, 1.5409960746765137, {{0, 1.5409960746765137f}}},
    {{2},
     5u,
     0x4c41d42a8a6039efull,
     -1.0906023383140564,
     {{0, -0.4867807626724243f}, {1, -0.6038215756416321f}}},
    {{3},
     42u,
     0x9f83cc132fdfc390ull,
     0.6999621391296387,
     {{0, 0.33669036626815796f}, {1, 0.12880940735340118f}, {2, 0.23446236550807953f}}},
    {{7},
     1234u,
     0xfc06921517097f19ull,
     -0.22395312786102295,
     {{0, 0.0461304634809494f},
      {1, 0.4024028182029724f},
      {3, 0.2167382389307022f},
      {6, 0.23096680641174316f}}},
    {{15},
     3u,
     0x0cf88d0cc30d1f43ull,
     1.6356667689979076,
     {{0, 0.8032760620117188f},
      {1, 0.17483338713645935f},
      {7, 1.0111159086227417f},
      {14, 0.41921865940093994f}}},
    {{16},
     0u,
     0x4f72e4bd09f40ed8ull,
     -1.909114308655262,
     {{0, -1.1258398294448853f},
      {1, -1.152360200881958f},
      {8, 0.32227492332458496f},
      {15, -0.2472781538963318f}}},
    {{17},
     42u,
     0x8988c698184a0d58ull,
     8.21729576587677,
     {{0, 1.9269152879714966f},
      {1, -0.1595974713563919f},
      {8, 0.3558599054813385f},
      {16, -0.3097267746925354f}}},
    {{31},
     7u,
     0x197c34d536f41b79ull,
     2.6039004493504763,
     {{0, -0.8201345205307007f},
      {1, 0.39563116431236267f},
      {15, 0.5035638809204102f},
      {30, 0.501121461391449f}}},
    {{33},
     1234u,
     0x9dd0ca255fcb6d9full,
     -6.309107036329806,
     {{0, -0.1117185652256012f},
      {1, -0.49659010767936707f},
      {16, 0.7988325953483582f},
      {32, -0.685702383518219f}}},
    {{100},
     9u,
     0x84a50acb763f729full,
     -5.718041628599167,
     {{0, -1.067394733428955f},
      {1, -0.71724534034729f},
      {50, 1.5924148559570312f},
      {99, -0.6201575994491577f}}},
    {{1000},
     2024u,
     0x6e6f2006513e2936ull,
     34.627642310471856,
     {{0, -1.2262355089187622f},
      {1, -0.009314819239079952f},
      {500, -0.33119308948516846f},
      {999, 0.9738866090774536f}}},
    {{3, 5, 7},
     11u,
     0x54a4b641be347b4cull,
     3.9936495581641793,
     {{0, -0.5107975602149963f},
      {1, 1.0282717943191528f},
      {52, 0.528063952922821f},
      {104, 0.38899874687194824f}}},
    // wan-shapes' default latent.
    {{1, 16, 1, 16, 16},
     0u,
     0x052d1976c90a3bf9ull,
     -39.44626941473689,
     {{0, -1.1258398294448853f},
      {1, -1.152360200881958f},
      {2048, 0.6656972765922546f},
      {4095, 0.6019821166992188f}}},
    {{1, 16, 1, 16, 16},
     42u,
     0x0f9ee61640968cf0ull,
     -4.412261032732204,
     {{0, 1.9269152879714966f},
      {1, 1.4872840642929077f},
      {2048, -0.6002296209335327f},
      {4095, -0.011842876672744751f}}},
};

TEST(Random, MatchesTorchForManySizes) {
  for (const RandnCase& c : kCases) {
    SCOPED_TRACE(shape_string(c.shape) + " seed " + std::to_string(c.seed));
    Tensor t = randn(c.shape, c.seed);
    ASSERT_EQ(t.shape(), c.shape);
    ASSERT_EQ(t.dtype(), DType::F32);
    for (const auto& [index, value] : c.values) EXPECT_EQ(t.data<float>()[index], value) << index;
    EXPECT_EQ(fnv1a(t), c.hash);
    EXPECT_NEAR(sum_of(t), c.sum, 1e-9 * (1 + std::abs(c.sum)));
  }
}

// One generator, three calls: g = torch.Generator("cpu").manual_seed(77); torch.randn([5], ...),
// torch.randn([20], ...), torch.randn([3], ...). The odd first call leaves a cached second
// Box-Muller value in the generator that the third (element-wise) call starts with.
TEST(Random, GeneratorContinuesOneStream) {
  TorchCpuGenerator g(77);
  Tensor a = g.randn({5});
  Tensor b = g.randn({20});
  Tensor c = g.randn({3});
  EXPECT_EQ(fnv1a(a), 0xe05f952a6a690768ull);
  EXPECT_EQ(fnv1a(b), 0x00085fc777317faaull);
  EXPECT_EQ(fnv1a(c), 0xb58127860ee0674full);
  EXPECT_EQ(a.data<float>()[4], 0.9086558818817139f);
  EXPECT_EQ(b.data<float>()[19], -0.5551879405975342f);
  EXPECT_EQ(c.data<float>()[0], -1.6423312425613403f);
}

// A full-size Wan 480p latent (2,096,640 values, the OpenMP-parallel path), same recipe as above:
// torch.randn([1, 16, 21, 60, 104], generator=torch.Generator("cpu").manual_seed(31337)).
TEST(Random, MatchesTorchForA480pLatent) {
  Tensor t = randn({1, 16, 21, 60, 104}, 31337);
  EXPECT_EQ(fnv1a(t), 0x51ebb5ddc2548d40ull);
  EXPECT_EQ(t.data<float>()[1048576], 1.1200639009475708f);
  EXPECT_EQ(t.data<float>()[t.numel() - 1], 0.4023255407810211f);
}

TEST(Random, EmptyShapeAndZeroSize) {
  EXPECT_EQ(randn({0, 4}, 1).numel(), 0);
  EXPECT_EQ(randn({}, 1).numel(), 1);  // a scalar, like torch.randn([])
}

}  // namespace
}  // namespace mmgen
