// The first hour of a new user (issue 51), through the real executable: one test per trap, each
// asserting what the user sees. Defaults that fit the model (the folder's mmgen.yaml, recognised
// checkpoints), refusals before work (an output folder that cannot be written, the dry run refusing
// what the run refuses), values nothing reads, and the names people bring from other tools.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/file.h"
#include "core/json.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::expect_one_line_error;
using testing::run_command;

std::string mmgen() {
  return testing::mmgen_binary().string();
}
fs::path example(const char* name) {
  return testing::source_dir() / "examples/models" / name;
}
fs::path repo_fixture(const char* name) {
  return testing::source_dir() / "tests/fixtures" / name / "model";
}

// `mmgen generate --dry-run` on `model` with `flags`; the JSON or a failure.
json dry_run(const fs::path& model, const std::string& flags = "") {
  const auto result = run_command(mmgen() + " generate --dry-run --prompt x --model-path " +
                                  model.string() + " " + flags);
  EXPECT_EQ(result.exit_code, 0) << flags << "\n" << result.err;
  return result.exit_code == 0 ? json::parse(result.out) : json();
}

// A copy of `model` whose files are links to the original's, so a config can be changed cheaply.
fs::path linked_copy(const fs::path& model, const fs::path& to) {
  fs::remove_all(to);
  for (const auto& entry : fs::recursive_directory_iterator(model)) {
    const fs::path target = to / fs::relative(entry.path(), model);
    if (entry.is_directory())
      fs::create_directories(target);
    else
      fs::create_symlink(fs::absolute(entry.path()), target);
  }
  return to;
}

// Replaces a linked file with a copy of `value`.
void write_config(const fs::path& file, const json& value) {
  fs::remove(file);
  std::ofstream(file) << value.dump(2);
}

// ------------------------------------------------------------------ defaults that fit the model

// The example model's folder carries its own defaults: the bare command draws 128x128 in 20 steps
// instead of starting Wan2.1's 832x480, 81 frames and 50 steps; each value says where it is from,
// and the command line and --config still win.
TEST(FirstHour, TheExampleModelRunsAtItsOwnDefaults) {
  const json out = dry_run(example("wan-shapes"));
  ASSERT_FALSE(out.is_null());
  const json& request = out["request"];
  EXPECT_EQ(request["height"], 128);
  EXPECT_EQ(request["width"], 128);
  EXPECT_EQ(request["num_frames"], 1);
  EXPECT_EQ(request["num_inference_steps"], 20);
  EXPECT_EQ(request["guidance_scale"], 4.0);
  EXPECT_EQ(request["max_sequence_length"], 32);
  const std::string file = (example("wan-shapes") / "mmgen.yaml").string();
  EXPECT_EQ(out["model_defaults_file"], file);
  EXPECT_EQ(out["setting_sources"]["num_inference_steps"], file);
  EXPECT_EQ(out["setting_sources"]["fps"], "configs/wan.yaml");
  EXPECT_EQ(out["setting_sources"]["seed"], "built-in");
  EXPECT_EQ(out["setting_sources"]["prompt"], "command line");
  // A small model of its own is no published checkpoint.
  EXPECT_TRUE(out["defaults_variant"].is_null());

  const json flagged = dry_run(example("wan-shapes"), "--num-inference-steps 7");
  EXPECT_EQ(flagged["request"]["num_inference_steps"], 7);
  EXPECT_EQ(flagged["setting_sources"]["num_inference_steps"], "command line");
  const fs::path dir = testing::scratch_dir("first-hour-config");
  std::ofstream(dir / "run.yaml") << "height: 64\n";
  const json configured = dry_run(example("wan-shapes"), "--config " + (dir / "run.yaml").string());
  EXPECT_EQ(configured["request"]["height"], 64);
  EXPECT_EQ(configured["request"]["width"], 128);
  EXPECT_EQ(configured["setting_sources"]["height"], "--config " + (dir / "run.yaml").string());

  // --help with the model names the defaults it takes and their file.
  const auto help =
      run_command(mmgen() + " generate --help --model-path " + example("wan-shapes").string());
  ASSERT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("[default: 20 from " + file + "]"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("[default: 16.0 from configs/wan.yaml]"), std::string::npos) << help.out;
}

TEST(FirstHour, VideoFromAModelThatDrawsStillsIsWarnedAbout) {
  const auto result = run_command(mmgen() + " generate --dry-run --prompt x --num-frames 5 " +
                                  "--model-path " + example("wan-shapes").string());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("says this model draws stills"), std::string::npos) << result.err;
  EXPECT_EQ(json::parse(result.out)["warnings"].size(), 1u);
  const auto still = run_command(mmgen() + " generate --dry-run --prompt x --model-path " +
                                 example("wan-shapes").string());
  EXPECT_EQ(still.err.find("draws stills"), std::string::npos) << still.err;
}

TEST(FirstHour, ABadModelDefaultsFileIsOneLine) {
  const fs::path model =
      linked_copy(example("wan-tiny"), testing::scratch_dir("first-hour-bad") / "m");
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"draws: film\n", "mmgen.yaml: draws must be stills"},
           {"steps: 3\n", "unknown option 'steps' (mmgen calls it num_inference_steps)"},
           {"model_path: elsewhere\n", "a model folder's defaults may not set model_path"},
           {"vae_path: other\n", "a model folder's defaults may not replace its components"},
           {"height: [1\n", "mmgen.yaml"}}) {
    std::ofstream(model / "mmgen.yaml") << text;
    expect_one_line_error(
        run_command(mmgen() + " generate --dry-run --prompt x --model-path " + model.string()),
        expected, text);
  }
}

// Published checkpoints recognised by their configs or name take their authors' settings.
TEST(FirstHour, PublishedCheckpointsTakeTheirRecommendedSettings) {
  const fs::path dir = testing::scratch_dir("first-hour-variants");
  const fs::path schnell = linked_copy(repo_fixture("flux-tiny"), dir / "schnell");
  json config = read_json_object(repo_fixture("flux-tiny") / "transformer/config.json");
  config["guidance_embeds"] = false;
  write_config(schnell / "transformer/config.json", config);
  const json fast = dry_run(schnell, "--height 32 --width 32");
  EXPECT_EQ(fast["defaults_variant"], "FLUX.1-schnell");
  EXPECT_EQ(fast["request"]["num_inference_steps"], 4);
  EXPECT_EQ(fast["request"]["guidance_scale"], 0.0);
  EXPECT_EQ(fast["request"]["max_sequence_length"], 256);
  EXPECT_EQ(fast["setting_sources"]["num_inference_steps"], "configs/flux.yaml (FLUX.1-schnell)");
  const json dev = dry_run(repo_fixture("flux-tiny"), "--height 32 --width 32");
  EXPECT_EQ(dev["request"]["num_inference_steps"], 28);
  EXPECT_TRUE(dev["defaults_variant"].is_null());

  if (!testing::shared_dir().empty()) {
    const fs::path turbo =
        linked_copy(testing::shared_dir() / "fixtures/zimage-tiny/model", dir / "Z-Image-Turbo");
    const json distilled = dry_run(turbo, "--height 32 --width 32");
    EXPECT_EQ(distilled["defaults_variant"], "Z-Image-Turbo");
    EXPECT_EQ(distilled["request"]["num_inference_steps"], 9);
    EXPECT_EQ(distilled["request"]["guidance_scale"], 0.0);
  }
}

// ------------------------------------------------------------------ refusals before work

// An output folder that cannot take a file is found before loading, in the run and the dry run.
TEST(FirstHour, AnOutputFolderThatCannotBeWrittenIsRefusedBeforeLoading) {
  const fs::path dir = testing::scratch_dir("first-hour-unwritable");
  std::ofstream(dir / "a-file") << "x";
  const std::string base = mmgen() + " generate --prompt x --model-path " +
                           example("wan-tiny").string() + " --height 32 --width 32 " +
                           "--num-inference-steps 2 --output-path " + (dir / "a-file/out").string();
  const auto run = run_command(base);
  expect_one_line_error(run, "a-file is not a folder; pass a folder for outputs", "run");
  const auto dry = run_command(base + " --dry-run");
  EXPECT_EQ(dry.err, run.err);
  EXPECT_EQ(dry.exit_code, 1);
  // A folder that does not exist yet is fine (it is made when the output is written); no probe
  // file is left behind.
  const json fine = dry_run(example("wan-tiny"), "--output-path " + (dir / "new/deeper").string());
  EXPECT_FALSE(fs::exists(dir / "new"));
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_EQ(entry.path().filename().string().find(".mmgen-write-probe"), std::string::npos);
}

// The dry run applies the run's checks before loading, memory included, and prints the plan.
TEST(FirstHour, TheDryRunRefusesWhatTheRunRefuses) {
  const std::string base = "MMGEN_AVAILABLE_MEMORY=4G " + mmgen() +
                           " generate --prompt x --model-path " + example("wan-tiny").string() +
                           " --num-frames 1 --height 16384 --width 16384";
  const auto run = run_command(base);
  const auto dry = run_command(base + " --dry-run");
  expect_one_line_error(dry, "4.00 GiB is free (MMGEN_AVAILABLE_MEMORY)", "dry run");
  EXPECT_EQ(dry.err, run.err);
  EXPECT_EQ(dry.exit_code, run.exit_code);
  const json plan = dry_run(example("wan-tiny"), "--height 32 --width 32")["memory"];
  EXPECT_EQ(plan["fits"], true);
  EXPECT_GT(plan["needed_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(plan["estimate"]["total_bytes"], plan["needed_bytes"]);
}

// ------------------------------------------------------------------ silently unused values

TEST(FirstHour, ValuesAPipelineDoesNotReadAreNamedWithTheOptionThatActs) {
  const auto warnings = [](const fs::path& model, const std::string& flags) {
    return dry_run(model, "--height 32 --width 32 " + flags)["warnings"].dump();
  };
  const fs::path qwen = repo_fixture("qwenimage-tiny"), flux = repo_fixture("flux-tiny");
  EXPECT_NE(warnings(qwen, "--guidance-scale 5 --negative-prompt ' '")
                .find("--guidance-scale 5 has no effect on Qwen-Image: its classifier-free "
                      "guidance is --true-cfg-scale (4 now)"),
            std::string::npos);
  // The default true CFG scale without a negative prompt: no flag of the user's is blamed.
  const std::string defaults = warnings(qwen, "");
  EXPECT_NE(defaults.find("true CFG is off: Qwen-Image's default true CFG scale 4"),
            std::string::npos)
      << defaults;
  EXPECT_EQ(defaults.find("--true-cfg-scale"), std::string::npos) << defaults;
  EXPECT_NE(warnings(qwen, "--true-cfg-scale 3").find("--true-cfg-scale 3: no --negative-prompt"),
            std::string::npos);
  EXPECT_EQ(warnings(qwen, "--negative-prompt ' '"), "[]");
  EXPECT_NE(warnings(flux, "--negative-prompt blurry")
                .find("--negative-prompt is unused: FLUX reads a negative prompt only with true "
                      "CFG; pass --true-cfg-scale above 1"),
            std::string::npos);
  EXPECT_EQ(warnings(flux, "--negative-prompt blurry --true-cfg-scale 2"), "[]");
  EXPECT_NE(warnings(example("wan-tiny"), "--true-cfg-scale 2")
                .find("--true-cfg-scale 2 has no effect on Wan"),
            std::string::npos);
  if (!testing::shared_dir().empty()) {
    EXPECT_NE(warnings(testing::shared_dir() / "fixtures/zimage-tiny/model", "--true-cfg-scale 2")
                  .find("--true-cfg-scale 2 has no effect on Z-Image: its classifier-free "
                        "guidance is --guidance-scale"),
              std::string::npos);
  }
}

// The run's first line states the guidance that acts: Qwen-Image's true CFG, not "guidance 5".
TEST(FirstHour, TheRunLogStatesTheGuidanceThatActs) {
  const fs::path out = testing::scratch_dir("first-hour-qwen-log");
  const auto run = run_command(mmgen() + " generate --prompt x --model-path " +
                               repo_fixture("qwenimage-tiny").string() +
                               " --height 32 --width 32 --num-inference-steps 2 --output-format "
                               "npy --output-path " +
                               out.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("2 steps, true CFG off, seed"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("guidance 5"), std::string::npos) << run.err;
}

// ------------------------------------------------------------------ names a person types

TEST(FirstHour, OtherToolsNamesAndComingFeaturesAreAnswered) {
  const std::string base =
      mmgen() + " generate --dry-run --prompt x --model-path " + example("wan-tiny").string() + " ";
  for (const auto& [flags, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--steps 4", "unknown flag --steps (mmgen calls it --num-inference-steps)"},
           {"--num-step 4", "unknown flag --num-step (mmgen calls it --num-inference-steps)"},
           {"--cfg-scale 4", "unknown flag --cfg-scale (mmgen calls it --guidance-scale)"},
           {"-W 512", "unknown flag -W (mmgen calls it --width)"},
           {"-H 512", "unknown flag -H (mmgen calls it --height)"},
           {"--sampling-method euler", "--sampling-method is not in mmgen yet (coming: choosing"},
           {"--sampler euler", "--sampler is not in mmgen yet (coming: choosing the sampler"},
           {"--image-path a.png", "--image-path is not in mmgen yet (coming: image input"},
           {"--lora x.safetensors", "unknown flag --lora (mmgen calls it --lora-path)"},
           {"--lora-model-dir loras", "--lora-model-dir is not in mmgen yet (coming: LoRAs from"}})
    expect_one_line_error(run_command(base + flags), expected, flags);
  const fs::path dir = testing::scratch_dir("first-hour-foreign-key");
  std::ofstream(dir / "c.yaml") << "steps: 4\n";
  expect_one_line_error(run_command(base + "--config " + (dir / "c.yaml").string()),
                        "unknown option 'steps' (mmgen calls it num_inference_steps)", "config");
  expect_one_line_error(run_command(mmgen() + " genrate"),
                        "unknown command 'genrate': did you mean `mmgen generate`?", "genrate");
  expect_one_line_error(run_command(mmgen() + " serve"),
                        "mmgen serve (an HTTP server with a job queue) is not in mmgen yet",
                        "serve");
  // Backend shorthands are the backends they stand for.
  for (const auto& [shorthand, backend] :
       std::vector<std::pair<std::string, std::string>>{{"sta", "sliding_tile_attn"},
                                                        {"vsa", "video_sparse_attn"},
                                                        {"sla", "sla_attn"},
                                                        {"vmoba", "vmoba_attn"},
                                                        {"svg2", "sparse_video_gen_2_attn"}}) {
    const json out = dry_run(example("wan-tiny"),
                             "--height 32 --width 32 --component-attention-backends "
                             "transformer=" +
                                 shorthand);
    EXPECT_EQ(out["components"]["transformer"]["attention_backend"], backend) << shorthand;
  }
}

TEST(FirstHour, SizesAndFrameCountsAreSuggestedTheWayTheyAreTyped) {
  const std::string base =
      mmgen() + " generate --dry-run --prompt x --model-path " + example("wan-tiny").string() + " ";
  for (const auto& [flags, expected] : std::vector<std::pair<std::string, std::string>>{
           // Width first, as the log prints sizes, with the flags spelled out.
           {"--width 100 --height 50",
            "--width 100 --height 50: Wan needs multiples of 16; try --width 96 --height 48"},
           {"--width 0 --height 50", "(got 0x50, width x height)"},
           // The nearest valid count, not the one below.
           {"--num-frames 4", "Wan needs (frames - 1) divisible by 4; try 5"},
           {"--num-frames 6", "try 5"},
           {"--num-frames 3", "try 1 or 5"},
           {"--cfg-parallel", "it needs an even --gpus (got 1)"}})
    expect_one_line_error(run_command(base + flags), expected, flags);
  // --cfg-parallel names only the condition that fails.
  const auto parallel = run_command(base + "--cfg-parallel");
  EXPECT_EQ(parallel.err.find("guidance-scale"), std::string::npos) << parallel.err;
  // jpeg is jpg, as the .jpeg extension is.
  EXPECT_EQ(
      dry_run(
          example("wan-tiny"),
          "--height 32 --width 32 --num-frames 1 --output-format jpeg")["request"]["output_format"],
      "jpg");
  if (!testing::shared_dir().empty())
    expect_one_line_error(
        run_command(mmgen() +
                    " generate --dry-run --prompt x --height 30 --width 48 --model-path " +
                    (testing::shared_dir() / "fixtures/zimage-tiny/model").string()),
        "Z-Image needs multiples of 4; try --width 48 --height 28", "zimage size");
}

TEST(FirstHour, AFixtureFolderPointsAtItsModel) {
  const fs::path fixture = testing::source_dir() / "tests/fixtures/flux-tiny";
  expect_one_line_error(
      run_command(mmgen() + " generate --dry-run --prompt x --model-path " + fixture.string()),
      "has no model_index.json, but " + (fixture / "model").string() + " has: pass --model-path " +
          (fixture / "model").string(),
      "fixture");
}

TEST(FirstHour, MalformedEnvironmentValuesAreErrors) {
  const std::string command =
      " " + mmgen() + " generate --dry-run --prompt x --model-path " + example("wan-tiny").string();
  expect_one_line_error(run_command("MMGEN_AVAILABLE_MEMORY=lots" + command),
                        "environment: MMGEN_AVAILABLE_MEMORY='lots' is not a size such as 24G",
                        "memory");
  expect_one_line_error(run_command("MMGEN_OP_PROFILE=yes" + command),
                        "environment: MMGEN_OP_PROFILE='yes' is not 0, 1 or sync", "profile");
  EXPECT_EQ(run_command("MMGEN_AVAILABLE_MEMORY=24G" + command).exit_code, 0);
}

TEST(FirstHour, DeviceCudaOnABuildWithoutCudaSaysExactlyThat) {
#ifdef MMGEN_HAVE_CUDA
  GTEST_SKIP() << "this build has CUDA; the CPU build (the test command's) checks the line";
#endif
  const auto result = run_command(mmgen() + " generate --dry-run --prompt x --device cuda " +
                                  "--model-path " + example("wan-tiny").string());
  expect_one_line_error(result,
                        "--device cuda: this mmgen was built without CUDA support; rebuild with "
                        "-DMMGEN_CUDA=ON",
                        "cuda");
}

// Every path in a config file is read from the file's folder, whatever the current folder is.
TEST(FirstHour, EveryPathInAConfigFileIsReadFromItsFolder) {
  const fs::path dir = testing::scratch_dir("first-hour-config-paths");
  fs::create_directories(dir / "configs" / "prompts");
  std::ofstream(dir / "configs/prompts/list.txt") << "a\nb\n";
  fs::create_directories(dir / "elsewhere");
  std::ofstream(dir / "configs/run.yaml")
      << "model_path: ../models/tiny\noutput_path: out\nprompt_file_path: prompts/list.txt\n"
         "height: 32\nwidth: 32\n";
  fs::create_directories(dir / "models");
  fs::create_directory_symlink(example("wan-tiny"), dir / "models/tiny");
  const auto result = run_command("cd " + (dir / "elsewhere").string() + " && " + mmgen() +
                                  " generate --dry-run --config ../configs/run.yaml");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json out = json::parse(result.out);
  EXPECT_EQ(out["request"]["output_path"], "../configs/out");
  EXPECT_EQ(out["request"]["prompt_file_path"], "../configs/prompts/list.txt");
  EXPECT_EQ(out["prompts"], json({"a", "b"}));
  EXPECT_EQ(out["model_path"], "../models/tiny");
}

}  // namespace
}  // namespace mmgen
