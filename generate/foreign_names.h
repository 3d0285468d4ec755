// The names people bring from other tools (stable-diffusion.cpp's --steps and -W, diffusers' and
// ComfyUI's cfg, SGLang's num_frames spellings) and features that are coming: what an unknown
// flag, config key or command is answered with, instead of a bare "unknown".
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mmgen::cli {

// For an option name without its dashes ("steps", "W", "cfg_scale"): " (mmgen calls it
// --num-inference-steps)" for another tool's name of an option mmgen has, or a sentence saying the
// feature is not in mmgen yet ("--lora-path: LoRA adapters are coming ..."); nullopt when the name
// is no known one. `dashes` is how the name was written ("--", "-", or "" in a config file).
std::optional<std::string> foreign_option_hint(std::string_view name, std::string_view dashes);

// For a command mmgen does not have: "serve" (coming), another tool's verb ("txt2img", "run"), or
// a misspelling of a real one ("genrate"): the sentence to add to the error; nullopt when none.
std::optional<std::string> foreign_command_hint(std::string_view command);

}  // namespace mmgen::cli
