// --vae-tiling for Z-Image's AutoencoderKL (models/vae/autoencoder_kl_tiled_decode.h) on the
// zimage-tiny fixture: the tail's radius, one tile == the untiled decode bit for bit, several
// tiles close to it (not exact: the tail's GroupNorms see a tile's region, not the plane; the
// bounds below are the measured differences with about 2x headroom), the output's extent, the
// halo's effect, and the one-line refusals.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/random.h"
#include "core/safetensors.h"
#include "models/vae/autoencoder_kl_tiled_decode.h"
#include "tests/test_support.h"

namespace mmgen::vae {
namespace {

fs::path fixture() {
  return testing::shared_dir() / "fixtures/zimage-tiny";
}

AutoencoderKLDecoder tiny_decoder() {
  return AutoencoderKLDecoder::open_folder(fixture() / "model/vae");
}

TEST(AutoencoderKLTiling, TheHaloIsTheTailsReach) {
  // FLUX's VAE (Z-Image's): 4 levels of 3 resnets: 6 + 0.5 + 3 + 0.25 + 1.5 + 0.125 + 0.75 +
  // 0.125 (conv_out) = 12.25 latent pixels, rounded up, plus one for the upsampling's rounding.
  EXPECT_EQ(decoder_tail_radius(4, 3), 14);
  MMGEN_REQUIRE_SHARED();
  // zimage-tiny: 2 levels of 2 resnets (layers_per_block 1): 4 + 0.5 + 2 + 0.5 = 7, plus one.
  EXPECT_EQ(tiny_decoder().tail_radius(), 8);
}

TEST(AutoencoderKLTiling, HeadThenTailIsTheDecode) {
  MMGEN_REQUIRE_SHARED();
  const AutoencoderKLDecoder decoder = tiny_decoder();
  const Tensor latents =
      WeightStore::open_file(fixture() / "reference/reference.safetensors").get_f32("vae.latents");
  const Tensor head = decoder.head(latents);
  EXPECT_EQ(head.shape(), (Shape{1, 32, 16, 24}));
  EXPECT_EQ(testing::max_abs_diff(decoder.tail(head), decoder.decode(latents)), 0.0);
}

TEST(AutoencoderKLTiling, OneTileCoveringThePlaneIsBitIdentical) {
  MMGEN_REQUIRE_SHARED();
  const AutoencoderKLDecoder decoder = tiny_decoder();
  const Tensor latents =
      WeightStore::open_file(fixture() / "reference/reference.safetensors").get_f32("vae.latents");
  const Tensor untiled = decoder.decode(latents);
  // 16x24 latents: a 24-pixel tile covers the plane, as does any larger one.
  for (const TileLayout layout : {TileLayout{24, 4}, TileLayout{64, 16}}) {
    int calls = 0;
    const Tensor tiled = decode_tiled(decoder, latents, layout, [&](int done, int total) {
      EXPECT_EQ(done, ++calls);
      EXPECT_EQ(total, 1);
    });
    EXPECT_EQ(calls, 1);
    ASSERT_EQ(tiled.shape(), untiled.shape());
    EXPECT_EQ(testing::max_abs_diff(tiled, untiled), 0.0) << layout.tile;
  }
}

// Several tiles: each tile's GroupNorm statistics come from its region (core plus an 8-pixel
// halo), not from the plane, so the result is close to the untiled decode but not equal to it.
// Measured (outputs of order 1): 0.112 max abs, 5.2% relative error for random latents and 0.083,
// 4.7% for the fixture's denoised ones, with these small tiles; the bounds are about 1.5x that.
TEST(AutoencoderKLTiling, SeveralTilesStayCloseToTheUntiledDecode) {
  MMGEN_REQUIRE_SHARED();
  const AutoencoderKLDecoder decoder = tiny_decoder();
  const WeightStore reference =
      WeightStore::open_file(fixture() / "reference/reference.safetensors");
  struct Case {
    const char* name;
    Tensor latents;
    TileLayout layout;
    int tiles;
    double max_bound, relative_bound;
  };
  // 28x44 random latents with 8-pixel cores overlapping by 2: rows at 0, 6, 12, 18, 20, columns
  // at 0, 6, ..., 30, 36: 5 x 7 tiles, each region at most 24 of the 44 columns: the halo is
  // cropped for real. The fixture's 16x24 latents with 6-pixel cores overlapping by 2: 4 x 6.
  const std::vector<Case> cases = {
      {"random latents", decoder.denormalize(randn({1, 16, 28, 44}, 5)), TileLayout{8, 2}, 35, 0.17,
       0.08},
      {"denoised latents", decoder.denormalize(reference.get_f32("pipeline.latents_after_step3")),
       TileLayout{6, 2}, 24, 0.13, 0.07}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor untiled = decoder.decode(c.latents);
    int last_total = 0;
    const Tensor tiled =
        decode_tiled(decoder, c.latents, c.layout, [&](int, int total) { last_total = total; });
    EXPECT_EQ(last_total, c.tiles);
    ASSERT_EQ(tiled.shape(), untiled.shape());
    EXPECT_EQ(tiled.shape(), (Shape{1, 3, c.latents.size(2) * 2, c.latents.size(3) * 2}));
    const double diff = testing::max_abs_diff(tiled, untiled);
    const double relative = testing::relative_error(tiled, untiled);
    std::printf("%s, %d tiles: max abs diff %.3g, relative error %.3g\n", c.name, c.tiles, diff,
                relative);
    EXPECT_GT(diff, 0.0);  // the GroupNorms do see the tiles
    EXPECT_LT(diff, c.max_bound);
    EXPECT_LT(relative, c.relative_bound);
    // A core decoded without its halo (its own statistics, and zero padding at the cut) is much
    // further from the untiled decode than the tiled result is: measured 0.78 and 0.95.
    const int64_t w = c.latents.size(3);
    const Tensor no_halo = decoder.decode(c.latents.slice(3, w - c.layout.tile, w).contiguous());
    const double cut = testing::max_abs_diff(
        no_halo, untiled.slice(3, (w - c.layout.tile) * 2, w * 2).contiguous());
    std::printf("%s: the last column's core alone, without halo: max abs diff %.3g\n", c.name, cut);
    EXPECT_GT(cut, 4 * diff);
  }
}

// Larger tiles give the GroupNorms more of the plane: the difference shrinks with the tile.
// Measured on 48x48 random latents: relative error 5.6%, 3.6%, 1.6% with 8-, 16- and 32-pixel
// cores (max abs 0.15, 0.096, 0.036).
TEST(AutoencoderKLTiling, LargerTilesComeCloser) {
  MMGEN_REQUIRE_SHARED();
  const AutoencoderKLDecoder decoder = tiny_decoder();
  const Tensor latents = decoder.denormalize(randn({1, 16, 48, 48}, 7));
  const Tensor untiled = decoder.decode(latents);
  std::vector<double> errors;
  for (const TileLayout layout : {TileLayout{8, 2}, TileLayout{16, 4}, TileLayout{32, 8}}) {
    const Tensor tiled = decode_tiled(decoder, latents, layout);
    ASSERT_EQ(tiled.shape(), untiled.shape());
    errors.push_back(testing::relative_error(tiled, untiled));
    std::printf("%ld-pixel cores: max abs diff %.3g, relative error %.3g\n", layout.tile,
                testing::max_abs_diff(tiled, untiled), errors.back());
  }
  EXPECT_LT(errors[1], errors[0]);
  EXPECT_LT(errors[2], errors[1]);
  EXPECT_LT(errors[2], 0.03);
}

TEST(AutoencoderKLTiling, RefusesBadInputInOneLine) {
  MMGEN_REQUIRE_SHARED();
  const AutoencoderKLDecoder decoder = tiny_decoder();
  for (const auto& [action, expected] : std::vector<std::pair<std::function<void()>, std::string>>{
           {[&] {
              decode_tiled(decoder, randn({1, 16, 8, 8}, 1), TileLayout{4, 4});
            },
            "must be smaller than the tile"},
           {[&] {
              decode_tiled(decoder, randn({1, 4, 8, 8}, 1), TileLayout{4, 1});
            },
            "expected latents [batch, 16, height, width]"}}) {
    const std::string message = testing::error_message(action);
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace mmgen::vae
