#include "generate/model_folder_defaults.h"

#include <fmt/format.h>

#include "attention/backend_config.h"
#include "core/error.h"
#include "core/file.h"
#include "core/yaml.h"

namespace mmgen::cli {

using json = nlohmann::json;

ModelFolderDefaults load_model_folder_defaults(const fs::path& model_root) {
  ModelFolderDefaults defaults;
  const fs::path file = model_root / kModelDefaultsFile;
  // Absent: none. Present, it must be a file (a FIFO, a device or a folder there is refused, not
  // skipped: the user would not know their model's defaults were dropped).
  std::error_code absent;
  if (fs::symlink_status(file, absent).type() == fs::file_type::not_found) return defaults;
  check_regular_file(file, "the model folder's defaults");
  const std::string where = file.string();
  json document = yaml_to_json(read_text_file(file), where);
  if (document.is_null()) document = json::object();
  check(document.is_object(), "{}: expected a mapping of option names to values", where);
  if (document.contains("draws")) {
    const json& draws = document["draws"];
    check(draws == "stills" || draws == "video",
          "{}: draws must be stills (a model trained on single pictures) or video, got {}", where,
          draws.dump());
    defaults.draws_stills = draws == "stills";
    document.erase("draws");
  }
  // The model's own file may not point at another model or take the user's choices away.
  for (const char* key : {"model_path", "model-path", "config", "revision"})
    check(!document.contains(key), "{}: a model folder's defaults may not set {}", where, key);
  defaults.layer = settings_from_document(document, where);
  // The components are the model's own folders: the index is read before this file is.
  check(!defaults.layer.contains("component-paths"),
        "{}: a model folder's defaults may not replace its components; pass --<component>-path "
        "on the command line or in --config",
        where);
  resolve_relative_paths(defaults.layer, model_root);
  // Backend settings files it names (STA's mask) are the model's too: read from its folder.
  if (defaults.layer.contains("attention-backend-config"))
    defaults.layer["attention-backend-config"] =
        attention::parse_backend_config_spec(defaults.layer["attention-backend-config"],
                                             where + ": attention_backend_config", model_root);
  defaults.file = file;
  return defaults;
}

std::string stills_warning(const ModelFolderDefaults& defaults, int64_t num_frames) {
  if (!defaults.draws_stills.value_or(false) || num_frames <= 1) return {};
  return fmt::format(
      "{} says this model draws stills (it was trained on single pictures): {} frames will not "
      "move as a video does; pass --num-frames 1 for the picture it was trained to draw",
      defaults.file.string(), num_frames);
}

}  // namespace mmgen::cli
