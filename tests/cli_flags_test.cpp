// What a new user types, through the real executable: output names whose extension picks the
// format, flags that exist only where they mean something, --version anywhere, a repeated flag,
// random seeds that can be repeated, the defaults --help shows, and attention backend names from
// other tools (diffusers, torch, flash-attn).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/file.h"
#include "core/npy.h"
#include "pipeline/output.h"
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
std::string model(const char* name = "wan-tiny") {
  return (testing::source_dir() / "examples/models" / name).string();
}

std::vector<uint8_t> bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A real run on wan-tiny: a fraction of a second.
std::string tiny(const fs::path& out, int frames) {
  return mmgen() + " generate --model-path " + model() + " --prompt fox --height 32 --width 48" +
         " --num-frames " + std::to_string(frames) +
         " --num-inference-steps 2 --max-sequence-length 16 --seed 3 --log-level error" +
         " --output-path " + out.string();
}

std::string dry_run(const std::string& flags) {
  return mmgen() + " generate --dry-run --model-path " + model() + " --prompt x " + flags;
}

// ------------------------------------------------------------------ output names

TEST(CliOutputNames, TheExtensionPicksTheFormat) {
  const fs::path out = testing::scratch_dir("names-format");
  struct Case {
    int frames;
    std::string name;
    std::vector<uint8_t> magic;  // the file's first bytes
    size_t magic_at = 0;
  };
  const std::vector<Case> cases = {
      {1, "one.jpg", {0xFF, 0xD8, 0xFF}},
      {1, "Two.JPEG", {0xFF, 0xD8, 0xFF}},
      {1, "three.webp", {'W', 'E', 'B', 'P'}, 8},
      {1, "four.png", {0x89, 'P', 'N', 'G'}},
      {1, "five.npy", {0x93, 'N', 'U', 'M', 'P', 'Y'}},
      {1, "six.mp4", {'f', 't', 'y', 'p'}, 4},
      {5, "clip.mp4", {'f', 't', 'y', 'p'}, 4},
      {5, "clip.npy", {0x93, 'N', 'U', 'M', 'P', 'Y'}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto result = run_command(tiny(out, c.frames) + " --output-file-name " + c.name);
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const std::vector<uint8_t> bytes = bytes_of(out / c.name);
    ASSERT_GE(bytes.size(), c.magic_at + c.magic.size());
    EXPECT_TRUE(std::equal(c.magic.begin(), c.magic.end(), bytes.begin() + long(c.magic_at)));
  }
  // A name without a media extension gets the format's added: one frame, a PNG.
  const auto plain = run_command(tiny(out, 1) + " --output-file-name run.v2");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_TRUE(fs::exists(out / "run.v2.png"));
  // Exactly the named files and their settings: nothing like one.jpg.png.
  EXPECT_EQ(files_in(out),
            std::vector<std::string>({"Two.JPEG", "Two.JPEG.json", "clip.mp4", "clip.mp4.json",
                                      "clip.npy", "clip.npy.json", "five.npy", "five.npy.json",
                                      "four.png", "one.jpg", "one.jpg.json", "run.v2.png",
                                      "six.mp4", "six.mp4.json", "three.webp", "three.webp.json"}));
  EXPECT_EQ(shape_string(read_npy(out / "clip.npy").shape()), "[5, 32, 48, 3]");
}

TEST(CliOutputNames, ANameThatCannotHoldTheOutputIsRefusedBeforeAnyWork) {
  const fs::path out = testing::scratch_dir("names-refused");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {tiny(out, 5) + " --output-file-name b.png",
       "--output-file-name b.png: a .png file holds one picture but --num-frames is 5; name it "
       ".mp4 or .npy"},
      {tiny(out, 5) + " --output-file-name b.jpg", "a .jpg file holds one picture"},
      {tiny(out, 1) + " --output-file-name a.gif",
       "mmgen cannot write .gif files; name it .png, .jpg, .webp (one frame), .mp4 (several "
       "frames) or .npy"},
      {tiny(out, 1) + " --output-file-name a.png --output-format npy",
       "--output-file-name a.png is a .png name but --output-format is npy; make them agree"},
  };
  for (const auto& [command, expected] : cases)
    expect_one_line_error(run_command(command), expected, command);
  EXPECT_TRUE(files_in(out).empty()) << "no partial output";
}

// ------------------------------------------------------------------ flags

TEST(CliFlags, ComponentPathFlagsExistOnlyForTheModelsComponents) {
  const fs::path dir = testing::scratch_dir("flags-components");
  const std::vector<std::pair<std::string, std::string>> cases = {
      // Coming features say so (they are no component of the model).
      {dry_run("--image-path a.png"),
       "generate: --image-path is not in mmgen yet (coming: image input (image-to-video, "
       "first-last-frame, img2img))"},
      {dry_run("--lora-path x"), "--lora-path x: expected a .safetensors file"},
      {dry_run("--vea-path x"), "unknown flag --vea-path (did you mean --vae-path?)"},
      {dry_run("--frobnicate"), "generate: unknown flag --frobnicate"},
      {dry_run("--image-path"), "generate: --image-path is not in mmgen yet"},
      {dry_run("--mask-path x"), "generate: unknown flag --mask-path"},
      {dry_run("--vae-path"), "generate: --vae-path needs a value"},
      {dry_run("--seed"), "generate: --seed needs a value"},
  };
  for (const auto& [command, expected] : cases) {
    const auto result = run_command(command);
    expect_one_line_error(result, expected, command);
    EXPECT_EQ(result.err.find("has no component"), std::string::npos) << result.err;
  }
  // The component flags name the model's components.
  const auto listed = run_command(dry_run("--mask-path x"));
  for (const char* flag : {"--transformer-path", "--vae-path", "--text-encoder-path"})
    EXPECT_NE(listed.err.find(flag), std::string::npos) << flag << ": " << listed.err;
  // In a config file: an unknown option.
  const fs::path config = dir / "run.yaml";
  std::ofstream(config) << "mask_path: x\n";
  expect_one_line_error(run_command(dry_run("--config " + config.string())),
                        config.string() + ": unknown option 'mask_path'", "config");
  // A real component's flag still works.
  const auto real = run_command(dry_run("--vae-path " + model() + "/vae"));
  ASSERT_EQ(real.exit_code, 0) << real.err;
  EXPECT_EQ(json::parse(real.out)["components"]["vae"]["path"], model() + "/vae");
}

TEST(CliFlags, VersionAnywhere) {
  for (const std::string arguments :
       {"--version", "-V", "generate --version", "generate --model-path /nonexistent -V",
        "inspect --height 32 --version", "options -V"}) {
    const auto result = run_command(mmgen() + " " + arguments);
    EXPECT_EQ(result.exit_code, 0) << arguments << ": " << result.err;
    EXPECT_EQ(result.out, "mmgen 0.1.0\n") << arguments;
    EXPECT_EQ(result.err, "") << arguments;
  }
}

TEST(CliFlags, ARepeatedFlagTakesItsLastValue) {
  const auto result = run_command(dry_run("--seed 1 --height 64 --seed 2 --height=32 --overwrite"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json request = json::parse(result.out)["request"];
  EXPECT_EQ(request["seed"], 2);
  EXPECT_EQ(request["height"], 32);
  // Every value is still checked, the overridden one too.
  expect_one_line_error(run_command(dry_run("--seed x --seed 2")),
                        "--seed: expected a whole number, got 'x'", "bad first value");
}

TEST(CliFlags, OptionsJsonIsTheOptionTable) {
  const auto result = run_command(mmgen() + " options --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json table = json::parse(result.out);
  const auto find = [&](const char* command, const char* name) {
    for (const auto& row : table[command])
      if (row["name"] == name) return row;
    return json();
  };
  const json frames = find("generate", "num-frames");
  ASSERT_FALSE(frames.is_null());
  EXPECT_EQ(frames["flag"], "--num-frames");
  EXPECT_EQ(frames["type"], "integer");
  EXPECT_EQ(frames["builtin_default"], 1);
  ASSERT_EQ(frames["configured_defaults"].size(), 4u);
  EXPECT_EQ(frames["configured_defaults"][0]["pipeline"], "WanPipeline");
  EXPECT_EQ(frames["configured_defaults"][0]["file"], "configs/wan.yaml");
  EXPECT_EQ(frames["configured_defaults"][0]["value"], 81);
  EXPECT_EQ(frames["configured_defaults"][1]["pipeline"], "ZImagePipeline");
  EXPECT_EQ(frames["configured_defaults"][1]["file"], "configs/zimage.yaml");
  EXPECT_EQ(frames["configured_defaults"][1]["value"], 1);
  EXPECT_EQ(frames["configured_defaults"][2]["pipeline"], "FluxPipeline");
  EXPECT_EQ(frames["configured_defaults"][2]["file"], "configs/flux.yaml");
  EXPECT_EQ(frames["default"],
            "81 from configs/wan.yaml (WanPipeline); 1 from configs/zimage.yaml (ZImagePipeline); "
            "1 from configs/flux.yaml (FluxPipeline); 1 from configs/qwenimage.yaml "
            "(QwenImagePipeline); 1 otherwise");
  const json height = find("generate", "height");
  EXPECT_EQ(height["configured_defaults"][0]["variants"],
            json({{"Wan2.1-T2V-1.3B", 480}, {"Wan2.1-T2V-14B", 720}}));
  EXPECT_EQ(find("generate", "device")["choices"], json({"auto", "cpu", "cuda"}));
  EXPECT_EQ(find("encode", "prompt")["repeatable"], true);
  EXPECT_FALSE(find("attention", "backend").is_null());
  EXPECT_TRUE(find("attention", "height").is_null());
}

// ------------------------------------------------------------------ defaults

// The defaults --help and `mmgen options` show are the ones a run takes: on a Wan model,
// configs/wan.yaml's, not the built-in ones they replace.
TEST(CliDefaults, HelpShowsTheDefaultsThatApply) {
  const auto help = run_command(mmgen() + " generate --help");
  ASSERT_EQ(help.exit_code, 0) << help.err;
  const auto options = run_command(mmgen() + " options");
  ASSERT_EQ(options.exit_code, 0) << options.err;
  EXPECT_EQ(options.out, help.out);
  const auto line_of = [&](const std::string& flag) {
    const size_t at = help.out.find("\n  " + flag + " ");
    EXPECT_NE(at, std::string::npos) << flag;
    return at == std::string::npos ? std::string()
                                   : help.out.substr(at + 1, help.out.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(line_of("--num-frames")
                .find("[default: 81 from configs/wan.yaml (WanPipeline); 1 from "
                      "configs/zimage.yaml (ZImagePipeline); 1 from configs/flux.yaml "
                      "(FluxPipeline); 1 from configs/qwenimage.yaml (QwenImagePipeline); 1 "
                      "otherwise]"),
            std::string::npos)
      << line_of("--num-frames");
  EXPECT_EQ(help.out.find("frames - 1) % 4 == 0 [default: 1]"), std::string::npos);
  EXPECT_NE(
      line_of("--height")
          .find("[default: 480 for Wan2.1-T2V-1.3B, 720 for Wan2.1-T2V-14B from configs/wan.yaml "
                "(WanPipeline); 1024 from configs/zimage.yaml (ZImagePipeline); 1024 from "
                "configs/flux.yaml (FluxPipeline); 1024 from configs/qwenimage.yaml "
                "(QwenImagePipeline); 480 otherwise]"),
      std::string::npos)
      << line_of("--height");

  // Every default a dry run on a Wan model takes is the one the table says applies (wan-tiny:
  // no mmgen.yaml of its own).
  const auto table = json::parse(run_command(mmgen() + " options --json").out)["generate"];
  const auto run = run_command(mmgen() + " generate --dry-run --model-path " + model("wan-tiny") +
                               " --prompt x");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json request = json::parse(run.out)["request"];
  size_t compared = 0;
  for (const auto& row : table) {
    std::string key = row["name"];
    std::replace(key.begin(), key.end(), '-', '_');
    // Given above, or resolved: auto -> cpu, the format from the frames.
    if (key == "model_path" || key == "prompt" || key == "dry_run" || key == "device" ||
        key == "output_format")
      continue;
    json expected = row["builtin_default"];
    for (const auto& configured : row["configured_defaults"]) {
      if (configured["pipeline"] != "WanPipeline") continue;  // the other pipelines' files
      if (!configured["value"].is_null()) expected = configured["value"];
      if (configured["variants"].contains("Wan2.1-T2V-1.3B"))  // wan-tiny is small
        expected = configured["variants"]["Wan2.1-T2V-1.3B"];
    }
    if (expected.is_null()) {
      EXPECT_FALSE(request.contains(key) && !request[key].is_null()) << key;
      continue;
    }
    ASSERT_TRUE(request.contains(key)) << key;
    EXPECT_EQ(request[key], expected) << key;
    // And --help names it.
    const std::string shown =
        expected.is_string() ? expected.get<std::string>().substr(0, 6) : expected.dump();
    if (row["type"] != "flag") {
      EXPECT_NE(line_of(row["flag"]).find(shown), std::string::npos) << line_of(row["flag"]);
    }
    ++compared;
  }
  EXPECT_GE(compared, 15u);
  EXPECT_EQ(request["num_frames"], 81);
}

// ------------------------------------------------------------------ seeds

TEST(CliSeeds, MinusOneDrawsASeedThatIsPrintedStoredAndRepeatable) {
  const fs::path out = testing::scratch_dir("seeds");
  std::string flags = tiny(out, 5) + " --output-format npy";
  flags.replace(flags.find(" --seed 3"), 9, "");
  flags.replace(flags.find("--log-level error"), 17, "--log-level info");
  const auto random = run_command(flags + " --seed -1 --output-file-name random");
  ASSERT_EQ(random.exit_code, 0) << random.err;
  const std::string marker = "seed: ";
  const size_t at = random.err.find(marker);
  ASSERT_NE(at, std::string::npos) << random.err;
  const uint64_t seed = std::stoull(random.err.substr(at + marker.size()));
  EXPECT_NE(random.err.find("seed: " + std::to_string(seed) +
                            " drawn at random for --seed -1; pass --seed " + std::to_string(seed) +
                            " to repeat this output"),
            std::string::npos)
      << random.err;
  const json settings = json::parse(read_text_file(out / "random.npy.json"));
  EXPECT_EQ(settings["seed"], seed);
  EXPECT_EQ(settings["seed_was_random"], true);

  const auto again =
      run_command(flags + " --seed " + std::to_string(seed) + " --output-file-name again");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(bytes_of(out / "again.npy"), bytes_of(out / "random.npy"));
  EXPECT_EQ(json::parse(read_text_file(out / "again.npy.json"))["seed"], seed);

  // Another draw gives another seed (two of 2^32 values agree once in four billion).
  const auto first = json::parse(run_command(dry_run("--seed -1")).out)["request"]["seed"];
  const auto second = json::parse(run_command(dry_run("--seed -1")).out)["request"]["seed"];
  EXPECT_NE(first, second);
  EXPECT_LT(first.get<uint64_t>(), 1ull << 32);

  // In a PNG the parameters chunk holds the seed that ran.
  std::string png = tiny(out, 1);
  png.replace(png.find(" --seed 3"), 9, " --seed -1");
  ASSERT_EQ(run_command(png + " --output-file-name picture.png").exit_code, 0);
  const json stored = json::parse(png_text(bytes_of(out / "picture.png"), "parameters"));
  EXPECT_TRUE(stored["seed"].is_number_unsigned()) << stored.dump();
  EXPECT_EQ(stored["seed_was_random"], true);

  expect_one_line_error(run_command(dry_run("--seed -2")),
                        "--seed: -2 is negative; use a number from 0 to 2^63-1, or -1 for a "
                        "random seed",
                        "seed -2");
}

// ------------------------------------------------------------------ attention names

TEST(CliAttentionNames, OtherToolsNamesMapToOursWithOneInfoLine) {
  struct Case {
    std::string flags;
    std::string backend;  // the transformer's
    std::string source;
    std::string note;
  };
  const std::vector<Case> cases = {
      {"--attention-backend sdpa", "torch_sdpa", "cli",
       "attention: --attention-backend sdpa: sdpa (torch scaled_dot_product_attention) is "
       "torch_sdpa here"},
      {"--attention-backend native", "torch_sdpa", "cli", "diffusers' native"},
      {"--attention-backend _native_flash", "torch_sdpa", "cli", "diffusers' _native_flash"},
      {"--attention-backend flash_attn", "fa", "cli",
       "flash_attn (the FlashAttention package) is fa here"},
      {"--attention-backend flash", "fa", "cli", "diffusers' flash (FlashAttention 2) is fa here"},
      {"--attention-backend _flash_3_hub", "fa", "cli", "diffusers' _flash_3_hub"},
      {"--attention-backend _flash_3", "fa", "cli", "diffusers' _flash_3"},
      {"--component-attention-backends transformer=flash_attention_2", "fa", "component",
       "--component-attention-backends transformer: transformers' flash_attention_2"},
      {"--component-attention-backends.transformer _native_cudnn", "torch_sdpa", "component",
       "diffusers' _native_cudnn"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    const auto result = run_command(dry_run(c.flags));
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const json transformer = json::parse(result.out)["components"]["transformer"];
    EXPECT_EQ(transformer["attention_backend"], c.backend);
    EXPECT_EQ(transformer["attention_backend_source"], c.source);
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_NE(result.err.find("] info attention: "), std::string::npos) << result.err;
    EXPECT_NE(result.err.find(c.note), std::string::npos) << result.err;
  }
  // The environment variable too; --quiet keeps the note to itself.
  const auto env = run_command("MMGEN_ATTENTION_BACKEND=sage " + dry_run("--quiet"));
  ASSERT_EQ(env.exit_code, 0) << env.err;
  EXPECT_EQ(env.err, "");
  EXPECT_EQ(json::parse(env.out)["components"]["transformer"]["attention_backend_source"], "env");
}

TEST(CliAttentionNames, OtherToolsNamesWithoutACounterpartSuggestOne) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dry_run("--attention-backend xformers"),
       "--attention-backend xformers: diffusers' xformers (xformers' memory-efficient attention) "
       "has no backend here; fa computes the same exact attention"},
      {dry_run("--attention-backend flex"), "use fa or torch_sdpa"},
      {dry_run("--component-attention-backends transformer=_native_xla"), "use fa or torch_sdpa"},
      {mmgen() + " attention --backend xformers --q q.npy --k k.npy --v v.npy --out o.npy",
       "attention: --backend xformers: diffusers' xformers"},
  };
  for (const auto& [command, expected] : cases)
    expect_one_line_error(run_command(command), expected, command);
}

TEST(CliAttentionNames, TheAttentionCommandTakesThemToo) {
  const fs::path dir = testing::scratch_dir("attention-names");
  std::vector<float> values(1 * 16 * 2 * 8);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float((i * 37) % 11) / 11.0f - 0.5f;
  for (const char* name : {"q", "k", "v"})
    write_npy(dir / (std::string(name) + ".npy"), Tensor::from_vector({1, 16, 2, 8}, values));
  const std::string inputs = " --q " + (dir / "q.npy").string() + " --k " +
                             (dir / "k.npy").string() + " --v " + (dir / "v.npy").string();
  const auto ours = run_command(mmgen() + " attention --backend fa" + inputs + " --out " +
                                (dir / "fa.npy").string());
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  const auto theirs = run_command(mmgen() + " attention --backend flash_attn" + inputs + " --out " +
                                  (dir / "flash_attn.npy").string());
  ASSERT_EQ(theirs.exit_code, 0) << theirs.err;
  EXPECT_NE(theirs.err.find("attention: --backend flash_attn: flash_attn (the FlashAttention "
                            "package) is fa here"),
            std::string::npos)
      << theirs.err;
  EXPECT_EQ(bytes_of(dir / "flash_attn.npy"), bytes_of(dir / "fa.npy"));
}

}  // namespace
}  // namespace mmgen
