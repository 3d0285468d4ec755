#include "generate/settings.h"

#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "core/text.h"
#include "generate/generate_command.h"
#include "generate/options.h"
#include "tests/test_support.h"

namespace mmgen::cli {
namespace {

using testing::scratch_dir;

std::vector<std::string> base_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--model-path",
                                   (testing::source_dir() / "examples/models/wan-tiny").string(),
                                   "--prompt", "a fox"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

fs::path write_file(const std::string& dir, const std::string& name, const std::string& text) {
  fs::path path = scratch_dir(dir) / name;
  std::ofstream(path) << text;
  return path;
}

TEST(Settings, PipelineDefaultsApplyWhenNothingElseIsGiven) {
  Request r = resolve_generate(base_args()).request;
  EXPECT_EQ(r.height, 480);  // configs/wan.yaml
  EXPECT_EQ(r.num_frames, 81);
  EXPECT_EQ(r.seed, 1024u);  // built-in
  EXPECT_EQ(r.output_format, "mp4");
}

TEST(Settings, PrecedenceCommandLineOverConfigOverPipelineOverBuiltin) {
  fs::path config = write_file("prec", "c.yaml", "height: 64\nwidth: 96\nseed: 7\nnum_frames: 5\n");
  Request r = resolve_generate(base_args({"--config", config.string(), "--width", "128"})).request;
  EXPECT_EQ(r.height, 64);  // config over pipeline default 480
  EXPECT_EQ(r.width, 128);  // command line over config
  EXPECT_EQ(r.seed, 7u);    // config over built-in
  EXPECT_EQ(r.num_frames, 5);
  EXPECT_EQ(r.num_inference_steps, 50);  // pipeline default
}

TEST(Settings, ExplicitValueWinsEvenWhenItEqualsADefault) {
  // The config sets seed 7; the command line says 1024, which is also the built-in default.
  fs::path config = write_file("explicit", "c.json", R"({"seed": 7, "num-inference-steps": 3})");
  Request r = resolve_generate(base_args({"--config", config.string(), "--seed", "1024",
                                          "--num-inference-steps", "50"}))
                  .request;
  EXPECT_EQ(r.seed, 1024u);
  EXPECT_EQ(r.num_inference_steps, 50);
}

TEST(Settings, ConfigKeysTakeDashesOrUnderscores) {
  fs::path config = write_file("dashes", "c.yaml",
                               "num-inference-steps: 4\nguidance_scale: 2.5\ndry-run: true\n");
  Request r = resolve_generate(base_args({"--config", config.string()})).request;
  EXPECT_EQ(r.num_inference_steps, 4);
  EXPECT_DOUBLE_EQ(r.guidance_scale, 2.5);
  EXPECT_TRUE(r.dry_run);
}

TEST(Settings, ConfigFileMayGiveModelAndPrompt) {
  fs::path config =
      write_file("model-in-config", "c.yaml",
                 "model_path: " + (testing::source_dir() / "examples/models/wan-tiny").string() +
                     "\nprompt: from the file\n");
  Request r = resolve_generate({"--config", config.string()}).request;
  EXPECT_EQ(r.prompt, "from the file");
}

TEST(Settings, UnknownKeysAndFlagsNameTheNearestValidName) {
  fs::path config = write_file("unknown", "c.yaml", "num_inference_step: 4\n");
  std::string message = testing::error_message([&] {
    resolve_generate(base_args({"--config", config.string()}));
  });
  EXPECT_NE(message.find("unknown option 'num_inference_step'"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean num-inference-steps"), std::string::npos) << message;
  message = testing::error_message([&] { resolve_generate(base_args({"--guidence-scale", "3"})); });
  EXPECT_NE(message.find("unknown flag --guidence-scale (did you mean --guidance-scale?)"),
            std::string::npos)
      << message;
}

TEST(Settings, BadConfigFiles) {
  fs::path txt = write_file("badconf", "c.txt", "height: 3");
  EXPECT_NE(testing::error_message([&] {
              resolve_generate(base_args({"--config", txt.string()}));
            }).find(".yaml, .yml or .json"),
            std::string::npos);
  fs::path yaml = write_file("badyaml", "c.yaml", "height: [1, 2\n");
  EXPECT_NE(testing::error_message([&] {
              resolve_generate(base_args({"--config", yaml.string()}));
            }).find("malformed YAML"),
            std::string::npos);
  fs::path typed = write_file("badtype", "c.yaml", "height: tall\n");
  std::string message = testing::error_message([&] {
    resolve_generate(base_args({"--config", typed.string()}));
  });
  EXPECT_NE(message.find("height: expected a whole number, got 'tall'"), std::string::npos)
      << message;
  EXPECT_NE(testing::error_message([&] {
              resolve_generate(base_args({"--config", "/nonexistent.yaml"}));
            }).find("no such file"),
            std::string::npos);
}

TEST(Settings, RequestChecks) {
  EXPECT_NE(testing::error_message([&] {
              resolve_generate(base_args({"--num-frames", "6"}));
            }).find("try 5"),
            std::string::npos);
  EXPECT_NE(testing::error_message([&] {
              resolve_generate(base_args({"--width", "40"}));
            }).find("multiples of 16"),
            std::string::npos);
  EXPECT_NE(testing::error_message([&] {
              resolve_generate(base_args({"--num-frames", "5", "--output-format", "png"}));
            }).find("holds one picture"),
            std::string::npos);
  EXPECT_NE(testing::error_message([&] {
              resolve_generate(base_args({"--output-format", "gif"}));
            }).find("not one of"),
            std::string::npos);
  EXPECT_NE(testing::error_message([&] {
              resolve_generate({"--prompt", "x"});
            }).find("--model-path"),
            std::string::npos);
  EXPECT_NE(testing::error_message([&] {
              resolve_generate(
                  {"--model-path", (testing::source_dir() / "examples/models/wan-tiny").string()});
            }).find("no prompt"),
            std::string::npos);
}

std::vector<std::string> prompt_file_args(const fs::path& file) {
  return {"--model-path", (testing::source_dir() / "examples/models/wan-tiny").string(),
          "--prompt-file-path", file.string()};
}

TEST(Settings, PromptFileGivesOneRequestPerPrompt) {
  const fs::path file =
      write_file("prompt-file", "p.txt", "# comment\nfirst prompt\n\n  \n  # indented\nsecond\r\n");
  const ResolvedGenerate r = resolve_generate(prompt_file_args(file));
  EXPECT_EQ(r.batch_prompts, (std::vector<std::string>{"first prompt", "second"}));
  EXPECT_EQ(r.request.prompt, "");
  const Request second = batch_request(r, 1);
  EXPECT_EQ(second.prompt, "second");
  EXPECT_EQ(second.settings["prompt"], "second");
  EXPECT_EQ(second.settings["prompt_file_path"], file.string());
  EXPECT_EQ(second.height, r.request.height);
  EXPECT_EQ(dry_run_json(r)["prompts"], nlohmann::json({"first prompt", "second"}));
  // A single --prompt has no batch and no `prompts` key.
  EXPECT_FALSE(dry_run_json(resolve_generate(base_args())).contains("prompts"));
}

TEST(Settings, BadPromptFilesAreClearErrors) {
  const fs::path empty = write_file("prompt-file-empty", "p.txt", "# only a comment\n\n");
  EXPECT_NE(testing::error_message([&] {
              resolve_generate(prompt_file_args(empty));
            }).find("holds no prompt"),
            std::string::npos);
  EXPECT_NE(testing::error_message([&] {
              resolve_generate(prompt_file_args("/nonexistent/prompts.txt"));
            }).find("--prompt-file-path /nonexistent/prompts.txt does not exist"),
            std::string::npos);
  const fs::path file = write_file("prompt-file-both", "p.txt", "a fox\n");
  EXPECT_NE(testing::error_message([&] {
              resolve_generate(base_args({"--prompt-file-path", file.string()}));
            }).find("both --prompt and --prompt-file-path"),
            std::string::npos);
}

// The settings written with an output name every component's resolved attention backend.
TEST(Settings, OutputSettingsCarryTheResolvedAttentionBackends) {
  const ResolvedGenerate r =
      resolve_generate(base_args({"--component-attention-backends", "text_encoder=torch_native"}));
  const nlohmann::json settings = output_settings(r, r.request);
  EXPECT_EQ(settings["attention_backends"]["transformer"],
            nlohmann::json({{"backend", "fa"}, {"source", "auto"}}));
  EXPECT_EQ(settings["attention_backends"]["text_encoder"],
            nlohmann::json({{"backend", "torch_native"}, {"source", "component"}}));
  EXPECT_FALSE(settings["attention_backends"].contains("tokenizer"));
  EXPECT_EQ(settings["prompt"], "a fox");
  EXPECT_FALSE(settings.contains("dry_run"));
}

TEST(Settings, ComponentPathAndBackendFlags) {
  fs::path vae = testing::source_dir() / "examples/models/wan-tiny/vae";
  ResolvedGenerate r = resolve_generate(
      base_args({"--vae-path", vae.string(), "--component-attention-backends.transformer", "fa"}));
  EXPECT_TRUE(r.index.component("vae").overridden);
  EXPECT_EQ(r.request.component_attention_backends["transformer"], "fa");
  r = resolve_generate(
      base_args({"--text-encoder-path=" +
                 (testing::source_dir() / "examples/models/wan-tiny/text_encoder").string()}));
  EXPECT_TRUE(r.index.component("text_encoder").overridden);
}

TEST(Options, NearestName) {
  EXPECT_EQ(nearest_name("heigth", {"height", "width"}), "height");
  EXPECT_EQ(nearest_name("zzzzzzzz", {"height", "width"}), "");
}

}  // namespace
}  // namespace mmgen::cli
