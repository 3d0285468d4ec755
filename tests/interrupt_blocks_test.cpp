// Ctrl-C stops a forward between its blocks, not at the end of the step: with a stop asked for,
// the transformer's forward and the VAE decode throw Interrupted before their first block instead
// of finishing (before, both ran to the end and the run stopped only at the next step). A run over
// several GPUs turns the checks off and finishes the forward (its ranks stop together).
#include <gtest/gtest.h>

#include <csignal>

#include "core/interrupt.h"
#include "core/safetensors.h"
#include "models/dit/wan/wan_transformer.h"
#include "models/vae/autoencoder_kl_decoder.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;

// A stop asked for by a real SIGINT through the installed handler; forgotten when it ends.
struct AskedToStop {
  AskedToStop() {
    install_stop_handlers();
    std::raise(SIGINT);
  }
  ~AskedToStop() {
    reset_stop_request();
    set_stop_between_blocks(true);
  }
};

TEST(InterruptBetweenBlocks, TheTransformerForwardStopsBeforeItsNextBlock) {
  MMGEN_REQUIRE_SHARED();
  const fs::path tiny = testing::shared_dir() / "fixtures/wan-tiny";
  dit::WanTransformer model = dit::WanTransformer::load(tiny / "model/transformer");
  const WeightStore reference = WeightStore::open_file(tiny / "reference/reference.safetensors");
  const Tensor latents = reference.get_f32("transformer.hidden_states");
  const Tensor text = reference.get_f32("transformer.encoder_hidden_states");
  const Tensor expected = model.forward(latents, 999.0f, text);
  {
    AskedToStop stop;
    ASSERT_EQ(stop_signal(), SIGINT);
    bool interrupted = false;
    try {
      model.forward(latents, 999.0f, text);
    } catch (const Interrupted& e) {
      interrupted = e.signal_number == SIGINT;
    }
    EXPECT_TRUE(interrupted) << "the forward ran to its end with a stop asked for";
    // Several GPUs: the forward finishes, with the same numbers.
    set_stop_between_blocks(false);
    EXPECT_EQ(testing::max_abs_diff(model.forward(latents, 999.0f, text), expected), 0.0);
  }
  // And the model still runs after a stop (nothing was left half-taken).
  EXPECT_EQ(testing::max_abs_diff(model.forward(latents, 999.0f, text), expected), 0.0);
}

TEST(InterruptBetweenBlocks, TheVaeDecodeStopsBeforeItsNextUpBlock) {
  const auto decoder = vae::AutoencoderKLDecoder::open_folder(testing::source_dir() /
                                                              "tests/fixtures/flux-tiny/model/vae");
  Tensor z = Tensor::zeros({1, decoder.config().latent_channels, 4, 6});
  const Tensor expected = decoder.decode(z);
  AskedToStop stop;
  bool interrupted = false;
  try {
    decoder.decode(z);
  } catch (const Interrupted&) {
    interrupted = true;
  }
  EXPECT_TRUE(interrupted) << "the decode ran to its end with a stop asked for";
  set_stop_between_blocks(false);
  EXPECT_EQ(testing::max_abs_diff(decoder.decode(z), expected), 0.0);
}

}  // namespace
}  // namespace mmgen
