// Writing a generation's result: PNG/JPG/WebP for one frame, MP4 for several (through OpenCV),
// npy for exact checks. Files are written under a temporary name and renamed when complete. The
// generation settings travel with the output: an iTXt chunk in a PNG, a `.json` beside a video.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "pipeline/request.h"

namespace mmgen {

namespace fs = std::filesystem;

// The output file for a request: `--output-file-name` (extension added when missing) or, as
// SGLang names them, `{prompt prefix}_{YYYYmmdd-HHMMSS}_{hash}.{format}` with the prompt's first
// 100 characters sanitised (letters, digits, '-' and '.'; the rest become '_') and the hash 8 hex
// digits of the request's settings, under `--output-path`. `batch_index` i (prompt i of a
// --prompt-file-path batch) adds `_i` before the extension, so a batch's names are distinct.
// Existing files are never replaced without --overwrite: a chosen name that exists is an Error; a
// generated one gets `_1`, `_2`, ... before the extension.
fs::path output_file_path(const Request& request, std::optional<size_t> batch_index = std::nullopt);

// Refuses, before any work, an output folder that cannot take a file: a path that is a file, or a
// folder (or, when it does not exist yet, the nearest existing folder above it, where it would be
// made) in which a probe file cannot be created and removed. Creates nothing that stays.
void check_output_folder_writable(const fs::path& folder);

// Writes frames [F, H, W, 3] (float32 in [0, 1]) in `format` to `path`, with `settings` embedded
// (PNG) or beside it (`<path>.json` for mp4 and npy). Returns the files written.
std::vector<fs::path> write_frames(const Tensor& frames, const std::string& format,
                                   const fs::path& path, const nlohmann::json& settings,
                                   double fps);

// Turns float frames into 8-bit RGB as diffusers does: PNG/JPG/WebP round (numpy_to_pil), videos
// truncate (export_to_video).
std::vector<uint8_t> frames_to_u8(const Tensor& frames, bool round);

// Inserts an iTXt chunk (UTF-8 text) before a PNG's IEND; `png` is a complete PNG file's bytes.
std::vector<uint8_t> png_with_text(const std::vector<uint8_t>& png, const std::string& keyword,
                                   const std::string& text);
// Reads the iTXt/tEXt chunk `keyword` back from PNG bytes; empty when absent.
std::string png_text(const std::vector<uint8_t>& png, const std::string& keyword);

// Encoders; these need OpenCV (output_opencv.cpp) and throw a clear Error in builds without it.
std::vector<uint8_t> encode_image(const Tensor& frame_u8_hwc, const std::string& format);
void write_mp4(const std::vector<uint8_t>& rgb, int64_t frames, int64_t height, int64_t width,
               double fps, const fs::path& path);
bool have_video_encoder();

}  // namespace mmgen
