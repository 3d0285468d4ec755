// --model-path as a Hugging Face model id ("Wan-AI/Wan2.1-T2V-1.3B-Diffusers"): the snapshot the
// local Hugging Face cache holds for it, found offline. mmgen never downloads.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace mmgen {

namespace fs = std::filesystem;

// The local Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub (as huggingface_hub finds it).
fs::path hub_cache_folder();

// What --model-path names. A path that exists is that folder (a local folder always wins over an
// id). Otherwise an `org/name` id is looked up in the hub cache: models--org--name/refs/<revision>
// (default main) holds a commit hash whose snapshot is snapshots/<hash>/; a revision that is a
// commit hash names its snapshot directly. An id that is not cached is an error in one line that
// says where mmgen looked and how to download it. Anything else is returned as given (the model
// index then says it does not exist). `revision` with a local folder is an error.
fs::path resolve_model_path(const std::string& given, const std::optional<std::string>& revision);

}  // namespace mmgen
