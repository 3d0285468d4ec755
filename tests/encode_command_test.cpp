// `mmgen encode`: the prompt embeddings it writes equal the references (Wan's
// text_encoder.prompt{k}, Z-Image's hidden_states[-2] rows), the prefix cache is reported, and
// bad input gets a one-line error.
#include "generate/encode_command.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/safetensors.h"
#include "tests/test_support.h"

namespace mmgen::cli {
namespace {

using json = nlohmann::json;

fs::path fixture(const std::string& name) {
  return testing::shared_dir() / "fixtures" / name;
}
json reference_json(const std::string& name) {
  return json::parse(read_text_file(fixture(name) / "reference" / "reference.json"));
}
std::string mmgen() {
  return testing::mmgen_binary().string();
}
// qwen3-tiny as a model folder whose tokenizer has a chat template: the fixture's tokenizer
// folder has none (and `mmgen encode` refuses it: BadInputGetsOneLineAndNonZeroExit), and its
// reference prompts were rendered with Qwen3's template, which zimage-tiny's tokenizer holds.
// Links to the fixture's files, plus that template, in a scratch folder made once.
fs::path qwen3_tiny_with_template() {
  static const fs::path model = [] {
    const fs::path source = fixture("qwen3-tiny") / "model";
    const fs::path dir = testing::scratch_dir("encode_qwen3_tiny") / "model";
    fs::create_directories(dir / "tokenizer");
    fs::copy_file(source / "model_index.json", dir / "model_index.json");
    fs::create_directory_symlink(source / "text_encoder", dir / "text_encoder");
    for (const auto& entry : fs::directory_iterator(source / "tokenizer"))
      fs::create_symlink(entry.path(), dir / "tokenizer" / entry.path().filename());
    fs::copy_file(fixture("zimage-tiny") / "model" / "tokenizer" / "chat_template.jinja",
                  dir / "tokenizer" / "chat_template.jinja");
    return dir;
  }();
  return model;
}

// Single quotes for the shell (the prompts used here hold no single quote).
std::string quoted(const std::string& text) {
  return "'" + text + "'";
}

// Runs `encode` in process with these arguments plus --out; returns the written file.
SafetensorsFile encode(std::vector<std::string> arguments, const std::string& name) {
  const fs::path out = testing::scratch_dir("encode_" + name) / "embeds.safetensors";
  arguments.push_back("--out");
  arguments.push_back(out.string());
  EXPECT_EQ(run_encode(arguments), 0);
  return SafetensorsFile::open(out);
}

TEST(EncodeCommand, WanEmbeddingsMatchThePipelineReferenceOnEveryBackend) {
  MMGEN_REQUIRE_SHARED();
  const json prompts = reference_json("wan-tiny")["prompts"];
  const SafetensorsFile ref =
      SafetensorsFile::open(fixture("wan-tiny") / "reference" / "reference.safetensors");
  for (const char* backend :
       {"", "torch_native", "triton", "flashinfer", "fa3", "flex_attention"}) {
    std::vector<std::string> arguments = {"--model-path", (fixture("wan-tiny") / "model").string(),
                                          "--max-sequence-length", "24"};
    if (*backend) {
      arguments.push_back("--component-attention-backends");
      arguments.push_back(std::string("text_encoder=") + backend);
    }
    for (size_t k = 0; k < 6; ++k) {
      arguments.push_back("--prompt");
      arguments.push_back(prompts[k].get<std::string>());
    }
    const SafetensorsFile out = encode(arguments, std::string("wan_") + backend);
    EXPECT_EQ(out.names().size(), 6u);
    EXPECT_EQ(out.metadata().at("text_encoder_class"), "UMT5EncoderModel");
    double worst = 0;
    for (size_t k = 0; k < 6; ++k) {
      const Tensor ours = out.tensor("prompt_embeds." + std::to_string(k));
      const Tensor expected = ref.tensor("text_encoder.prompt" + std::to_string(k));
      ASSERT_EQ(ours.shape(), Shape({24, 32})) << k;
      const double error = testing::relative_error(ours, expected.select(0, 0));
      EXPECT_LT(error, 1e-5) << backend << " prompt " << k;
      worst = std::max(worst, error);
    }
    std::printf("wan prompts 0-5, backend %s: worst relative error %.3g\n",
                *backend ? backend : "auto", worst);
  }
}

// Without --max-sequence-length, WanPipeline's default (configs/wan.yaml: 512). The empty prompt
// (prompt 3: just </s>) is the one whose reference at 24 is not truncated: its real row does not
// depend on the padded length (padding keys are masked), and everything after it is zero.
TEST(EncodeCommand, WanDefaultsToThePipelinesMaxSequenceLength) {
  MMGEN_REQUIRE_SHARED();
  const json prompts = reference_json("wan-tiny")["prompts"];
  ASSERT_EQ(prompts[3].get<std::string>(), "");
  const SafetensorsFile ref =
      SafetensorsFile::open(fixture("wan-tiny") / "reference" / "reference.safetensors");
  const SafetensorsFile out =
      encode({"--model-path", (fixture("wan-tiny") / "model").string(), "--prompt", ""}, "wan512");
  const Tensor ours = out.tensor("prompt_embeds.0");
  ASSERT_EQ(ours.shape(), Shape({512, 32}));
  EXPECT_EQ(out.metadata().at("max_sequence_length"), "512");
  EXPECT_LT(testing::relative_error(ours.slice(0, 0, 24).contiguous(),
                                    ref.tensor("text_encoder.prompt3").select(0, 0)),
            1e-5);
  EXPECT_EQ(testing::max_abs_diff(ours.slice(0, 1, 512).contiguous(), Tensor::zeros({511, 32})),
            0.0);
}

TEST(EncodeCommand, ZImageEmbeddingsAreTheRealRowsOfHiddenStatesMinus2) {
  MMGEN_REQUIRE_SHARED();
  const json ref = reference_json("qwen3-tiny");
  const SafetensorsFile tensors =
      SafetensorsFile::open(fixture("qwen3-tiny") / "reference" / "reference.safetensors");
  const Tensor expected_all = tensors.tensor("encoder.hidden_states_minus2");
  const Tensor mask = tensors.tensor("encoder.attention_mask");
  for (const char* page_size : {"1", "16"}) {
    std::vector<std::string> arguments = {"--model-path",
                                          qwen3_tiny_with_template().string(),
                                          "--max-sequence-length",
                                          std::to_string(ref["max_length"].get<int64_t>()),
                                          "--page-size",
                                          page_size,
                                          "--component-attention-backends",
                                          "text_encoder=triton"};
    for (const json& prompt : ref["prompts"]) {
      arguments.push_back("--prompt");
      arguments.push_back(prompt["prompt"].get<std::string>());
    }
    const SafetensorsFile out = encode(arguments, std::string("qwen") + page_size);
    ASSERT_EQ(out.names().size(), ref["prompts"].size());
    double worst = 0;
    for (size_t i = 0; i < ref["prompts"].size(); ++i) {
      int64_t length = 0;
      for (int64_t j = 0; j < mask.size(1); ++j) length += mask.item_f32({int64_t(i), j}) != 0;
      const Tensor ours = out.tensor("prompt_embeds." + std::to_string(i));
      ASSERT_EQ(ours.shape(), Shape({length, 64})) << i;
      const double error = testing::relative_error(
          ours, expected_all.select(0, int64_t(i)).slice(0, 0, length).contiguous());
      EXPECT_LT(error, 1e-5) << i;
      worst = std::max(worst, error);
    }
    std::printf("z-image embeddings, page size %s: worst relative error %.3g\n", page_size, worst);
  }
}

// The binary: prompts from a file after --prompt, the prefix-cache report, an atomic write.
TEST(EncodeCommand, BinaryReadsAPromptFileAndReportsPrefixCacheHits) {
  MMGEN_REQUIRE_SHARED();
  const fs::path dir = testing::scratch_dir("encode_binary");
  {
    std::ofstream file(dir / "prompts.txt");
    file << "a red fox running through snow\n\nA cat sitting on the beach at sunset\r\n";
  }
  const fs::path out = dir / "out.safetensors";
  const auto result = testing::run_command(
      mmgen() + " encode --model-path " + qwen3_tiny_with_template().string() + " --prompt " +
      quoted("a red fox running through snow") + " --prompt-file-path " +
      (dir / "prompts.txt").string() + " --out " + out.string());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  // Three prompts; the second repeats the first (all but its last token cached), the third
  // shares the chat template's first tokens.
  EXPECT_NE(result.out.find("3 prompt embedding(s)"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("prefix cache: 2 hit(s)"), std::string::npos) << result.out;
  const SafetensorsFile file = SafetensorsFile::open(out);
  EXPECT_EQ(file.names().size(), 3u);
  EXPECT_EQ(testing::max_abs_diff(file.tensor("prompt_embeds.0").slice(0, 0, 18).contiguous(),
                                  file.tensor("prompt_embeds.1").slice(0, 0, 18).contiguous()),
            0.0);
  EXPECT_LT(testing::relative_error(file.tensor("prompt_embeds.0"), file.tensor("prompt_embeds.1")),
            1e-6);
  for (const auto& entry : fs::directory_iterator(dir))  // no temporary left behind
    EXPECT_TRUE(entry.path().filename() == "out.safetensors" ||
                entry.path().filename() == "prompts.txt")
        << entry.path();
}

TEST(EncodeCommand, BadInputGetsOneLineAndNonZeroExit) {
  MMGEN_REQUIRE_SHARED();
  const std::string qwen = qwen3_tiny_with_template().string();
  const std::string wan = (fixture("wan-tiny") / "model").string();
  const std::string out = (testing::scratch_dir("encode_bad") / "x.safetensors").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"encode --prompt x --out " + out, "no model"},
      {"encode --model-path " + qwen + " --out " + out, "no prompt"},
      {"encode --model-path " + qwen + " --prompt x", "no output"},
      {"encode --model-path " + qwen + " --prompt x --out /tmp/x.npy",
       "should end in .safetensors"},
      {"encode --model-path " + qwen + " --prompt x --out " + out + " --promt y",
       "did you mean --prompt"},
      {"encode --model-path " + qwen + " --prompt x --out " + out + " --page-size 0",
       "--page-size 0"},
      {"encode --model-path " + qwen + " --prompt x --out " + out + " --max-sequence-length abc",
       "whole number"},
      {"encode --model-path " + qwen + " --prompt x --out " + out +
           " --component-attention-backends text_encoder=warp_drive",
       "unknown attention backend 'warp_drive'"},
      {"encode --model-path " + qwen + " --prompt x --out " + out +
           " --component-attention-backends text_encoder=sliding_tile_attn",
       "not a text-encoder (paged) attention backend"},
      {"encode --model-path " + qwen + " --prompt x --out " + out +
           " --component-attention-backends transformer=triton",
       "only the encoded component"},
      {"encode --model-path " + qwen + " --prompt x --out " + out +
           " --component-attention-backends triton",
       "'triton' is not component=backend"},
      {"encode --model-path /nonexistent --prompt x --out " + out, "/nonexistent"},
      {"encode --model-path " + qwen + " --prompt x --out " + out + " --component vae",
       "no component 'vae'"},
      {"encode --model-path " + wan + " --prompt x --out " + out + " --component transformer",
       "does not support"},
      {"encode --model-path " + qwen + " --prompt-file-path /nonexistent.txt --out " + out,
       "/nonexistent.txt does not exist"},
      {"encode --model-path " + qwen + " --prompt x --out " + out + " --page-size",
       "needs a value"},
      {"encode --model-path " + (fixture("qwen3-tiny") / "model").string() + " --prompt x --out " +
           out,
       "the tokenizer has no chat template"},
  };
  for (const auto& [arguments, expected] : cases) {
    const auto result = testing::run_command(mmgen() + " " + arguments);
    EXPECT_EQ(result.exit_code, 1) << arguments;
    EXPECT_NE(result.err.find(expected), std::string::npos) << arguments << " -> " << result.err;
    EXPECT_EQ(result.err.find("mmgen: error: "), 0u) << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
  EXPECT_FALSE(fs::exists(out));
}

TEST(EncodeCommand, HelpListsTheOptions) {
  const auto result = testing::run_command(mmgen() + " encode --help");
  EXPECT_EQ(result.exit_code, 0);
  for (const char* flag : {"--model-path", "--prompt", "--prompt-file-path", "--page-size",
                           "--component-attention-backends", "--max-sequence-length", "--out"})
    EXPECT_NE(result.out.find(flag), std::string::npos) << flag;
}

}  // namespace
}  // namespace mmgen::cli
