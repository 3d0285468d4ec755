// A component given as one file (issue 51): `--transformer-path FILE.gguf`, a diffusers-layout
// `.safetensors`, or one in the original Wan release's key layout (as ComfyUI repackages it too),
// through the real executable. Each run must give the folder run's bytes; `inspect` names the
// file, its layout and the key mapping; a bad file gets one error line before anything loads.
//
// tests/fixtures/wan-tiny-single-file/ holds wan-tiny's transformer in the original layout,
// written by its make_wan_single_file.py, which checks with diffusers' own converter
// (convert_wan_transformer_to_diffusers) that the files read back to wan-tiny's tensors exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/file.h"
#include "core/safetensors.h"
#include "models/dit/flux/flux_bfl_names.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::run_command;

std::string mmgen() {
  return testing::mmgen_binary().string();
}
fs::path wan_tiny() {
  return testing::source_dir() / "examples/models/wan-tiny";
}
fs::path fixture(const std::string& name) {
  return testing::source_dir() / "tests/fixtures/wan-tiny-single-file" / name;
}

// A small wan-tiny generation into `dir`/`name`.npy with `flags` added; returns the npy's bytes.
std::string generate(const fs::path& dir, const std::string& name, const std::string& flags,
                     const fs::path& model = wan_tiny()) {
  const auto result = run_command(
      mmgen() + " generate --model-path " + model.string() +
      " --prompt 'a red kite' --height 32 --width 32 --num-frames 1 --num-inference-steps 2 "
      "--max-sequence-length 16 --seed 3 --output-format npy --overwrite --output-path " +
      dir.string() + " --output-file-name " + name + " " + flags);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  if (result.exit_code != 0) return {};
  return read_text_file(dir / (name + ".npy"));
}

// The folder run every file run must match, byte for byte.
const std::string& folder_run() {
  static const std::string bytes =
      generate(testing::scratch_dir("single-file-folder-run"), "folder", "");
  return bytes;
}

// A copy of one of wan-tiny's weight files alone in a fresh folder (no config.json beside it: the
// config comes from the model folder's component folder).
fs::path lone_copy(const std::string& component, const std::string& file, const std::string& as) {
  const fs::path dir = testing::scratch_dir("single-file-" + component + "-" + as);
  fs::copy_file(wan_tiny() / component / file, dir / as);
  return dir / as;
}

// The stderr lines that are not empty.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// A run that must fail before any step, with one error line that holds `expected` (the info
// lines before it are the log's, not errors).
void expect_one_error_line(const std::string& flags, const std::string& expected,
                           const fs::path& model = wan_tiny()) {
  const fs::path dir = testing::scratch_dir("single-file-refused");
  const auto result = run_command(mmgen() + " generate --model-path " + model.string() +
                                  " --prompt kite --height 32 --width 32 --num-frames 1 "
                                  "--num-inference-steps 1 --output-format npy --output-path " +
                                  dir.string() + " " + flags);
  EXPECT_NE(result.exit_code, 0) << result.err;
  std::vector<std::string> errors;
  for (const std::string& line : lines_of(result.err))
    if (line.find(" info ") == std::string::npos) errors.push_back(line);
  ASSERT_EQ(errors.size(), 1u) << result.err;
  EXPECT_EQ(errors[0].rfind("mmgen: error: ", 0), 0u) << errors[0];
  EXPECT_NE(errors[0].find(expected), std::string::npos) << errors[0];
  EXPECT_TRUE(fs::is_empty(dir)) << "nothing is written for a refused run";
}

TEST(SingleFileComponents, DiffusersSafetensorsFilesForEveryComponentGiveTheFolderRunsBytes) {
  ASSERT_FALSE(folder_run().empty());
  const fs::path transformer =
      lone_copy("transformer", "diffusion_pytorch_model.safetensors", "wan-dit.safetensors");
  const fs::path text_encoder = lone_copy("text_encoder", "model.safetensors", "umt5.safetensors");
  const fs::path vae =
      lone_copy("vae", "diffusion_pytorch_model.safetensors", "wan-vae.safetensors");
  const fs::path dir = testing::scratch_dir("single-file-diffusers");
  EXPECT_EQ(generate(dir, "files",
                     "--transformer-path " + transformer.string() + " --text-encoder-path " +
                         text_encoder.string() + " --vae-path " + vae.string()),
            folder_run());
}

TEST(SingleFileComponents, OriginalWanLayoutFilesGiveTheFolderRunsBytes) {
  ASSERT_FALSE(folder_run().empty());
  const fs::path dir = testing::scratch_dir("single-file-original");
  EXPECT_EQ(generate(dir, "original",
                     "--transformer-path " + fixture("wan_tiny_original.safetensors").string()),
            folder_run());
  // ComfyUI's repackaged files: the same keys under model.diffusion_model.
  EXPECT_EQ(generate(dir, "comfy",
                     "--transformer-path " + fixture("wan_tiny_comfy.safetensors").string()),
            folder_run());
}

TEST(SingleFileComponents, ConfigFileKeysTakeFilesToo) {
  ASSERT_FALSE(folder_run().empty());
  const fs::path dir = testing::scratch_dir("single-file-config-key");
  std::ofstream(dir / "run.yaml") << "transformer_path: "
                                  << fixture("wan_tiny_original.safetensors").string() << "\n";
  EXPECT_EQ(generate(dir, "from-config", "--config " + (dir / "run.yaml").string()), folder_run());
}

TEST(SingleFileComponents, LoneGgufFileRunsAsTheFolderHoldingIt) {
  ASSERT_FALSE(folder_run().empty());
  const fs::path dir = testing::scratch_dir("single-file-gguf");
  // f32 blocks hold the values exactly: the folder run's bytes.
  const fs::path f32 = dir / "wan-tiny-f32.gguf";
  const auto convert_f32 =
      run_command(mmgen() + " convert --input " + (wan_tiny() / "transformer").string() +
                  " --out " + f32.string() + " --type f32");
  ASSERT_EQ(convert_f32.exit_code, 0) << convert_f32.err;
  EXPECT_EQ(generate(dir, "f32", "--transformer-path " + f32.string()), folder_run());

  // q8_0: the same bytes as a transformer folder holding that GGUF beside its config.json.
  const fs::path model = testing::copy_of_wan_tiny("single-file-gguf-model");
  const fs::path q8 = dir / "wan-tiny-q8_0.gguf";
  const auto convert_q8 =
      run_command(mmgen() + " convert --input " + (wan_tiny() / "transformer").string() +
                  " --out " + q8.string() + " --type q8_0");
  ASSERT_EQ(convert_q8.exit_code, 0) << convert_q8.err;
  fs::remove(model / "transformer/diffusion_pytorch_model.safetensors");
  fs::copy_file(q8, model / "transformer/model.gguf");
  const std::string in_folder = generate(dir, "q8-folder", "", model);
  ASSERT_FALSE(in_folder.empty());
  const std::string as_file = generate(dir, "q8-file", "--transformer-path " + q8.string());
  EXPECT_EQ(as_file, in_folder);
  EXPECT_NE(as_file, folder_run()) << "q8_0 rounds the weights: the check can tell them apart";
}

// GGUF files of the text encoder and the VAE in one folder: `mmgen convert` leaves the first
// one's config.json beside them (it keeps one it finds), so the config beside a file is taken
// only where it names the component's class; the VAE's comes from the model folder.
TEST(SingleFileComponents, GgufFilesSharingAFolderTakeTheConfigOfTheirOwnClass) {
  ASSERT_FALSE(folder_run().empty());
  const fs::path dir = testing::scratch_dir("single-file-shared-folder");
  for (const char* component : {"text_encoder", "vae"}) {
    const auto convert =
        run_command(mmgen() + " convert --input " + (wan_tiny() / component).string() + " --out " +
                    (dir / (std::string(component) + ".gguf")).string() + " --type f32");
    ASSERT_EQ(convert.exit_code, 0) << convert.err;
  }
  ASSERT_EQ(json::parse(read_text_file(dir / "config.json"))["architectures"][0],
            "UMT5EncoderModel");
  EXPECT_EQ(generate(dir, "ggufs",
                     "--text-encoder-path " + (dir / "text_encoder.gguf").string() +
                         " --vae-path " + (dir / "vae.gguf").string()),
            folder_run());
}

TEST(SingleFileComponents, InspectShowsTheFileItsLayoutAndTheKeyMapping) {
  const fs::path file = fixture("wan_tiny_comfy.safetensors");
  const std::string base = mmgen() + " inspect --model-path " + wan_tiny().string() +
                           " --height 32 --width 32 --num-frames 1 --transformer-path " +
                           file.string();
  const auto text = run_command(base);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  // Every key loses the prefix; the examples are the first few by the model's names.
  EXPECT_NE(text.out.find("transformer: file " + file.string() +
                          " (safetensors, original Wan layout): 69 of 69 keys renamed (prefix "
                          "model.diffusion_model. removed), e.g. "
                          "model.diffusion_model.blocks.0.self_attn.norm_k.weight -> "
                          "blocks.0.attn1.norm_k.weight; "),
            std::string::npos)
      << text.out;

  const auto as_json = run_command(base + " --json");
  ASSERT_EQ(as_json.exit_code, 0) << as_json.err;
  const json report = json::parse(as_json.out);
  const json& component = report["components"]["transformer"];
  EXPECT_EQ(component["weights_file"]["path"], file.string());
  EXPECT_EQ(component["weights_file"]["format"], "safetensors");
  EXPECT_EQ(component["weights_file"]["layout"], "original Wan");
  EXPECT_EQ(component["weights_file"]["mapped_keys"], 69);
  EXPECT_EQ(component["tensors"], 69);
  // Without the prefix the two patch_embedding tensors keep their names.
  const auto plain = run_command(mmgen() + " inspect --model-path " + wan_tiny().string() +
                                 " --json --transformer-path " +
                                 fixture("wan_tiny_original.safetensors").string());
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(json::parse(plain.out)["components"]["transformer"]["weights_file"]["mapped_keys"], 67);
  // The text encoder stays a folder: no file entry.
  EXPECT_FALSE(report["components"]["text_encoder"].contains("weights_file"));
}

TEST(SingleFileComponents, AFileOfNeitherFormatIsRefusedInOneLine) {
  const fs::path dir = testing::scratch_dir("single-file-neither");
  std::ofstream(dir / "notes.safetensors") << "these are not weights\n";
  expect_one_error_line("--transformer-path " + (dir / "notes.safetensors").string(),
                        "--transformer-path: " + (dir / "notes.safetensors").string() +
                            " is neither a GGUF nor a safetensors file; give a .gguf or "
                            ".safetensors weights file, or the component's folder");
  const fs::path vocabulary = wan_tiny() / "tokenizer/tokenizer.json";
  expect_one_error_line("--tokenizer-path " + vocabulary.string(),
                        "--tokenizer-path: " + vocabulary.string() +
                            " is a file, but a tokenizer is a folder (its config and vocabulary "
                            "files); give the folder");
  expect_one_error_line("--vae-path " + (dir / "missing.gguf").string(),
                        "--vae-path: " + (dir / "missing.gguf").string() + " does not exist");
}

TEST(SingleFileComponents, KeysOfNoKnownLayoutAreRefusedNamingTheKeyEachLayoutHas) {
  // The VAE's weights handed over as the transformer.
  const fs::path vae = lone_copy("vae", "diffusion_pytorch_model.safetensors", "vae.safetensors");
  expect_one_error_line("--transformer-path " + vae.string(),
                        "--transformer-path: " + vae.string() +
                            " holds no WanTransformer3DModel weights in a layout mmgen reads: it "
                            "lacks the key each layout has (diffusers "
                            "'condition_embedder.time_proj.weight', original Wan "
                            "'head.head.weight'); give the transformer checkpoint");
}

// The original releases' VAE layouts are recognised, not read: one line that says which layout
// the file is in and how to convert it.
TEST(SingleFileComponents, OriginalVaeLayoutsAreRefusedSayingHowToConvert) {
  const fs::path dir = testing::scratch_dir("single-file-vae-layouts");
  const Tensor zeros = Tensor::zeros({4, 4, 3, 3, 3});
  write_safetensors(dir / "wan_2.1_vae.safetensors",
                    {{"decoder.middle.0.residual.2.weight", zeros}, {"conv2.weight", zeros}});
  expect_one_error_line(
      "--vae-path " + (dir / "wan_2.1_vae.safetensors").string(),
      "--vae-path: " + (dir / "wan_2.1_vae.safetensors").string() +
          " is in the original Wan VAE layout ('decoder.middle.0.residual.2.weight'); mmgen reads "
          "the Wan VAE in diffusers' layout only; convert it with diffusers "
          "(AutoencoderKLWan.from_single_file(FILE).save_pretrained(DIR)) or use the model "
          "folder's vae");
  write_safetensors(dir / "ae.safetensors", {{"decoder.mid.block_1.conv1.weight", zeros}});
  expect_one_error_line(
      "--guidance-scale 3.5 --height 16 --width 16 --vae-path " + (dir / "ae.safetensors").string(),
      "--vae-path: " + (dir / "ae.safetensors").string() +
          " is in the original LDM layout ('decoder.mid.block_1.conv1.weight')",
      testing::source_dir() / "tests/fixtures/flux-tiny/model");
}

TEST(SingleFileComponents, ShapesThatDisagreeWithConfigJsonAreRefused) {
  const fs::path model = testing::copy_of_wan_tiny("single-file-shapes");
  json config = json::parse(read_text_file(model / "transformer/config.json"));
  config["ffn_dim"] = 32;
  testing::write_json_file(model / "transformer/config.json", config);
  const fs::path file = fixture("wan_tiny_original.safetensors");
  expect_one_error_line("--transformer-path " + file.string(),
                        "transformer weights in " + file.string() +
                            ": tensor 'blocks.0.ffn.net.0.proj.weight' has shape [64, 48], "
                            "config.json implies [32, 48]",
                        model);
}

TEST(SingleFileComponents, AFileWithNoConfigAnywhereSaysWhereToPutOne) {
  const fs::path model = testing::copy_of_wan_tiny("single-file-no-config");
  fs::remove_all(model / "transformer");
  const fs::path file = fixture("wan_tiny_original.safetensors");
  expect_one_error_line("--transformer-path " + file.string(),
                        "--transformer-path: " + file.string() +
                            " has no config.json beside it, and the model has none at " +
                            (model / "transformer/config.json").string() +
                            "; put the WanTransformer3DModel config.json beside the file",
                        model);
}

// ------------------------------------------------------------------ FLUX in BFL's layout

fs::path flux_tiny() {
  return testing::source_dir() / "tests/fixtures/flux-tiny/model";
}
fs::path bfl_file() {
  return testing::source_dir() / "tests/fixtures/flux-tiny-single-file/flux_tiny_bfl.safetensors";
}

std::string generate_flux(const fs::path& dir, const std::string& name, const std::string& flags) {
  return generate(dir, name,
                  "--guidance-scale 3.5 --height 16 --width 16 --max-sequence-length 16 " + flags,
                  flux_tiny());
}

// q, k, v (and the single blocks' MLP input) fused, the final modulation's halves swapped: the
// rows handed out as views must be the folder's tensors exactly.
TEST(SingleFileComponents, BflFluxFileGivesTheFolderRunsBytes) {
  const fs::path dir = testing::scratch_dir("single-file-flux");
  const std::string folder = generate_flux(dir, "folder", "");
  ASSERT_FALSE(folder.empty());
  EXPECT_EQ(generate_flux(dir, "bfl", "--transformer-path " + bfl_file().string()), folder);
}

// A GGUF of the BFL file. f32: the folder run's bytes. q8_0: the fused matrices stay q8_0 blocks
// for the product, each split matrix the fused one's rows of blocks, byte for byte (a q8_0 block
// is 32 values of one row), and the run goes through.
TEST(SingleFileComponents, BflFluxGgufSplitsItsMatricesAsBlocks) {
  const fs::path dir = testing::scratch_dir("single-file-flux-gguf");
  const std::string folder = generate_flux(dir, "folder", "");
  ASSERT_FALSE(folder.empty());
  for (const char* type : {"f32", "q8_0"}) {
    const auto convert =
        run_command(mmgen() + " convert --input " + bfl_file().string() + " --out " +
                    (dir / (std::string(type) + ".gguf")).string() + " --type " + type);
    ASSERT_EQ(convert.exit_code, 0) << convert.err;
  }
  EXPECT_EQ(generate_flux(dir, "f32", "--transformer-path " + (dir / "f32.gguf").string()), folder);
  const std::string q8 =
      generate_flux(dir, "q8_0", "--transformer-path " + (dir / "q8_0.gguf").string());
  EXPECT_FALSE(q8.empty());
  EXPECT_NE(q8, folder) << "q8_0 rounds the weights: the file was read";

  const WeightStore stored = WeightStore::open_file(dir / "q8_0.gguf");
  const WeightStore mapped = dit::flux_from_bfl_names(stored);
  const std::string fused = "double_blocks.1.txt_attn.qkv.weight";
  ASSERT_EQ(stored.product_dtype(fused), DType::Q8_0);
  const Tensor fused_blocks = stored.get_for_product(fused).contiguous();
  const Tensor fused_values = stored.get(fused);
  const char* parts[] = {"add_q_proj", "add_k_proj", "add_v_proj"};
  for (int64_t i = 0; i < 3; ++i) {
    const std::string name = std::string("transformer_blocks.1.attn.") + parts[i] + ".weight";
    EXPECT_EQ(mapped.stored_name(name), fused);
    ASSERT_EQ(mapped.product_dtype(name), DType::Q8_0) << name;
    const Tensor blocks = mapped.get_for_product(name).contiguous();
    const Tensor expected = fused_blocks.slice(0, 32 * i, 32 * (i + 1)).contiguous();
    ASSERT_EQ(blocks.shape(), expected.shape()) << name;
    EXPECT_EQ(std::memcmp(blocks.raw(), expected.raw(), expected.nbytes()), 0) << name;
    EXPECT_EQ(testing::max_abs_diff(mapped.get(name), fused_values.slice(0, 32 * i, 32 * (i + 1))),
              0.0)
        << name;
  }
  // The final modulation's halves swapped: two ranges, read as a float32 copy.
  const Tensor modulation = stored.get("final_layer.adaLN_modulation.1.weight");
  const Tensor swapped = mapped.get("norm_out.linear.weight");
  EXPECT_EQ(testing::max_abs_diff(swapped.slice(0, 0, 32), modulation.slice(0, 32, 64)), 0.0);
  EXPECT_EQ(testing::max_abs_diff(swapped.slice(0, 32, 64), modulation.slice(0, 0, 32)), 0.0);
}

TEST(SingleFileComponents, InspectShowsTheBflLayoutAndItsSplits) {
  const auto result =
      run_command(mmgen() + " inspect --json --model-path " + flux_tiny().string() +
                  " --height 16 --width 16 --transformer-path " + bfl_file().string());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json report = json::parse(result.out);
  const json& component = report["components"]["transformer"];
  EXPECT_EQ(component["weights_file"]["layout"], "BFL FLUX");
  // 84 stored tensors become diffusers' 112, every one under a new name.
  EXPECT_EQ(component["tensors"], 112);
  EXPECT_EQ(component["weights_file"]["mapped_keys"], 112);
  const auto text =
      run_command(mmgen() + " inspect --model-path " + flux_tiny().string() +
                  " --height 16 --width 16 --transformer-path " + bfl_file().string());
  // The 2 double blocks' img_attn.qkv and txt_attn.qkv (weight and bias, 3 keys each) and the
  // 2 single blocks' linear1 (weight and bias, q, k, v and proj_mlp): 2·2·2·3 + 2·2·4 = 40 keys
  // from 12 fused tensors (the final modulation's swapped halves make one key: not a cut).
  EXPECT_EQ(component["weights_file"]["split_keys"], 40);
  EXPECT_EQ(component["weights_file"]["fused_tensors"], 12);
  EXPECT_NE(text.out.find("(safetensors, BFL FLUX layout): 112 of 112 keys renamed, 40 of them "
                          "cut by rows from 12 fused tensors, e.g. txt_in.bias -> "
                          "context_embedder.bias; txt_in.weight -> context_embedder.weight; "
                          "single_blocks.0.linear1.bias -> "
                          "single_transformer_blocks.0.attn.to_k.bias"),
            std::string::npos)
      << text.out;
}

// ------------------------------------------------------------------ Z-Image's original layout

// zimage-tiny lives in ../shared; the original-layout file made from it, in this repository.
TEST(SingleFileComponents, OriginalZImageFileGivesTheFolderRunsBytes) {
  MMGEN_REQUIRE_SHARED();
  const fs::path model = testing::shared_dir() / "fixtures/zimage-tiny/model";
  const fs::path file = testing::source_dir() /
                        "tests/fixtures/zimage-tiny-single-file/zimage_tiny_original.safetensors";
  const fs::path dir = testing::scratch_dir("single-file-zimage");
  const std::string flags = "--guidance-scale 3 --negative-prompt blur ";
  const std::string folder = generate(dir, "folder", flags, model);
  ASSERT_FALSE(folder.empty());
  EXPECT_EQ(generate(dir, "original", flags + "--transformer-path " + file.string(), model),
            folder);

  const auto inspect = run_command(mmgen() + " inspect --json --model-path " + model.string() +
                                   " --height 32 --width 32 --transformer-path " + file.string());
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const json report = json::parse(inspect.out);
  const json& component = report["components"]["transformer"];
  EXPECT_EQ(component["weights_file"]["layout"], "original Z-Image");
  EXPECT_EQ(component["tensors"], 73);  // 65 stored, the four fused qkv split in three
}

}  // namespace
}  // namespace mmgen
