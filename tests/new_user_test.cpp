// What a new user trips over (issue 18), through the real executable: a sparse backend whose
// settings leave nothing sparse, metadata that records what ran, paths in config files read from
// the file's folder, where an attention backend came from, and Hugging Face model ids.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "core/file.h"
#include "core/json.h"
#include "pipeline/output.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::run_command;

std::vector<uint8_t> file_bytes(const fs::path& path) {
  const std::string text = read_text_file(path);
  return std::vector<uint8_t>(text.begin(), text.end());
}

std::string mmgen() {
  return testing::mmgen_binary().string();
}
fs::path wan_tiny() {
  return testing::source_dir() / "examples/models/wan-tiny";
}

// How many times `needle` occurs in `text`.
size_t count_of(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++count;
  return count;
}

// An STA mask-strategy file for wan-tiny (2 layers, 2 heads): window `w` for steps first..last.
fs::path write_sta_mask(const fs::path& path, int first, int last, int w = 1) {
  json mask = json::object();
  for (int t = first; t <= last; ++t)
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h)
        mask[std::to_string(t) + "_" + std::to_string(l) + "_" + std::to_string(h)] = {w, w, w};
  std::ofstream(path) << mask.dump();
  return path;
}

// The "self-attention visited N% of key blocks (B: S sparse and D dense step(s))" line's numbers.
struct StepSummary {
  double density = -1;
  std::string backend;
  int sparse = -1, dense = -1;
};
StepSummary step_summary(const std::string& log) {
  std::smatch m;
  StepSummary summary;
  if (std::regex_search(
          log, m,
          std::regex("self-attention visited ([0-9.]+)% of key blocks \\(([a-z0-9_]+): "
                     "([0-9]+) sparse and ([0-9]+) dense step\\(s\\)\\)"))) {
    summary.density = std::stod(m[1]);
    summary.backend = m[2];
    summary.sparse = std::stoi(m[3]);
    summary.dense = std::stoi(m[4]);
  }
  return summary;
}

// ------------------------------------------------------------------ item 3: silent dense

// STA's default skip_time_steps (15) with 4 steps runs dense in every step: one warning before
// anything is loaded, and the summary counts 0 sparse steps at 100% density. With
// skip_time_steps 1 the same run is sparse in 3 of 4 steps and visits fewer key blocks.
TEST(NewUser, StaThatLeavesNothingSparseIsWarnedAboutAndTheSummaryCountsSteps) {
  const fs::path dir = testing::scratch_dir("new-user-sta-dense");
  const fs::path mask = write_sta_mask(dir / "mask.json", 0, 3);
  const std::string base = mmgen() + " generate --model-path " + wan_tiny().string() +
                           " --prompt kite --height 128 --width 128 --num-frames 9 "
                           "--num-inference-steps 4 --max-sequence-length 16 --output-format npy "
                           "--overwrite --output-path " +
                           dir.string() + " --attention-backend sliding_tile_attn ";
  const auto dense = run_command(base +
                                 "--output-file-name dense --attention-backend-config "
                                 "'tile_size=[1,4,4],mask_strategy_file_path=" +
                                 mask.string() + "'");
  ASSERT_EQ(dense.exit_code, 0) << dense.err;
  const std::string warning =
      "attention: sliding_tile_attn runs dense in all 4 denoising step(s) (skip_time_steps 15 "
      "leaves none sparse)";
  EXPECT_EQ(count_of(dense.err, warning), 1u) << dense.err;
  // At plan time: before the weights are loaded.
  EXPECT_LT(dense.err.find(warning), dense.err.find("load:")) << dense.err;
  const StepSummary all_dense = step_summary(dense.err);
  EXPECT_EQ(all_dense.backend, "sliding_tile_attn") << dense.err;
  EXPECT_EQ(all_dense.sparse, 0);
  EXPECT_EQ(all_dense.dense, 4);
  EXPECT_DOUBLE_EQ(all_dense.density, 100.0);

  const auto sparse = run_command(base +
                                  "--output-file-name sparse --attention-backend-config "
                                  "'tile_size=[1,4,4],skip_time_steps=1,"
                                  "mask_strategy_file_path=" +
                                  mask.string() + "'");
  ASSERT_EQ(sparse.exit_code, 0) << sparse.err;
  EXPECT_EQ(sparse.err.find("runs dense in all"), std::string::npos) << sparse.err;
  const StepSummary mostly_sparse = step_summary(sparse.err);
  EXPECT_EQ(mostly_sparse.sparse, 3) << sparse.err;
  EXPECT_EQ(mostly_sparse.dense, 1);
  EXPECT_GT(mostly_sparse.density, 0.0);
  EXPECT_LT(mostly_sparse.density, 100.0);
}

// The same trap in V-MoBA: first_full_step (default 12) at or above the run's steps.
TEST(NewUser, VmobaFirstFullStepAtOrAboveTheStepsIsWarnedAbout) {
  const fs::path dir = testing::scratch_dir("new-user-vmoba-dense");
  const auto result =
      run_command(mmgen() + " generate --model-path " + wan_tiny().string() +
                  " --prompt kite --height 32 --width 32 --num-frames 1 --num-inference-steps 2 "
                  "--max-sequence-length 16 --output-format npy --overwrite --output-file-name v "
                  "--output-path " +
                  dir.string() + " --attention-backend vmoba_attn");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(count_of(result.err,
                     "attention: vmoba_attn runs dense in all 2 denoising step(s) "
                     "(first_full_step 12 leaves none sparse)"),
            1u)
      << result.err;
  const StepSummary summary = step_summary(result.err);
  EXPECT_EQ(summary.backend, "vmoba_attn") << result.err;
  EXPECT_EQ(summary.sparse, 0);
  EXPECT_EQ(summary.dense, 2);
}

// ------------------------------------------------------------------ item 7: metadata

// The PNG's settings and the npy's sidecar record the device that ran (not "auto"), the scheduler
// class, the flow shift used (wan-tiny's scheduler_config.json says 3) and the validated backend
// settings (defaults filled in), not the SPEC text (a file name relative to the current folder).
TEST(NewUser, MetadataRecordsWhatRan) {
  const fs::path dir = testing::scratch_dir("new-user-metadata");
  const fs::path configs = dir / "configs";
  fs::create_directories(configs);
  const fs::path mask = write_sta_mask(configs / "mask.json", 0, 0);
  std::ofstream(configs / "sta.json") << json({{"mask_strategy_file_path", mask.string()},
                                               {"skip_time_steps", 0},
                                               {"tile_size", {1, 4, 4}}})
                                             .dump();
  const std::string base = "cd " + dir.string() + " && " + mmgen() + " generate --model-path " +
                           wan_tiny().string() +
                           " --prompt kite --height 32 --width 32 --num-frames 1 "
                           "--num-inference-steps 1 --max-sequence-length 16 --overwrite "
                           "--output-path out --attention-backend sliding_tile_attn "
                           "--attention-backend-config configs/sta.json --device auto ";
  const json expected_config = {{"mask_strategy_file_path", mask.string()},
                                {"sta_mode", "STA_inference"},
                                {"skip_time_steps", 0},
                                {"window_size", {3, 3, 3}},
                                {"mask_search_threshold", 0.05},
                                {"tile_size", {1, 4, 4}}};

  const auto png = run_command(base + "--output-file-name picture.png");
  ASSERT_EQ(png.exit_code, 0) << png.err;
  const json from_png = json::parse(png_text(file_bytes(dir / "out/picture.png"), "parameters"));
  const auto npy = run_command(base + "--output-format npy --output-file-name exact");
  ASSERT_EQ(npy.exit_code, 0) << npy.err;
  const json sidecar = read_json_object(dir / "out/exact.npy.json");
  for (const json& settings : {from_png, sidecar}) {
    EXPECT_EQ(settings["device"], "cpu") << settings.dump();
    EXPECT_EQ(settings["scheduler"], "UniPCMultistepScheduler");
    EXPECT_EQ(settings["flow_shift"], 3.0);
    EXPECT_EQ(settings["attention_backend_config"], expected_config);
  }
  // --flow-shift given: that value is what ran.
  const auto shifted = run_command(base +
                                   "--output-format npy --output-file-name shifted "
                                   "--flow-shift 5");
  ASSERT_EQ(shifted.exit_code, 0) << shifted.err;
  EXPECT_EQ(read_json_object(dir / "out/shifted.npy.json")["flow_shift"], 5.0);
}

// ------------------------------------------------------------------ item 8: relative paths

// A mask_strategy_file_path inside a backend config file is read from that file's folder, and so
// is one inside a --config YAML (inline settings or a backend config file named there); one given
// on the command line stays relative to the current folder.
TEST(NewUser, PathsInConfigFilesAreReadFromTheirFolder) {
  const fs::path dir = testing::scratch_dir("new-user-relative");
  const fs::path configs = dir / "configs";
  fs::create_directories(configs / "sta");
  const fs::path mask = write_sta_mask(configs / "sta" / "mask.json", 15, 49);
  std::ofstream(configs / "sta" / "sta.json") << json({{"mask_strategy_file_path", "mask.json"}});
  std::ofstream(configs / "inline.yaml") << "attention_backend: sliding_tile_attn\n"
                                            "attention_backend_config:\n"
                                            "  mask_strategy_file_path: sta/mask.json\n";
  std::ofstream(configs / "named.yaml") << "attention_backend: sliding_tile_attn\n"
                                           "attention_backend_config: sta/sta.json\n";
  const fs::path elsewhere = dir / "elsewhere";
  fs::create_directories(elsewhere);
  const std::string run = "cd " + elsewhere.string() + " && " + mmgen() +
                          " generate --dry-run --model-path " + wan_tiny().string() +
                          " --prompt x ";
  auto mask_of = [&](const std::string& arguments) {
    const auto result = run_command(run + arguments);
    EXPECT_EQ(result.exit_code, 0) << arguments << "\n" << result.err;
    if (result.exit_code != 0) return std::string();
    return json::parse(result.out)["attention_backend_config"]["mask_strategy_file_path"]
        .get<std::string>();
  };
  EXPECT_EQ(mask_of("--attention-backend sliding_tile_attn --attention-backend-config ../configs/"
                    "sta/sta.json"),
            "../configs/sta/mask.json");
  EXPECT_EQ(mask_of("--config ../configs/inline.yaml"), "../configs/sta/mask.json");
  EXPECT_EQ(mask_of("--config " + (configs / "named.yaml").string()), mask.string());
  // On the command line a path is the user's: relative to the current folder.
  EXPECT_EQ(mask_of("--attention-backend sliding_tile_attn --attention-backend-config "
                    "mask_strategy_file_path=../configs/sta/mask.json"),
            "../configs/sta/mask.json");
  const auto missing =
      run_command(run +
                  "--attention-backend sliding_tile_attn --attention-backend-config "
                  "mask_strategy_file_path=sta/mask.json");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("no such file 'sta/mask.json'"), std::string::npos) << missing.err;
}

// ------------------------------------------------------------------ item 9: where from

// A backend set in a --config file is reported as coming from the config; --attention-backend fa
// on the command line beside a config file's VSA settings runs fa, warning once that the settings
// are unused. Settings given on the command line for another backend are still an error.
TEST(NewUser, ABackendFromAConfigFileIsReportedAsConfigAndTheCommandLineWins) {
  const fs::path dir = testing::scratch_dir("new-user-source");
  std::ofstream(dir / "vsa.yaml") << "attention_backend: video_sparse_attn\n"
                                     "attention_backend_config:\n"
                                     "  sparsity: 0.8\n";
  const std::string base = mmgen() + " generate --dry-run --model-path " + wan_tiny().string() +
                           " --prompt x --config " + (dir / "vsa.yaml").string();
  const auto from_config = run_command(base);
  ASSERT_EQ(from_config.exit_code, 0) << from_config.err;
  const json config_out = json::parse(from_config.out);
  EXPECT_EQ(config_out["components"]["transformer"]["attention_backend"], "video_sparse_attn");
  EXPECT_EQ(config_out["components"]["transformer"]["attention_backend_source"], "config");
  EXPECT_EQ(config_out["attention_backend_config"]["sparsity"], 0.8);

  const auto fa = run_command(base + " --attention-backend fa");
  ASSERT_EQ(fa.exit_code, 0) << fa.err;
  const json fa_out = json::parse(fa.out);
  EXPECT_EQ(fa_out["components"]["transformer"]["attention_backend"], "fa");
  EXPECT_EQ(fa_out["components"]["transformer"]["attention_backend_source"], "cli");
  EXPECT_EQ(fa_out["attention_backend_config"], json::object());
  EXPECT_EQ(count_of(fa.err, "warn"), 1u) << fa.err;
  EXPECT_NE(fa.err.find("attention_backend_config setting(s) sparsity are not used by fa"),
            std::string::npos)
      << fa.err;

  const auto explicit_settings =
      run_command(mmgen() + " generate --dry-run --model-path " + wan_tiny().string() +
                  " --prompt x --attention-backend fa --attention-backend-config sparsity=0.8");
  EXPECT_EQ(explicit_settings.exit_code, 1);
  EXPECT_NE(explicit_settings.err.find("fa takes no settings"), std::string::npos)
      << explicit_settings.err;
}

// ------------------------------------------------------------------ item 10: model ids

// A fake Hugging Face cache: models--acme--tiny with refs/main and refs/dev naming snapshots that
// link to wan-tiny.
struct FakeHub {
  fs::path hub;
  std::string main_commit = std::string(40, 'a');
  std::string dev_commit = std::string(39, 'b') + "c";
};
FakeHub make_fake_hub(const fs::path& hub) {
  FakeHub fake{hub};
  const fs::path repo = hub / "models--acme--tiny";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots");
  std::ofstream(repo / "refs" / "main") << fake.main_commit;  // no newline, as the hub writes it
  std::ofstream(repo / "refs" / "dev") << fake.dev_commit << "\n";
  fs::create_directory_symlink(wan_tiny(), repo / "snapshots" / fake.main_commit);
  fs::create_directory_symlink(wan_tiny(), repo / "snapshots" / fake.dev_commit);
  return fake;
}

TEST(NewUser, AModelIdIsFoundInTheLocalHuggingFaceCache) {
  const fs::path dir = testing::scratch_dir("new-user-hub");
  const FakeHub fake = make_fake_hub(dir / "hub");
  const fs::path repo = fake.hub / "models--acme--tiny";
  const std::string dry = " generate --dry-run --prompt x --model-path acme/tiny";
  auto model_path = [&](const std::string& environment, const std::string& extra) {
    const auto result = run_command("cd " + dir.string() + " && env -u HF_HUB_CACHE -u HF_HOME " +
                                    environment + " " + mmgen() + dry + extra);
    EXPECT_EQ(result.exit_code, 0) << environment << extra << "\n" << result.err;
    return result.exit_code == 0 ? json::parse(result.out)["model_path"].get<std::string>()
                                 : std::string();
  };
  const std::string hub_cache = "HF_HUB_CACHE=" + fake.hub.string();
  EXPECT_EQ(model_path(hub_cache, ""), (repo / "snapshots" / fake.main_commit).string());
  EXPECT_EQ(model_path(hub_cache, " --revision dev"),
            (repo / "snapshots" / fake.dev_commit).string());
  EXPECT_EQ(model_path(hub_cache, " --revision " + fake.dev_commit),
            (repo / "snapshots" / fake.dev_commit).string());
  // HF_HOME/hub, then ~/.cache/huggingface/hub.
  fs::create_directories(dir / "home" / ".cache" / "huggingface");
  fs::create_directory_symlink(fake.hub, dir / "home" / ".cache" / "huggingface" / "hub");
  EXPECT_EQ(model_path("HF_HOME=" + (dir / "home/.cache/huggingface").string(), ""),
            (dir / "home/.cache/huggingface/hub/models--acme--tiny/snapshots" / fake.main_commit)
                .string());
  EXPECT_EQ(model_path("HOME=" + (dir / "home").string(), ""),
            (dir / "home/.cache/huggingface/hub/models--acme--tiny/snapshots" / fake.main_commit)
                .string());
  // `mmgen inspect` and `mmgen encode` take an id too.
  const auto inspect = run_command(hub_cache + " " + mmgen() + " inspect --model-path acme/tiny");
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  const auto encode =
      run_command(hub_cache + " " + mmgen() + " encode --model-path acme/tiny --prompt x --out " +
                  (dir / "x.safetensors").string());
  EXPECT_EQ(encode.exit_code, 0) << encode.err;
  EXPECT_TRUE(fs::exists(dir / "x.safetensors"));

  // A local folder that exists wins over the id.
  fs::create_directories(dir / "acme");
  fs::create_directory_symlink(wan_tiny(), dir / "acme" / "tiny");
  const auto local = run_command("cd " + dir.string() + " && " + hub_cache + " " + mmgen() + dry);
  ASSERT_EQ(local.exit_code, 0) << local.err;
  EXPECT_EQ(json::parse(local.out)["model_path"], "acme/tiny");
}

TEST(NewUser, AModelIdNotInTheCacheSaysWhereMmgenLookedAndHowToDownloadIt) {
  const fs::path dir = testing::scratch_dir("new-user-hub-missing");
  const FakeHub fake = make_fake_hub(dir / "hub");
  const std::string run = "cd " + dir.string() + " && HF_HUB_CACHE=" + fake.hub.string() + " " +
                          mmgen() + " generate --prompt x --model-path ";
  const auto missing = run_command(run + "Wan-AI/Wan2.1-T2V-1.3B-Diffusers");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(count_of(missing.err, "\n"), 1u) << missing.err;
  EXPECT_NE(missing.err.find(fake.hub.string()), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("models--Wan-AI--Wan2.1-T2V-1.3B-Diffusers"), std::string::npos);
  EXPECT_NE(missing.err.find("`huggingface-cli download Wan-AI/Wan2.1-T2V-1.3B-Diffusers`"),
            std::string::npos)
      << missing.err;

  const auto no_branch = run_command(run + "acme/tiny --revision v2");
  EXPECT_EQ(no_branch.exit_code, 1);
  EXPECT_EQ(count_of(no_branch.err, "\n"), 1u) << no_branch.err;
  EXPECT_NE(no_branch.err.find("no revision 'v2'"), std::string::npos) << no_branch.err;
  EXPECT_NE(no_branch.err.find("`huggingface-cli download acme/tiny --revision v2`"),
            std::string::npos)
      << no_branch.err;

  const auto escape = run_command(run + "acme/tiny --revision ../../x");
  EXPECT_EQ(escape.exit_code, 1);
  EXPECT_NE(escape.err.find("--revision '../../x'"), std::string::npos) << escape.err;

  const auto folder_and_revision =
      run_command(run + wan_tiny().string() + " --revision main --dry-run");
  EXPECT_EQ(folder_and_revision.exit_code, 1);
  EXPECT_NE(folder_and_revision.err.find("is a local folder"), std::string::npos)
      << folder_and_revision.err;
}

}  // namespace
}  // namespace mmgen
