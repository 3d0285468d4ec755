// `mmgen convert`: a component's weights into one GGUF file (core/gguf_convert.h), the way users
// of stable-diffusion.cpp and ComfyUI-GGUF keep big checkpoints small; `mmgen generate
// --<component>-path` runs the folder it lands in.
#pragma once

#include <string>
#include <vector>

namespace mmgen::cli {

int run_convert(const std::vector<std::string>& arguments);

std::string convert_help();

}  // namespace mmgen::cli
