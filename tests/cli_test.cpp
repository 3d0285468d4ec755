// The mmgen executable end to end: exit codes, one-line errors, the dry-run JSON, and batches
// from a prompt file.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/gemm_cpu.h"
#include "core/npy.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

std::string mmgen() {
  return testing::mmgen_binary().string();
}
std::string wan_tiny() {
  return (testing::source_dir() / "examples/models/wan-tiny").string();
}

TEST(Cli, DryRunPrintsTheResolvedRequestAsJson) {
  auto result = run_command(mmgen() + " generate --dry-run --model-path " + wan_tiny() +
                            " --prompt x --num-frames 5 --height 32 --width 48 --seed 42");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["pipeline"], "WanPipeline");
  EXPECT_EQ(out["model_path"], wan_tiny());
  EXPECT_EQ(out["latent_shape"], nlohmann::json({1, 16, 2, 4, 6}));
  EXPECT_EQ(out["request"]["seed"], 42);
  EXPECT_EQ(out["request"]["prompt"], "x");
  EXPECT_EQ(out["request"]["num_inference_steps"], 50);
  EXPECT_EQ(out["request"]["output_format"], "mp4");
  EXPECT_EQ(out["attention_backend_config"],
            nlohmann::json::object());  // fa has no settings
  for (const char* name : {"transformer", "text_encoder", "tokenizer", "vae", "scheduler"}) {
    ASSERT_TRUE(out["components"].contains(name)) << name;
    for (const char* key :
         {"class", "library", "path", "attention_backend", "attention_backend_source"})
      EXPECT_TRUE(out["components"][name].contains(key)) << name << "." << key;
  }
  EXPECT_EQ(out["components"]["vae"]["class"], "AutoencoderKLWan");
  EXPECT_EQ(out["components"]["text_encoder"]["library"], "transformers");
  // This CPU build has the fa kernel, which auto picks for the transformer.
  EXPECT_EQ(out["components"]["transformer"]["attention_backend"], "fa");
  EXPECT_EQ(out["components"]["transformer"]["attention_backend_source"], "auto");
  // Text encoders take the best paged backend this CPU build has: the one `mmgen backends` names
  // (the catalogue's order is pinned in attention_selection_test).
  const auto backends = run_command(mmgen() + " backends --json");
  ASSERT_EQ(backends.exit_code, 0) << backends.err;
  const std::string paged = nlohmann::json::parse(backends.out)["auto"]["paged"];
  EXPECT_TRUE(paged == "triton" || paged == "flashinfer") << paged;
  EXPECT_EQ(out["components"]["text_encoder"]["attention_backend"], paged);
  EXPECT_EQ(out["components"]["text_encoder"]["attention_backend_source"], "auto");
  EXPECT_TRUE(out["components"]["tokenizer"]["attention_backend"].is_null());
}

// --device auto (the default) resolves before anything runs, and every report says where and why.
// This build has no CUDA, so auto is the CPU; tests/cuda/device_auto_cuda_test checks the GPU
// machine's side (a CUDA build there picks the GPU).
TEST(Cli, DeviceAutoIsResolvedAndExplained) {
  const std::string base = mmgen() + " generate --dry-run --model-path " + wan_tiny() +
                           " --prompt x --num-frames 1 --height 32 --width 32";
  const auto automatic = run_command(base);
  ASSERT_EQ(automatic.exit_code, 0) << automatic.err;
  const nlohmann::json out = nlohmann::json::parse(automatic.out);
  EXPECT_EQ(out["request"]["device"], "cpu");
  EXPECT_EQ(out["device"]["device"], "cpu");
  EXPECT_EQ(out["device"]["reason"],
            "auto: this build has no CUDA support (-DMMGEN_CUDA=ON adds it)");
  const auto asked = run_command(base + " --device cpu");
  ASSERT_EQ(asked.exit_code, 0) << asked.err;
  EXPECT_EQ(nlohmann::json::parse(asked.out)["device"]["reason"], "--device cpu");

  const auto backends = run_command(mmgen() + " backends");
  ASSERT_EQ(backends.exit_code, 0) << backends.err;
  EXPECT_EQ(backends.out.substr(0, backends.out.find('\n')),
            "Device: cpu (auto: this build has no CUDA support (-DMMGEN_CUDA=ON adds it)).");
  const auto json_report = run_command(mmgen() + " backends --json");
  ASSERT_EQ(json_report.exit_code, 0) << json_report.err;
  const nlohmann::json info = nlohmann::json::parse(json_report.out);
  EXPECT_EQ(info["device"]["device"], "cpu");
  EXPECT_EQ(info["machine"], "cpu");

  // The run's log names the device too (one line, before the stages).
  const fs::path out_dir = testing::scratch_dir("cli-device-auto");
  const auto run = run_command(mmgen() + " generate --model-path " + wan_tiny() +
                               " --prompt x --num-frames 1 --height 32 --width 32 "
                               "--num-inference-steps 1 --output-format npy --overwrite "
                               "--output-path " +
                               out_dir.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE((run.out + run.err).find("device: cpu (auto: this build has no CUDA support"),
            std::string::npos)
      << run.out << run.err;
}

TEST(Cli, BadInputGetsOneLineAndNonZeroExit) {
  const fs::path empty_prompts = testing::scratch_dir("cli-empty-prompts") / "prompts.txt";
  std::ofstream(empty_prompts) << "# nothing here\n\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generate --model-path /nonexistent --prompt x", "does not exist"},
      {"generate --model-path " + wan_tiny() + " --prompt x --steps 4",
       "unknown flag --steps (mmgen calls it --num-inference-steps)"},
      {"generate --model-path " + wan_tiny() + " --prompt x --height 50", "multiples of 16"},
      {"generate --model-path " + wan_tiny() + " --prompt x --seed -3", "negative"},
      {"frobnicate", "unknown command"},
      {"generate --model-path " + wan_tiny() + " --prompt-file-path " + empty_prompts.string(),
       "holds no prompt"},
      {"generate --model-path " + wan_tiny() + " --prompt x --max-gpu-memory lots",
       "--max-gpu-memory lots: give a size from 64 MiB to 1 EiB"},
      {"generate --model-path " + wan_tiny() + " --prompt x --max-gpu-memory 1M",
       "--max-gpu-memory 1M: give a size from 64 MiB to 1 EiB"},
  };
  for (const auto& [arguments, expected] : cases) {
    auto result = run_command(mmgen() + " " + arguments);
    EXPECT_NE(result.exit_code, 0) << arguments;
    EXPECT_NE(result.err.find(expected), std::string::npos) << arguments << " -> " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1)
        << "one line: " << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
}

TEST(Cli, DryRunShowsEachComponentsBackendAndWhereItCameFrom) {
  auto result = run_command(mmgen() + " generate --dry-run --model-path " + wan_tiny() +
                            " --prompt x --attention-backend torch_sdpa "
                            "--component-attention-backends text_encoder=torch_native");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["components"]["transformer"]["attention_backend"], "torch_sdpa");
  EXPECT_EQ(out["components"]["transformer"]["attention_backend_source"], "cli");
  EXPECT_EQ(out["components"]["text_encoder"]["attention_backend"], "torch_native");
  EXPECT_EQ(out["components"]["text_encoder"]["attention_backend_source"], "component");
  // A DiT backend the text encoder cannot use, named explicitly for it, is an error.
  result = run_command(mmgen() + " generate --dry-run --model-path " + wan_tiny() +
                       " --prompt x --component-attention-backends text_encoder=sliding_tile_attn");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("text_encoder"), std::string::npos) << result.err;
}

// Tiny settings for real runs on wan-tiny: a fraction of a second each.
std::string tiny_run(const fs::path& out, const std::string& log_level = "error") {
  return " --model-path " + wan_tiny() +
         " --height 32 --width 48 --num-frames 5 --num-inference-steps 2 --guidance-scale 5"
         " --max-sequence-length 16 --seed 3 --output-format npy --log-level " +
         log_level + " --output-path " + out.string();
}

fs::path write_prompt_file(const fs::path& dir, const std::string& text) {
  const fs::path path = dir / "prompts.txt";
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, PromptFileWritesOneOutputPerPromptWithSingleRunNumbers) {
  const fs::path out = testing::scratch_dir("cli-batch");
  const std::vector<std::string> prompts = {"a red circle on a blue background",
                                            "a yellow triangle"};
  const fs::path file =
      write_prompt_file(out, "# shapes\n" + prompts[0] + "\n\n" + prompts[1] + "\n");
  auto batch = run_command(mmgen() + " generate" + tiny_run(out, "info") + " --prompt-file-path " +
                           file.string() + " --output-file-name batch");
  ASSERT_EQ(batch.exit_code, 0) << batch.err;
  EXPECT_NE(batch.out.find("2 of 2 prompt(s) written"), std::string::npos) << batch.out;
  EXPECT_NE(batch.out.find("0 failed"), std::string::npos) << batch.out;
  // The text encoder ran once for both prompts; each video is still the single run's, bit for bit.
  EXPECT_NE(batch.err.find("encode: 2 prompt(s) in one batch of the text encoder"),
            std::string::npos)
      << batch.err;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(prompts[i]);
    const std::string single_name = "single_" + std::to_string(i);
    auto single = run_command(mmgen() + " generate" + tiny_run(out) + " --prompt '" + prompts[i] +
                              "' --output-file-name " + single_name);
    ASSERT_EQ(single.exit_code, 0) << single.err;
    const fs::path batch_npy = out / ("batch_" + std::to_string(i) + ".npy");
    const Tensor batch_frames = read_npy(batch_npy);
    EXPECT_EQ(shape_string(batch_frames.shape()), "[5, 32, 48, 3]");
    EXPECT_EQ(testing::max_abs_diff(batch_frames, read_npy(out / (single_name + ".npy"))), 0.0);
    const auto settings = nlohmann::json::parse(read_text_file(batch_npy.string() + ".json"));
    EXPECT_EQ(settings["prompt"], prompts[i]);
    EXPECT_EQ(settings["attention_backends"]["transformer"]["backend"], "fa");
  }
  // The two prompts differ, and so do their videos.
  EXPECT_GT(testing::max_abs_diff(read_npy(out / "batch_0.npy"), read_npy(out / "batch_1.npy")),
            1e-3);
  EXPECT_FALSE(fs::exists(out / "batch_2.npy"));
}

TEST(Cli, PromptFileReportsAFailedPromptAndGoesOn) {
  const fs::path out = testing::scratch_dir("cli-batch-fail");
  const fs::path file = write_prompt_file(out, "a red circle\na blue square\n");
  fs::create_directory(out / "blocked_0.npy");  // prompt 1's output cannot be written
  auto result = run_command(mmgen() + " generate" + tiny_run(out) + " --prompt-file-path " +
                            file.string() + " --output-file-name blocked");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err.find("mmgen: error: prompt 1 of 2 (\"a red circle\"): "), 0u) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  EXPECT_NE(result.out.find("1 of 2 prompt(s) written"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("1 failed"), std::string::npos) << result.out;
  EXPECT_TRUE(fs::is_regular_file(out / "blocked_1.npy"));
}

TEST(Cli, AnExistingOutputIsKeptUnlessOverwrite) {
  const fs::path out = testing::scratch_dir("cli-overwrite");
  { std::ofstream(out / "clip.npy") << "earlier work"; }
  auto refused =
      run_command(mmgen() + " generate" + tiny_run(out) + " --prompt fox --output-file-name clip");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.err, "mmgen: error: " + (out / "clip.npy").string() +
                             " already exists; pass --overwrite to replace it or choose another "
                             "--output-file-name\n");
  EXPECT_EQ(read_text_file(out / "clip.npy"), "earlier work");
  auto replaced = run_command(mmgen() + " generate" + tiny_run(out) +
                              " --prompt fox --output-file-name clip --overwrite");
  ASSERT_EQ(replaced.exit_code, 0) << replaced.err;
  EXPECT_EQ(shape_string(read_npy(out / "clip.npy").shape()), "[5, 32, 48, 3]");
}

TEST(Cli, VaeTilingMatchesTheUntiledVideo) {
  const fs::path out = testing::scratch_dir("cli-tiling");
  auto run = [&](const std::string& name, const std::string& flags) {
    auto result = run_command(mmgen() + " generate" + tiny_run(out) + " --prompt fox" + flags +
                              " --output-file-name " + name);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return read_npy(out / (name + ".npy"));
  };
  const Tensor untiled = run("untiled", "");
  // One 256-pixel tile covers the 48x32 frame: the same bits.
  EXPECT_EQ(testing::max_abs_diff(run("one_tile", " --vae-tiling"), untiled), 0.0);
  // 16-pixel cores overlapping by 8: 3 x 5 tiles.
  EXPECT_LT(testing::max_abs_diff(
                run("tiles", " --vae-tiling --vae-tile-size 16 --vae-tile-overlap 8"), untiled),
            2e-3);
  auto bad = run_command(mmgen() + " generate" + tiny_run(out) +
                         " --prompt fox --vae-tiling --vae-tile-size 20 --vae-tile-overlap 8");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("both must be multiples of 8"), std::string::npos) << bad.err;
}

// The flag reaches the products: bf16 moves the video a little (on wan-tiny 4.9e-4 relative, at
// most 2.1e-3 when written), never by more than bfloat16's rounding allows; a build without AVX-512
// BF16 refuses it in one line.
TEST(Cli, CpuMatmulPrecisionBf16IsCloseToFloat32AndNotTheSame) {
  const fs::path out = testing::scratch_dir("cli-bf16");
  auto run = [&](const std::string& name, const std::string& precision) {
    return run_command(mmgen() + " generate" + tiny_run(out) + " --prompt fox --output-file-name " +
                       name + " --cpu-matmul-precision " + precision);
  };
  const auto f32 = run("f32", "fp32");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  const auto bf16 = run("bf16", "bf16");
  if (!cpu::bf16_products_available()) {
    EXPECT_EQ(bf16.exit_code, 1);
    EXPECT_NE(bf16.err.find("needs a CPU with AVX-512 BF16"), std::string::npos) << bf16.err;
    EXPECT_FALSE(fs::exists(out / "bf16.npy"));
    return;
  }
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  const double diff = testing::max_abs_diff(read_npy(out / "bf16.npy"), read_npy(out / "f32.npy"));
  EXPECT_GT(diff, 1e-5);
  EXPECT_LT(diff, 1e-2);
}

TEST(Cli, InfoLogsOneLinePerStageAndASummaryQuietLogsNothing) {
  const fs::path out = testing::scratch_dir("cli-logging");
  std::string flags = tiny_run(out);
  flags.replace(flags.find("--log-level error"), 17, "--log-level info");
  auto info = run_command(mmgen() + " generate" + flags + " --prompt fox");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  auto count = [&](const std::string& text) {
    size_t n = 0;
    for (size_t at = info.err.find(text); at != std::string::npos; at = info.err.find(text, at + 1))
      ++n;
    return n;
  };
  for (const std::string stage :
       {"load: ", "encode: ", "denoise: 2 steps in ", "decode: 2 latent frames in ",
        "write: ", "done: 1 output(s) in "})
    EXPECT_EQ(count("] info " + stage), 1u) << stage << "\n" << info.err;
  EXPECT_NE(info.err.find("s/step"), std::string::npos) << info.err;
  EXPECT_NE(info.err.find(", peak memory "), std::string::npos) << info.err;
  auto quiet = run_command(mmgen() + " generate" + flags + " --prompt fox --quiet");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
}

TEST(Cli, BackendsListsTheCatalogue) {
  auto result = run_command(mmgen() + " backends --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_FALSE(out.empty());
  result = run_command(mmgen() + " backends");
  EXPECT_NE(result.out.find("sliding_tile_attn"), std::string::npos);
  EXPECT_NE(result.out.find("flashinfer"), std::string::npos);
}

TEST(Cli, HelpListsTheOptions) {
  auto result = run_command(mmgen() + " generate --help");
  EXPECT_EQ(result.exit_code, 0);
  for (const char* flag : {"--model-path", "--attention-backend-config",
                           "--component-attention-backends", "--dry-run"})
    EXPECT_NE(result.out.find(flag), std::string::npos) << flag;
}

}  // namespace
}  // namespace mmgen
