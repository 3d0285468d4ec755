// Every `build/mmgen ...` command of README.md and docs/usage.md does what its text says. The
// commands are read from the pages' code blocks and run as written, from a scratch folder that
// looks like the repository root (build/mmgen, examples/), with DIR meaning
// examples/models/wan-shapes; the ones too slow for a test at their size run with --dry-run and
// the check reads the resolved request. Each command has its check below, and a command added to
// (or removed from) the pages without one fails the test, so the pages cannot drift.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "core/file.h"
#include "core/safetensors.h"
#include "pipeline/output.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A command of a page: its text as one line, and what a console block shows after it.
struct DocCommand {
  std::string page;
  std::string text;
  std::vector<std::string> output;  // console blocks: the lines up to the next `$`
  int exit_code = 0;                // from a `$ echo $?` that follows
};

// The text before a shell comment (a # outside quotes after a space).
std::string without_comment(const std::string& line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && i > 0 && line[i - 1] == ' ') {
      return line.substr(0, i);
    }
  }
  return line;
}

std::string collapsed(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::vector<DocCommand> doc_commands(const std::string& page) {
  // Code blocks inside list items are indented: their lines lose the fence's indent.
  std::vector<std::string> lines;
  size_t indent = 0;
  bool inside = false;
  for (const std::string& raw : lines_of(read_text_file(testing::source_dir() / page))) {
    const size_t fence = raw.find("```");
    if (fence != std::string::npos && raw.find_first_not_of(' ') == fence) {
      inside = !inside;
      indent = fence;
      lines.push_back(raw.substr(fence));
    } else {
      lines.push_back(inside && raw.size() >= indent && raw.find_first_not_of(' ') >= indent
                          ? raw.substr(indent)
                          : raw);
    }
  }
  const std::regex command_start(R"(^(\$ )?([A-Z_]+=\S+ )*build/mmgen )");
  std::vector<DocCommand> commands;
  bool in_block = false, console = false, collecting = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.starts_with("```")) {
      in_block = !in_block;
      console = in_block && line == "```console";
      collecting = false;
      continue;
    }
    if (!in_block) continue;
    if (console && line == "$ echo $?" && !commands.empty() && i + 1 < lines.size()) {
      commands.back().exit_code = std::stoi(lines[++i]);
      collecting = false;
      continue;
    }
    if (std::regex_search(line, command_start)) {
      std::string text = line.starts_with("$ ") ? line.substr(2) : line;
      while (text.ends_with("\\") && i + 1 < lines.size())
        text = text.substr(0, text.size() - 1) + " " + lines[++i];
      commands.push_back({page, collapsed(without_comment(text)), {}, 0});
      collecting = console;
      continue;
    }
    if (console && line.starts_with("$ ")) collecting = false;
    if (collecting) commands.back().output.push_back(line);
  }
  return commands;
}

// A folder laid out like the repository root after a build.
fs::path checkout() {
  const fs::path root = testing::scratch_dir("docs-commands");
  fs::create_directories(root / "build");
  fs::create_symlink(testing::mmgen_binary(), root / "build/mmgen");
  fs::create_directory_symlink(testing::source_dir() / "examples", root / "examples");
  std::ofstream(root / "prompts.txt") << "a red circle on a blue background\n# a comment\n\n"
                                         "a yellow triangle on a purple background\n";
  // A Hugging Face cache holding the id docs/usage.md names, its snapshot being wan-shapes.
  const fs::path repo = root / "hf-cache/models--Wan-AI--Wan2.1-T2V-1.3B-Diffusers";
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots");
  std::ofstream(repo / "refs/main") << commit;
  fs::create_directory_symlink(testing::source_dir() / "examples/models/wan-shapes",
                               repo / "snapshots" / commit);
  // The Z-Image id docs/usage.md names, its snapshot being the zimage-tiny fixture (../shared)
  // with Z-Image's own RoPE table sizes (axes_lens), so that the command's 1024x1024 plans as it
  // would on the real model (the tiny one's tables stop at 128 pixels; a dry run reads configs
  // only).
  if (!testing::shared_dir().empty()) {
    const fs::path tiny = testing::shared_dir() / "fixtures/zimage-tiny/model";
    const fs::path zimage = root / "hf-cache/models--Tongyi-MAI--Z-Image-Turbo";
    const fs::path snapshot = zimage / "snapshots" / commit;
    fs::create_directories(zimage / "refs");
    fs::create_directories(snapshot / "transformer");
    std::ofstream(zimage / "refs/main") << commit;
    for (const char* entry : {"model_index.json", "scheduler", "text_encoder", "tokenizer", "vae"})
      fs::create_symlink(tiny / entry, snapshot / entry);
    fs::create_symlink(tiny / "transformer/diffusion_pytorch_model.safetensors",
                       snapshot / "transformer/diffusion_pytorch_model.safetensors");
    json transformer = json::parse(read_text_file(tiny / "transformer/config.json"));
    transformer["axes_lens"] = {1536, 512, 512};
    testing::write_json_file(snapshot / "transformer/config.json", transformer);
  }
  // The FLUX ids docs/usage.md names, their snapshots being the flux-tiny fixture (in the
  // repository); schnell's with the fixture's transformer without a guidance embedder.
  for (const char* name : {"FLUX.1-dev", "FLUX.1-schnell"}) {
    const fs::path tiny = testing::source_dir() / "tests/fixtures/flux-tiny";
    const fs::path flux = root / "hf-cache" / (std::string("models--black-forest-labs--") + name);
    const fs::path snapshot = flux / "snapshots" / commit;
    fs::create_directories(flux / "refs");
    fs::create_directories(snapshot);
    std::ofstream(flux / "refs/main") << commit;
    for (const char* entry : {"model_index.json", "scheduler", "text_encoder", "text_encoder_2",
                              "tokenizer", "tokenizer_2", "vae"})
      fs::create_symlink(tiny / "model" / entry, snapshot / entry);
    fs::create_directory_symlink(std::string(name) == "FLUX.1-dev"
                                     ? tiny / "model/transformer"
                                     : tiny / "reference/transformer_schnell",
                                 snapshot / "transformer");
  }
  {  // The Qwen-Image id docs/usage.md names, its snapshot being the qwenimage-tiny fixture.
    const fs::path qwen = root / "hf-cache/models--Qwen--Qwen-Image";
    fs::create_directories(qwen / "refs");
    fs::create_directories(qwen / "snapshots");
    std::ofstream(qwen / "refs/main") << commit;
    fs::create_directory_symlink(testing::source_dir() / "tests/fixtures/qwenimage-tiny/model",
                                 qwen / "snapshots" / commit);
  }
  // The LoRA docs/usage.md names: the wan-tiny-lora fixture's (a dry run reads no weights).
  fs::copy_file(testing::source_dir() / "tests/fixtures/wan-tiny-lora/b_original.safetensors",
                root / "lightx2v_step_distill_lora.safetensors");
  setenv("HF_HUB_CACHE", (root / "hf-cache").c_str(), 1);
  // run.yaml as docs/usage.md shows it.
  const std::string usage = read_text_file(testing::source_dir() / "docs/usage.md");
  const size_t yaml = usage.find("```yaml\n# run.yaml");
  EXPECT_NE(yaml, std::string::npos) << "docs/usage.md shows no run.yaml";
  if (yaml != std::string::npos) {
    const size_t start = usage.find('\n', yaml) + 1;
    std::ofstream(root / "run.yaml") << usage.substr(start, usage.find("```", start) - start);
  }
  return root;
}

struct DocRun {
  testing::CommandResult result;
  fs::path root;
  json dry_run;  // the request of a --dry-run
};

// Days, times, durations and memory sizes differ from run to run: digits become #.
std::string masked(const std::string& line) {
  return std::regex_replace(line, std::regex("[0-9a-f]{8}\\.png|[0-9]+"), "#");
}

// Checks the one PNG in `folder` and returns the settings stored in it.
json expect_png(const fs::path& folder, const std::string& prompt, int64_t seed) {
  std::vector<fs::path> pngs;
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.path().extension() == ".png") pngs.push_back(entry.path());
  EXPECT_EQ(pngs.size(), 1u) << "one PNG in " << folder;
  if (pngs.size() != 1) return json();
  std::ifstream in(pngs[0], std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in),
                                   std::istreambuf_iterator<char>()};
  const json settings = json::parse(png_text(bytes, "parameters"));
  EXPECT_EQ(settings["prompt"], prompt);
  EXPECT_EQ(settings["seed"], seed);
  EXPECT_EQ(settings["num_frames"], 1);
  return settings;
}

struct Expectation {
  bool dry_run = false;   // run with --dry-run appended (a full run is too slow for a test)
  bool fragment = false;  // "generate ... --vae-tiling": an illustration, not a command
  std::function<void(const DocCommand&, const DocRun&)> check;
  bool needs_shared = false;  // its model is a fixture of ../shared: skipped without it
};

const std::string kWanShapesPng =
    "build/mmgen generate --model-path examples/models/wan-shapes --prompt \"a blue square on a "
    "yellow background\" --negative-prompt \"\" --height 128 --width 128 --num-frames 1 "
    "--num-inference-steps 20 --guidance-scale 4 --max-sequence-length 32 --seed 1";
const std::string kBatch =
    "build/mmgen generate --model-path DIR --prompt-file-path prompts.txt --num-frames 1";

std::map<std::string, Expectation> expectations() {
  std::map<std::string, Expectation> e;
  // README.md
  e["build/mmgen generate --model-path DIR --prompt \"a red fox running through snow\" --height "
    "480 --width 832 --num-frames 81 --num-inference-steps 50 --seed 42"] = {
      true, false, [](const DocCommand&, const DocRun& run) {
        // "an 81-frame video (MP4 + settings in a .json beside it)"
        EXPECT_EQ(run.dry_run["request"]["num_frames"], 81);
        EXPECT_EQ(run.dry_run["request"]["output_format"], "mp4");
        EXPECT_EQ(run.dry_run["request"]["seed"], 42);
      }};
  e[kWanShapesPng] = {false, false, [](const DocCommand&, const DocRun& run) {
                        // "one frame gives a PNG (settings stored in the file)"
                        expect_png(run.root / "outputs", "a blue square on a yellow background", 1);
                      }};
  // docs/usage.md, "Defaults that fit the model": the bare command takes the folder's mmgen.yaml,
  // so it draws the picture of the fully spelled command above.
  e["build/mmgen generate --model-path examples/models/wan-shapes --prompt \"a red circle on a "
    "blue background\" --seed 1"] = {
      false, false, [](const DocCommand&, const DocRun& run) {
        const json settings =
            expect_png(run.root / "outputs", "a red circle on a blue background", 1);
        EXPECT_EQ(settings["height"], 128);
        EXPECT_EQ(settings["width"], 128);
        EXPECT_EQ(settings["num_inference_steps"], 20);
        EXPECT_EQ(settings["guidance_scale"], 4.0);
        EXPECT_EQ(settings["max_sequence_length"], 32);
        EXPECT_EQ(settings["negative_prompt"], "");
        EXPECT_EQ(settings["setting_sources"]["height"], "examples/models/wan-shapes/mmgen.yaml");
      }};
  e[kBatch] = {true, false, [](const DocCommand&, const DocRun& run) {
                 // "one output per line of the file (blank and # lines skipped)"
                 EXPECT_EQ(run.dry_run["prompts"],
                           json({"a red circle on a blue background",
                                 "a yellow triangle on a purple background"}));
                 EXPECT_EQ(run.dry_run["request"]["output_format"], "png");
               }};
  e["build/mmgen generate --model-path DIR --prompt x --dry-run"] = {
      false, false, [](const DocCommand&, const DocRun& run) {
        // "the resolved request as JSON, no weights read"
        const json out = json::parse(run.result.out);
        EXPECT_EQ(out["pipeline"], "WanPipeline");
        EXPECT_EQ(out["request"]["prompt"], "x");
      }};
  e["build/mmgen inspect --model-path DIR --height 720 --width 1280 --num-frames 81"] = {
      false, false, [](const DocCommand&, const DocRun& run) {
        // "components, parameters, dtypes, sizes, attention backends, and the memory that
        // request needs"
        const std::string& out = run.result.out;
        for (const char* part : {"transformer   WanTransformer3DModel", "parameters", "dtypes",
                                 "attention", "request: 1280x720, 81 frame(s)", "memory:"})
          EXPECT_NE(out.find(part), std::string::npos) << part << "\n" << out;
      }};
  e["build/mmgen generate ... --vae-tiling"] = {false, true, nullptr};
  e["build/mmgen generate --help"] = {
      false, false, [](const DocCommand&, const DocRun& run) {
        // "every option"
        EXPECT_NE(run.result.out.find("Options:"), std::string::npos);
        EXPECT_NE(run.result.out.find("--vae-tiling"), std::string::npos);
      }};
  e["build/mmgen backends"] = {false, false, [](const DocCommand&, const DocRun& run) {
                                 // "which attention backends run here, and why not"
                                 EXPECT_NE(run.result.out.find("Device: cpu"), std::string::npos);
                                 EXPECT_NE(run.result.out.find("sliding_tile_attn"),
                                           std::string::npos);
                               }};
  // docs/usage.md
  e["build/mmgen inspect --model-path examples/models/wan-shapes --height 128 --width 128 "
    "--num-frames 1"] = {false, false, [](const DocCommand& doc, const DocRun& run) {
                           // The shown table, but the free memory (this machine's) and the
                           // attention column (the
                           // automatic choice depends on the CPU): each line up to that column.
                           const std::vector<std::string> real = lines_of(run.result.out);
                           ASSERT_EQ(real.size(), doc.output.size()) << run.result.out;
                           for (size_t i = 0; i < real.size(); ++i) {
                             if (doc.output[i].starts_with("free:")) continue;
                             const std::string shown = doc.output[i].substr(0, 70);
                             EXPECT_EQ(real[i].substr(0, shown.size()), shown)
                                 << "line " << i << " of\n"
                                 << run.result.out;
                           }
                         }};
  e["build/mmgen generate --model-path examples/models/wan-shapes --prompt \"a red circle on a "
    "blue background\" --negative-prompt \"\" --height 128 --width 128 --num-frames 1 "
    "--num-inference-steps 20 --guidance-scale 4 --max-sequence-length 32 --seed 1"] = {
      false, false, [](const DocCommand& doc, const DocRun& run) {
        expect_png(run.root / "outputs", "a red circle on a blue background", 1);
        // The log shown is this run's, up to times, sizes and the automatic choices.
        std::vector<std::string> shown, real;
        for (const auto& line : doc.output) shown.push_back(masked(line));
        for (const auto& line : lines_of(run.result.err)) real.push_back(masked(line));
        EXPECT_EQ(real, shown) << run.result.err;
      }};
  e["MMGEN_AVAILABLE_MEMORY=4G build/mmgen generate --model-path examples/models/wan-shapes "
    "--prompt \"a red circle\" --height 1024 --width 1024 --num-frames 81"] = {
      false, false, [](const DocCommand& doc, const DocRun& run) {
        EXPECT_EQ(run.result.exit_code, doc.exit_code);
        ASSERT_EQ(doc.output.size(), 1u);
        EXPECT_EQ(run.result.err, doc.output[0] + "\n");
      }};
  e["build/mmgen generate --model-path examples/models/wan-shapes --prompt \"a red circle\" "
    "--height 128 --width 128 --num-frames 5 --output-file-name b.png"] = {
      false, false, [](const DocCommand& doc, const DocRun& run) {
        EXPECT_EQ(run.result.exit_code, doc.exit_code);
        ASSERT_EQ(doc.output.size(), 1u);
        EXPECT_EQ(run.result.err, doc.output[0] + "\n");
        EXPECT_FALSE(fs::exists(run.root / "outputs")) << "nothing written";
      }};
  e["build/mmgen generate --model-path DIR --prompt \"...\" --height 720 --width 1280 "
    "--num-frames 81 --vae-tiling"] = {true, false, [](const DocCommand&, const DocRun& run) {
                                         EXPECT_EQ(run.dry_run["request"]["vae_tiling"], true);
                                         EXPECT_EQ(run.dry_run["request"]["vae_tile_size"], 256);
                                         EXPECT_EQ(run.dry_run["request"]["vae_tile_overlap"], 64);
                                       }};
  e["build/mmgen generate --config run.yaml --model-path DIR --prompt \"...\" --seed 3"] = {
      true, false, [](const DocCommand&, const DocRun& run) {
        // "The command line wins over the file, the file over configs/"
        const json& request = run.dry_run["request"];
        EXPECT_EQ(request["height"], 480);
        EXPECT_EQ(request["width"], 832);
        EXPECT_EQ(request["num_frames"], 33);
        EXPECT_EQ(request["num_inference_steps"], 30);
        EXPECT_EQ(request["seed"], 3);
        EXPECT_EQ(run.dry_run["components"]["text_encoder"]["attention_backend"], "torch_native");
        EXPECT_EQ(run.dry_run["components"]["text_encoder"]["attention_backend_source"],
                  "component");
      }};
  e["build/mmgen encode --model-path DIR --prompt \"a fox in snow\" --out fox.safetensors"] = {
      false, false, [](const DocCommand&, const DocRun& run) {
        const SafetensorsFile file = SafetensorsFile::open(run.root / "fox.safetensors");
        EXPECT_EQ(file.names(), std::vector<std::string>({"prompt_embeds.0"}));
      }};
  e["build/mmgen convert --input examples/models/wan-shapes/transformer --out "
    "shapes-q8/transformer/model.gguf --type q8_0"] = {
      false, false, [](const DocCommand&, const DocRun& run) {
        // "the weight matrices take --type ... config.json is copied beside the file"
        EXPECT_NE(run.result.out.find(" as q8_0 and "), std::string::npos) << run.result.out;
        EXPECT_TRUE(fs::exists(run.root / "shapes-q8/transformer/config.json"));
        const WeightStore weights = WeightStore::open_folder(run.root / "shapes-q8/transformer");
        EXPECT_TRUE(weights.has("blocks.0.attn1.to_q.weight"));
      }};
  e["build/mmgen generate --model-path examples/models/wan-shapes --transformer-path "
    "shapes-q8/transformer --prompt \"a red circle on a blue background\" --height 128 --width "
    "128 --num-frames 1 --seed 1 --output-path q8-outputs"] = {
      false, false, [](const DocCommand&, const DocRun& run) {
        // runs from the GGUF folder the command above wrote
        expect_png(run.root / "q8-outputs", "a red circle on a blue background", 1);
      }};
  e["build/mmgen convert --input examples/models/wan-shapes/transformer --out "
    "shapes-fp8/transformer/model.safetensors --type fp8_e4m3"] = {
      false, false, [](const DocCommand&, const DocRun& run) {
        // "each weight matrix as e4m3(w / s) with one float32 scale ... the scaled_fp8 marker"
        EXPECT_NE(run.result.out.find(" as f8_e4m3 "), std::string::npos) << run.result.out;
        EXPECT_TRUE(fs::exists(run.root / "shapes-fp8/transformer/config.json"));
        const SafetensorsFile file =
            SafetensorsFile::open(run.root / "shapes-fp8/transformer/model.safetensors");
        EXPECT_TRUE(file.has("scaled_fp8"));
        EXPECT_EQ(file.info("blocks.0.attn1.to_q.weight").dtype, DType::F8E4M3);
        EXPECT_TRUE(file.has("blocks.0.attn1.to_q.scale_weight"));
      }};
  e["build/mmgen generate --model-path examples/models/wan-shapes --transformer-path "
    "shapes-fp8/transformer --prompt \"a red circle on a blue background\" --height 128 --width "
    "128 --num-frames 1 --seed 1 --output-path fp8-outputs"] = {
      false, false, [](const DocCommand&, const DocRun& run) {
        // runs from the FP8 folder the command above wrote
        expect_png(run.root / "fp8-outputs", "a red circle on a blue background", 1);
      }};
  e["build/mmgen generate --model-path DIR --prompt-embeds fox.safetensors --seed 1"] = {
      true, false, [](const DocCommand&, const DocRun& run) {
        // "no text encoder run": the embedding replaces the prompt
        EXPECT_EQ(run.dry_run["request"]["prompt_embeds"], "fox.safetensors");
        EXPECT_TRUE(run.dry_run["request"].value("prompt", json()).is_null());
      }};
  e["build/mmgen generate --model-path Wan-AI/Wan2.1-T2V-1.3B-Diffusers --prompt \"a fox in "
    "snow\""] = {true, false, [](const DocCommand&, const DocRun& run) {
                   // "found offline in the local Hugging Face cache": the snapshot refs/main names
                   const std::string path = run.dry_run["model_path"].get<std::string>();
                   EXPECT_NE(path.find("snapshots/0123456789abcdef"), std::string::npos) << path;
                   EXPECT_EQ(run.dry_run["pipeline"], "WanPipeline");
                 }};
  e["build/mmgen generate --model-path Wan-AI/Wan2.1-T2V-1.3B-Diffusers --prompt \"a fox in snow\" "
    "--lora-path lightx2v_step_distill_lora.safetensors --lora-scale 1.0 --num-inference-steps 4 "
    "--guidance-scale 1 --flow-shift 5"] = {true, false, [](const DocCommand&, const DocRun& run) {
                                              const json& request = run.dry_run["request"];
                                              EXPECT_EQ(request["lora_path"],
                                                        json::array({"lightx2v_step_distill_lora."
                                                                     "safetensors"}));
                                              EXPECT_EQ(request["lora_scale"], json::array({1.0}));
                                              EXPECT_EQ(request["num_inference_steps"], 4);
                                              EXPECT_EQ(request["guidance_scale"], 1.0);
                                              EXPECT_EQ(request["flow_shift"], 5.0);
                                            }};
  e["build/mmgen generate --model-path Wan-AI/Wan2.1-T2V-1.3B-Diffusers ... --revision COMMIT"] = {
      false, true, nullptr};
  e["build/mmgen generate --model-path Tongyi-MAI/Z-Image-Turbo --prompt \"a red fox running "
    "through snow\" --num-inference-steps 9 --guidance-scale 0 --seed 42"] = {
      true, false,
      [](const DocCommand&, const DocRun& run) {
        // "Z-Image-Turbo ... 9 steps and no guidance", at configs/zimage.yaml's 1024x1024
        EXPECT_EQ(run.dry_run["pipeline"], "ZImagePipeline");
        EXPECT_EQ(run.dry_run["request"]["num_inference_steps"], 9);
        EXPECT_EQ(run.dry_run["request"]["guidance_scale"], 0.0);
        EXPECT_EQ(run.dry_run["request"]["height"], 1024);
        EXPECT_EQ(run.dry_run["request"]["width"], 1024);
        EXPECT_EQ(run.dry_run["request"]["num_frames"], 1);
        EXPECT_EQ(run.dry_run["request"]["output_format"], "png");
      },
      true};
  e["build/mmgen generate --model-path black-forest-labs/FLUX.1-dev --prompt \"a red fox running "
    "through snow\" --seed 42"] = {true, false, [](const DocCommand&, const DocRun& run) {
                                     // configs/flux.yaml: FLUX.1-dev's call defaults
                                     const json& request = run.dry_run["request"];
                                     EXPECT_EQ(run.dry_run["pipeline"], "FluxPipeline");
                                     EXPECT_EQ(request["num_inference_steps"], 28);
                                     EXPECT_EQ(request["guidance_scale"], 3.5);
                                     EXPECT_EQ(request["true_cfg_scale"], 1.0);
                                     EXPECT_EQ(request["max_sequence_length"], 512);
                                     EXPECT_EQ(request["height"], 1024);
                                     EXPECT_EQ(request["width"], 1024);
                                     EXPECT_EQ(request["output_format"], "png");
                                   }};
  e["build/mmgen generate --model-path black-forest-labs/FLUX.1-schnell --prompt \"a red fox "
    "running through snow\" --num-inference-steps 4 --guidance-scale 0 --max-sequence-length 256 "
    "--seed 42"] = {true, false, [](const DocCommand&, const DocRun& run) {
                      EXPECT_EQ(run.dry_run["pipeline"], "FluxPipeline");
                      EXPECT_EQ(run.dry_run["request"]["num_inference_steps"], 4);
                      EXPECT_EQ(run.dry_run["request"]["max_sequence_length"], 256);
                      const std::string path =
                          run.dry_run["components"]["transformer"]["path"].get<std::string>();
                      EXPECT_NE(path.find("FLUX.1-schnell"), std::string::npos) << path;
                    }};
  e["build/mmgen generate --model-path Qwen/Qwen-Image --prompt \"a red fox running through "
    "snow\" --negative-prompt \" \" --seed 42"] = {
      true, false, [](const DocCommand&, const DocRun& run) {
        // configs/qwenimage.yaml: diffusers' call defaults, true CFG on with the negative prompt
        const json& request = run.dry_run["request"];
        EXPECT_EQ(run.dry_run["pipeline"], "QwenImagePipeline");
        EXPECT_EQ(request["num_inference_steps"], 50);
        EXPECT_EQ(request["true_cfg_scale"], 4.0);
        EXPECT_EQ(request["negative_prompt"], " ");
        EXPECT_EQ(request["height"], 1024);
        EXPECT_EQ(request["max_sequence_length"], 512);
      }};
  return e;
}

TEST(DocsCommands, EveryCommandOfTheReadmeAndUsageDoesWhatItsTextSays) {
  std::vector<DocCommand> commands = doc_commands("README.md");
  for (auto& command : doc_commands("docs/usage.md")) commands.push_back(command);
  ASSERT_GE(commands.size(), 10u);
  const std::map<std::string, Expectation> table = expectations();
  std::set<std::string> seen;
  const fs::path root = checkout();
  for (const DocCommand& command : commands) {
    SCOPED_TRACE(command.page + ": " + command.text);
    auto it = table.find(command.text);
    ASSERT_NE(it, table.end()) << "a command without a check: add it to expectations()";
    if (!seen.insert(command.text).second) continue;  // the same command twice
    const Expectation& expectation = it->second;
    if (expectation.needs_shared && testing::shared_dir().empty()) continue;
    if (expectation.fragment) {
      EXPECT_NE(command.text.find(" ... "), std::string::npos);
      continue;
    }
    std::string text =
        std::regex_replace(command.text, std::regex(" DIR "), " examples/models/wan-shapes ");
    if (expectation.dry_run) text += " --dry-run";
    fs::remove_all(root / "outputs");
    DocRun run{testing::run_command("cd " + root.string() + " && " + text), root, json()};
    if (command.exit_code == 0) {
      ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
    }
    if (expectation.dry_run) run.dry_run = json::parse(run.result.out);
    expectation.check(command, run);
  }
  // A check whose command left the pages is stale.
  for (const auto& [text, expectation] : table)
    EXPECT_TRUE(seen.count(text)) << "no page shows " << text << " any more";
}

}  // namespace
}  // namespace mmgen
