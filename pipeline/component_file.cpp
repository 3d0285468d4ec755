#include "pipeline/component_file.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"

namespace mmgen {

WeightFileKind weight_file_kind(const fs::path& file, const std::string& flag) {
  check_regular_file(file, flag);
  const std::string bytes = read_file_head(file, 9);
  std::array<unsigned char, 9> head{};
  std::copy(bytes.begin(), bytes.end(), head.begin());
  const size_t got = bytes.size();
  if (got >= 4 && head[0] == 'G' && head[1] == 'G' && head[2] == 'U' && head[3] == 'F')
    return WeightFileKind::Gguf;
  if (got == head.size()) {
    uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = (header << 8) | head[size_t(i)];
    // The header is JSON that fits in the file; the reader checks the rest when it opens it.
    const uint64_t size = fs::file_size(file);
    if (head[8] == '{' && header >= 2 && header <= size - 8) return WeightFileKind::Safetensors;
  }
  fail(
      "{}: {} is neither a GGUF nor a safetensors file; give a .gguf or .safetensors weights "
      "file, or the component's folder",
      flag, file.string());
}

const char* weight_file_kind_name(WeightFileKind kind) {
  return kind == WeightFileKind::Gguf ? "GGUF" : "safetensors";
}

fs::path component_file_config_folder(const fs::path& file, const fs::path& root,
                                      const std::string& component, const std::string& class_name) {
  const fs::path beside = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  if (!fs::exists(beside / "config.json")) return root / component;
  const nlohmann::json config = read_json_object(beside / "config.json");
  bool names_class = config.value("_class_name", nlohmann::json()) == class_name;
  if (config.contains("architectures") && config["architectures"].is_array())
    for (const auto& architecture : config["architectures"])
      names_class = names_class || architecture == class_name;
  return names_class ? beside : root / component;
}

}  // namespace mmgen
