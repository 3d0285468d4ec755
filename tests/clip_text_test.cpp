// FLUX.1's text path against transformers (flux-tiny fixture, tests/fixtures/make_flux_tiny.py):
// the CLIPTokenizer folder (vocab.json + merges.txt, no tokenizer.json) and CLIPTextModel, and
// the T5 encoder and T5TokenizerFast of `text_encoder_2` / `tokenizer_2`, as FluxPipeline calls
// them (no attention masks).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention/paged/paged_backend.h"
#include "core/error.h"
#include "core/file.h"
#include "core/safetensors.h"
#include "models/text_encoders/clip_text_model.h"
#include "models/text_encoders/umt5_encoder.h"
#include "tests/test_support.h"
#include "text/clip_bpe_folder.h"
#include "text/nfc_lowercase.h"
#include "text/tokenizer.h"

namespace mmgen::text_encoders {
namespace {

constexpr size_t kClipLength = 77;

fs::path flux_tiny() {
  return testing::source_dir() / "tests/fixtures/flux-tiny";
}
fs::path model_dir() {
  return flux_tiny() / "model";
}

SafetensorsFile reference() {
  return SafetensorsFile::open(flux_tiny() / "reference" / "reference.safetensors");
}

nlohmann::json info() {
  return nlohmann::json::parse(read_text_file(flux_tiny() / "reference" / "reference.json"));
}

std::vector<int64_t> row_of(const Tensor& ids, int64_t row) {
  const Tensor r = ids.select(0, row).to(DType::I64).contiguous();
  return std::vector<int64_t>(r.data<int64_t>(), r.data<int64_t>() + r.numel());
}

// A scratch copy of a fixture folder to break.
fs::path copy_of(const fs::path& folder, const std::string& name) {
  const fs::path copy = testing::scratch_dir(name);
  fs::copy(folder, copy, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return copy;
}

}  // namespace

TEST(ClipTokenizer, FolderWithoutTokenizerJsonIsRecognised) {
  EXPECT_TRUE(tokenizers::is_clip_bpe_folder(model_dir() / "tokenizer"));
  EXPECT_FALSE(tokenizers::is_clip_bpe_folder(model_dir() / "tokenizer_2"));
  const tokenizers::ClipBpeFolder clip =
      tokenizers::read_clip_bpe_folder(model_dir() / "tokenizer");
  EXPECT_EQ(clip.model_max_length, 77);
  EXPECT_EQ(clip.pad_token, "<|endoftext|>");
}

TEST(ClipTokenizer, IdsMatchTransformersForEveryPrompt) {
  const nlohmann::json ref = info();
  const auto tokenizer = tokenizers::Tokenizer::load(model_dir() / "tokenizer");
  const nlohmann::json& prompts = ref["prompts"];
  ASSERT_EQ(prompts.size(), 6u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string prompt = prompts[i].get<std::string>();
    EXPECT_EQ(tokenizer->encode(prompt), ref["clip_unpadded_ids"][i].get<std::vector<int64_t>>())
        << "prompt " << i << ": " << prompt;
    EXPECT_EQ(tokenizer->encode_padded(prompt, kClipLength).ids,
              ref["clip_ids"][i].get<std::vector<int64_t>>())
        << "prompt " << i << ": " << prompt;
  }
  // The reference tensor holds the same ids.
  const Tensor ids = reference().tensor("clip.input_ids");
  for (int64_t i = 0; i < ids.size(0); ++i)
    EXPECT_EQ(row_of(ids, i), ref["clip_ids"][size_t(i)].get<std::vector<int64_t>>());
}

// The same tokenizer saved by transformers as tokenizer.json (tests/data/clip_tokenizer_json, the
// layout openai/clip-vit-large-patch14 ships): its NFC and Lowercase normalizers are read from the
// file and give the same ids.
TEST(ClipTokenizer, TokenizerJsonGivesTheSameIds) {
  const nlohmann::json ref = info();
  const auto tokenizer =
      tokenizers::Tokenizer::load(testing::source_dir() / "tests/data/clip_tokenizer_json");
  for (size_t i = 0; i < ref["prompts"].size(); ++i)
    EXPECT_EQ(tokenizer->encode_padded(ref["prompts"][i].get<std::string>(), kClipLength).ids,
              ref["clip_ids"][i].get<std::vector<int64_t>>())
        << "prompt " << i;
}

TEST(ClipTokenizer, NormalizesLikeHuggingFace) {
  // Python: unicodedata.normalize("NFC", ...) and per-character str.lower().
  const auto nfc = tokenizers::make_nfc_normalizer();
  EXPECT_EQ(nfc->normalize("Cafe\u0301 A\u030A \u1100\u1161\u11A8 q\u0307\u0323"),
            "Caf\u00E9 \u00C5 \uAC01 q\u0323\u0307");
  const auto lower = tokenizers::make_lowercase_normalizer();
  EXPECT_EQ(lower->normalize("\u0130STANBUL \u03A3\u039F\u03A3 \u00C9T\u00C9 \u0245"),
            "i\u0307stanbul \u03C3\u03BF\u03C3 \u00E9t\u00E9 \u028C");
  // A decomposed prompt tokenizes as its composed form.
  const auto tokenizer = tokenizers::Tokenizer::load(model_dir() / "tokenizer");
  EXPECT_EQ(tokenizer->encode("CAFE\u0301  \t CRE\u0300ME"), tokenizer->encode("café crème"));
}

TEST(ClipTokenizer, RefusesAFolderWithoutMerges) {
  const fs::path folder = copy_of(model_dir() / "tokenizer", "clip_no_merges");
  fs::remove(folder / "merges.txt");
  const std::string message = testing::error_message([&] { tokenizers::Tokenizer::load(folder); });
  EXPECT_NE(message.find("no merges.txt in"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(ClipTokenizer, RefusesAMalformedMergeLine) {
  const fs::path folder = copy_of(model_dir() / "tokenizer", "clip_bad_merges");
  std::ofstream(folder / "merges.txt") << "#version: 0.2\ni n\nthree tokens here\n";
  const std::string message = testing::error_message([&] { tokenizers::Tokenizer::load(folder); });
  EXPECT_NE(message.find("merges.txt:3"), std::string::npos) << message;
}

TEST(ClipTextModel, MatchesTransformers) {
  const SafetensorsFile ref = reference();
  const ClipTextModel model = ClipTextModel::from_folder(model_dir() / "text_encoder");
  const ClipTextModel::Output out = model.forward(ref.tensor("clip.input_ids"));
  const Tensor hidden = ref.tensor("clip.last_hidden_state"), pooled = ref.tensor("clip.pooled");
  ASSERT_EQ(out.last_hidden_state.shape(), hidden.shape());
  ASSERT_EQ(out.pooled.shape(), pooled.shape());
  const double hidden_error = testing::relative_error(out.last_hidden_state, hidden);
  const double pooled_error = testing::relative_error(out.pooled, pooled);
  std::printf("CLIP last_hidden_state relative error %.3g, pooled %.3g (backend %s)\n",
              hidden_error, pooled_error, model.attention_backend().c_str());
  EXPECT_LE(hidden_error, 1e-5);
  EXPECT_LE(pooled_error, 1e-5);
}

TEST(ClipTextModel, EveryPlainPagedBackendMatches) {
  const SafetensorsFile ref = reference();
  ClipTextModel model = ClipTextModel::from_folder(model_dir() / "text_encoder");
  const Tensor hidden = ref.tensor("clip.last_hidden_state");
  for (std::string_view name : attention::paged::cpu_paged_backends()) {
    if (name == "dual_chunk_flash_attn" || name == "flashinfer_mla" || name == "flashmla")
      continue;  // designs for other kinds of layer
    for (int64_t page_size : {1, 16}) {
      model.set_attention_backend(std::string(name), page_size);
      const double error = testing::relative_error(
          model.forward(ref.tensor("clip.input_ids")).last_hidden_state, hidden);
      EXPECT_LE(error, 1e-5) << name << " page size " << page_size;
    }
  }
}

TEST(ClipTextModel, TokenizerToPooledEndToEnd) {
  const nlohmann::json ref = info();
  const auto tokenizer = tokenizers::Tokenizer::load(model_dir() / "tokenizer");
  const ClipTextModel model = ClipTextModel::from_folder(model_dir() / "text_encoder");
  std::vector<std::vector<int64_t>> ids;
  for (const auto& prompt : ref["prompts"])
    ids.push_back(tokenizer->encode_padded(prompt.get<std::string>(), kClipLength).ids);
  const double error =
      testing::relative_error(model.forward(ids).pooled, reference().tensor("clip.pooled"));
  EXPECT_LE(error, 1e-5);
}

TEST(ClipTextModel, PoolsAtTheFirstEosUnlessTheConfigIsLegacy) {
  ClipTextConfig config;
  config.eos_token_id = 7;
  EXPECT_FALSE(config.pools_at_argmax());
  config.eos_token_id = 2;
  EXPECT_TRUE(config.pools_at_argmax());
  // The fixture is legacy (eos_token_id 2): argmax, the first of equal maxima.
  const ClipTextModel model = ClipTextModel::from_folder(model_dir() / "text_encoder");
  const Tensor ids = Tensor::from_vector({2, 4}, std::vector<int64_t>{5, 673, 3, 673, 9, 1, 8, 2});
  EXPECT_EQ(model.pooled_positions(ids), (std::vector<int64_t>{1, 0}));
}

TEST(ClipTextModel, RefusesAConfigThatDoesNotMatchTheWeights) {
  const fs::path folder = copy_of(model_dir() / "text_encoder", "clip_wrong_shape");
  nlohmann::json config = nlohmann::json::parse(read_text_file(folder / "config.json"));
  config["intermediate_size"] = 48;
  testing::write_json_file(folder / "config.json", config);
  const std::string message = testing::error_message([&] { ClipTextModel::from_folder(folder); });
  EXPECT_NE(message.find("config.json implies"), std::string::npos) << message;
  EXPECT_NE(message.find("mlp.fc1.weight"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(ClipTextModel, RefusesTooManyTokens) {
  const ClipTextModel model = ClipTextModel::from_folder(model_dir() / "text_encoder");
  const std::string message = testing::error_message([&] {
    model.forward(Tensor::from_vector({1, 78}, std::vector<int64_t>(78, 5)));
  });
  EXPECT_NE(message.find("more than its 77 positions"), std::string::npos) << message;
}

TEST(FluxT5, TokenizerIdsMatchTransformers) {
  const nlohmann::json ref = info();
  const int64_t length = ref["t5_max_sequence_length"].get<int64_t>();
  const auto tokenizer = tokenizers::Tokenizer::load(model_dir() / "tokenizer_2");
  const Tensor ids = reference().tensor("t5.input_ids");
  for (size_t i = 0; i < ref["prompts"].size(); ++i) {
    const std::vector<int64_t> ours =
        tokenizer->encode_padded(ref["prompts"][i].get<std::string>(), size_t(length)).ids;
    EXPECT_EQ(ours, ref["t5_ids"][i].get<std::vector<int64_t>>()) << "prompt " << i;
    EXPECT_EQ(ours, row_of(ids, int64_t(i))) << "prompt " << i;
  }
}

TEST(FluxT5, EncoderWithoutMaskMatchesTransformers) {
  const SafetensorsFile ref = reference();
  const UMT5Encoder encoder = UMT5Encoder::from_folder(model_dir() / "text_encoder_2");
  EXPECT_EQ(encoder.config().model_type, "t5");
  const Tensor hidden = encoder.forward(ref.tensor("t5.input_ids"));  // pads attended
  const Tensor expected = ref.tensor("t5.last_hidden_state");
  ASSERT_EQ(hidden.shape(), expected.shape());
  const double error = testing::relative_error(hidden, expected);
  std::printf("T5 last_hidden_state relative error %.3g\n", error);
  EXPECT_LE(error, 1e-5);
}

}  // namespace mmgen::text_encoders
