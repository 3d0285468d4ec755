#include "generate/convert_command.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "core/config_fields.h"
#include "core/error.h"
#include "core/file.h"
#include "core/fp8_convert.h"
#include "core/gguf_convert.h"
#include "core/json.h"
#include "core/safetensors.h"
#include "generate/options.h"
#include "generate/settings.h"
#include "pipeline/component_classes.h"

namespace mmgen::cli {
namespace {

namespace fs = std::filesystem;

// general.architecture as ComfyUI-GGUF and stable-diffusion.cpp name the models they load
// (pipeline/component_classes.h); the diffusers class, lowercased, for the others.
std::string architecture(const std::string& diffusers_class) {
  const ComponentClass* known = find_component_class(diffusers_class);
  if (known && !known->gguf_architecture.empty()) return known->gguf_architecture;
  std::string lower;
  for (const char c : diffusers_class) lower += char(std::tolower(static_cast<unsigned char>(c)));
  return lower.empty() ? "unknown" : lower;
}

}  // namespace

std::string convert_help() {
  const std::string text =
      "Usage: mmgen convert --input PATH --out FILE.gguf [--type q8_0|q4_k|f16|bf16|f32]\n"
      "       mmgen convert --input PATH --out FILE.safetensors --type fp8_e4m3\n\n"
      "Writes a component's weights (a diffusers folder's safetensors, one file or shards) as one\n"
      "GGUF file, or as one safetensors file in ComfyUI's scaled FP8 layout (e4m3 matrices, one\n"
      "float32 scale_weight each). The weight matrices take --type; norms, biases, embeddings,\n"
      "modulation tables and small tensors keep their precision, as the community's converters\n"
      "keep them. The names stay as stored. Run the result with\n"
      "`mmgen generate --transformer-path <the file's folder>`.\n\n";
  return text + options_help(Command::Convert);
}

int run_convert(const std::vector<std::string>& arguments) {
  for (const std::string& argument : arguments)
    if (argument == "--help" || argument == "-h") {
      std::printf("%s", convert_help().c_str());
      return 0;
    }
  const SettingsLayer given = parse_arguments(Command::Convert, arguments);
  const SettingsLayer values = merge_layers({builtin_defaults(Command::Convert), given});
  const fs::path input = values.value("input", std::string());
  const fs::path out = values.value("out", std::string());
  const std::string type_name = values.value("type", std::string("q8_0"));
  const bool fp8 = type_name == "fp8_e4m3";
  check(!input.empty(), "convert: no input; pass --input DIR (a component folder) or FILE");
  check(!out.empty(), "convert: no output; pass --out FILE.gguf (or FILE.safetensors for FP8)");
  if (fp8)
    check(out.extension() == ".safetensors",
          "convert: --type fp8_e4m3 writes a safetensors file; --out {} should end in .safetensors",
          out.string());
  else
    check(out.extension() == ".gguf",
          "convert: --out {} should end in .gguf (or pass --type fp8_e4m3 for a .safetensors file)",
          out.string());
  check(fs::exists(input), "convert: --input {} does not exist", input.string());
  check(!fs::exists(out) || values.value("overwrite", false),
        "convert: {} exists; pass --overwrite to replace it, or another --out", out.string());
  const gguf::GgmlType type = fp8 ? gguf::GgmlType::F32 : gguf::parse_convert_type(type_name);

  const bool folder = fs::is_directory(input);
  const WeightStore weights =
      folder ? WeightStore::open_folder(input) : WeightStore::open_file(input);
  nlohmann::json config;
  const fs::path config_file = (folder ? input : input.parent_path()) / "config.json";
  if (fs::exists(config_file))
    config = parse_json(read_text_file(config_file), config_file.string(),
                        "fix the file or download it again");
  const std::string diffusers_class =
      config_string(config, "_class_name", std::string(), config_file.string());
  const std::string name = (folder ? input : input.parent_path()).filename().string();

  const fs::path where = out.has_parent_path() ? out.parent_path() : fs::path(".");
  fs::create_directories(where);
  const auto start = std::chrono::steady_clock::now();
  std::string line;
  if (fp8) {
    std::map<std::string, std::string> metadata = {{"mmgen.source", input.filename().string()}};
    if (!diffusers_class.empty()) metadata["mmgen.diffusers_class"] = diffusers_class;
    const fp8::ConversionSummary summary = fp8::convert_to_fp8(weights, out, metadata);
    line = fmt::format("{} tensors, {} as f8_e4m3 (one scale each) and {} kept as stored; ",
                       summary.tensors, summary.converted, summary.tensors - summary.converted);
    line += fmt::format("{:.2f} GB -> {:.2f} GB", double(summary.bytes_in) / 1e9,
                        double(summary.bytes_out) / 1e9);
  } else {
    nlohmann::json metadata = {
        {"general.architecture", architecture(diffusers_class)},
        {"general.name", name},
        {"mmgen.source", input.filename().string()},
    };
    if (!diffusers_class.empty()) metadata["mmgen.diffusers_class"] = diffusers_class;
    const gguf::ConversionSummary summary = gguf::convert_to_gguf(weights, out, type, metadata);
    const std::string fallback =
        summary.fallback > 0
            ? fmt::format(", {} as q8_0 (rows not whole super-blocks)", summary.fallback)
            : "";
    line = fmt::format("{} tensors, {} as {}{} and {} kept f32; ", summary.tensors,
                       summary.converted, gguf::ggml_type_info(uint32_t(type))->name, fallback,
                       summary.tensors - summary.converted - summary.fallback);
    line += fmt::format("{:.2f} GB -> {:.2f} GB", double(summary.bytes_in) / 1e9,
                        double(summary.bytes_out) / 1e9);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The model's config beside the file, so the folder runs as a component folder.
  if (fs::exists(config_file) && !fs::exists(where / "config.json"))
    fs::copy_file(config_file, where / "config.json");
  std::printf("convert: %s, %s, in %.1f s\n", line.c_str(), out.string().c_str(), seconds);
  return 0;
}

}  // namespace mmgen::cli
