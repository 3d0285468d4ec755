#include "generate/convert_command.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/gguf_convert.h"
#include "core/safetensors.h"
#include "generate/options.h"
#include "generate/settings.h"

namespace mmgen::cli {
namespace {

namespace fs = std::filesystem;

// general.architecture as ComfyUI-GGUF and stable-diffusion.cpp name the models they load; the
// diffusers class, lowercased, for the others.
std::string architecture(const std::string& diffusers_class) {
  if (diffusers_class == "WanTransformer3DModel") return "wan";
  std::string lower;
  for (const char c : diffusers_class) lower += char(std::tolower(static_cast<unsigned char>(c)));
  return lower.empty() ? "unknown" : lower;
}

}  // namespace

std::string convert_help() {
  const std::string text =
      "Usage: mmgen convert --input PATH --out FILE.gguf [--type q8_0|q4_k] [--overwrite]\n\n"
      "Writes a component's weights (a diffusers folder's safetensors, one file or shards) as one\n"
      "GGUF file. The weight matrices take --type; norms, biases, embeddings, modulation tables\n"
      "and small tensors stay f32, as the community's converters keep them. The names stay as\n"
      "stored. Run the result with `mmgen generate --transformer-path <the .gguf's folder>`.\n\n";
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
  check(!input.empty(), "convert: no input; pass --input DIR (a component folder) or FILE");
  check(!out.empty(), "convert: no output; pass --out FILE.gguf");
  check(out.extension() == ".gguf", "convert: --out {} should end in .gguf", out.string());
  check(fs::exists(input), "convert: --input {} does not exist", input.string());
  check(!fs::exists(out) || values.value("overwrite", false),
        "convert: {} exists; pass --overwrite to replace it, or another --out", out.string());
  const gguf::GgmlType type = gguf::parse_convert_type(values.value("type", std::string("q8_0")));

  const bool folder = fs::is_directory(input);
  const WeightStore weights =
      folder ? WeightStore::open_folder(input) : WeightStore::open_file(input);
  nlohmann::json config;
  const fs::path config_file = (folder ? input : input.parent_path()) / "config.json";
  if (fs::exists(config_file))
    config = nlohmann::json::parse(read_text_file(config_file), nullptr, false);
  const std::string diffusers_class =
      config.is_object() ? config.value("_class_name", std::string()) : std::string();
  nlohmann::json metadata = {
      {"general.architecture", architecture(diffusers_class)},
      {"general.name", (folder ? input : input.parent_path()).filename().string()},
      {"mmgen.source", input.filename().string()},
  };
  if (!diffusers_class.empty()) metadata["mmgen.diffusers_class"] = diffusers_class;

  const fs::path where = out.has_parent_path() ? out.parent_path() : fs::path(".");
  fs::create_directories(where);
  const auto start = std::chrono::steady_clock::now();
  const gguf::ConversionSummary summary = gguf::convert_to_gguf(weights, out, type, metadata);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The model's config beside the file, so the folder runs as a component folder.
  if (fs::exists(config_file) && !fs::exists(where / "config.json"))
    fs::copy_file(config_file, where / "config.json");
  const std::string fallback =
      summary.fallback > 0
          ? fmt::format(", {} as q8_0 (rows not whole super-blocks)", summary.fallback)
          : "";
  std::printf(
      "convert: %lld tensors, %lld as %s%s and %lld kept f32; %.2f GB -> %.2f GB, %s, in %.1f s\n",
      (long long)summary.tensors, (long long)summary.converted,
      std::string(gguf::ggml_type_info(uint32_t(type))->name).c_str(), fallback.c_str(),
      (long long)(summary.tensors - summary.converted - summary.fallback),
      double(summary.bytes_in) / 1e9, double(summary.bytes_out) / 1e9, out.string().c_str(),
      seconds);
  return 0;
}

}  // namespace mmgen::cli
