// --vae-tiling (models/vae/tiled_decode.h): the tile layout, the blend weights, and the tiled
// decode against the untiled one: bit-identical when one tile covers the frame, max abs diff
// < 2e-3 with several tiles (in fact about 1e-7: each core sees its full context through the halo).
#include <gtest/gtest.h>

#include "core/random.h"
#include "core/safetensors.h"
#include "models/vae/tiled_decode.h"
#include "tests/test_support.h"

namespace mmgen::vae {
namespace {

namespace fs = std::filesystem;

fs::path tiny_vae() {
  return testing::source_dir() / "examples/models/wan-tiny/vae";
}

TEST(VaeTiling, CoresCoverTheAxisWithTheLastEndingAtTheEdge) {
  EXPECT_EQ(tile_starts(10, {4, 1}), (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(tile_starts(11, {4, 1}), (std::vector<int64_t>{0, 3, 6, 7}));
  EXPECT_EQ(tile_starts(4, {4, 1}), (std::vector<int64_t>{0}));
  EXPECT_EQ(tile_starts(3, {8, 2}), (std::vector<int64_t>{0}));
  EXPECT_NE(testing::error_message([] {
              tile_starts(10, {4, 4});
            }).find("smaller than the tile"),
            std::string::npos);
}

TEST(VaeTiling, RampsAcrossAnExactOverlapSumToOne) {
  const int64_t length = 24, ramp = 8, stride = length - ramp;
  for (int64_t i = 0; i < ramp; ++i) {
    // Pixel stride + i: the end of the first core and the start of the second.
    const float first = blend_weight(stride + i, length, ramp, false, true);
    const float second = blend_weight(i, length, ramp, true, false);
    EXPECT_FLOAT_EQ(first + second, 1.0f) << i;
    EXPECT_GT(first, 0.0f);
    EXPECT_GT(second, 0.0f);
  }
  for (int64_t i = 0; i < length; ++i) EXPECT_EQ(blend_weight(i, length, ramp, false, false), 1.0f);
}

TEST(VaeTiling, TheHaloIsTheTailsReach) {
  // wan-tiny: 4 up blocks of 2 residual blocks: 4 + 0.5 + 2 + 0.25 + 1 + 0.125 + 0.5 + 0.125
  // (conv_out) = 8.5 latent pixels, rounded up, plus one for the upsampling's rounding.
  EXPECT_EQ(WanVaeDecoder::open_folder(tiny_vae()).tail_radius(), 10);
  // Wan2.1's VAE (num_res_blocks 2): 6 + 0.5 + 3 + 0.25 + 1.5 + 0.125 + 0.75 + 0.125 = 12.25.
  WanVaeConfig wan21;
  EXPECT_EQ(wan21.tail_radius(), 14);
}

TEST(VaeTiling, OneTileCoveringTheFrameIsBitIdentical) {
  MMGEN_REQUIRE_SHARED();
  const fs::path fixtures = testing::shared_dir() / "fixtures/wan-tiny";
  const WanVaeDecoder decoder = WanVaeDecoder::open_folder(fixtures / "model/vae");
  const Tensor latents =
      WeightStore::open_file(fixtures / "reference/reference.safetensors").get_f32("vae.latents");
  const Tensor untiled = decoder.decode(latents);
  for (const TileLayout layout : {TileLayout{6, 2}, TileLayout{32, 4}}) {
    const Tensor tiled = decode_tiled(decoder, latents, layout);
    ASSERT_EQ(tiled.shape(), untiled.shape());
    EXPECT_EQ(testing::max_abs_diff(tiled, untiled), 0.0) << layout.tile;
  }
}

TEST(VaeTiling, SeveralTilesStayWithin2e3OfTheUntiledDecode) {
  const WanVaeDecoder decoder = WanVaeDecoder::open_folder(tiny_vae());
  // Two latent frames (5 video frames: each tile carries its own causal caches across frames),
  // 12x40 latents with 10-pixel cores overlapping by 4: 2 x 5 tiles (rows at 0 and 2, columns
  // at 0, 6, 12, 18, 24, 30), and with the 10-pixel halo a column tile decodes at most 30 of the
  // 40 columns: the halo is cropped for real.
  const Tensor latents = decoder.denormalize(randn({1, 16, 2, 12, 40}, 11));
  const Tensor untiled = decoder.decode(latents);
  int calls = 0, last_total = 0;
  const Tensor tiled = decode_tiled(decoder, latents, TileLayout{10, 4}, [&](int done, int total) {
    ++calls;
    EXPECT_EQ(done, calls);
    last_total = total;
  });
  EXPECT_EQ(last_total, 2 * 6 * 2);
  EXPECT_EQ(calls, last_total);
  ASSERT_EQ(tiled.shape(), untiled.shape());
  const double diff = testing::max_abs_diff(tiled, untiled);
  std::printf("tiled (2x6 tiles) vs untiled: max abs diff %.3g\n", diff);
  EXPECT_LT(diff, 2e-3);
  // The tiles are not all the same decode: a tile cut without its halo would differ.
  const Tensor no_halo_column = decoder.decode(latents.slice(4, 24, 40).contiguous());
  EXPECT_GT(testing::max_abs_diff(no_halo_column, untiled.slice(4, 24 * 8, 40 * 8).contiguous()),
            1e-2);
}

}  // namespace
}  // namespace mmgen::vae
