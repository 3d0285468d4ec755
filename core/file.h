// File access with limits: bounded whole-file reads for text formats, read-only memory mapping
// for weights, and atomic writes (temporary name, renamed when complete) for outputs.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/limits.h"
#include "core/tensor.h"

namespace mmgen {

namespace fs = std::filesystem;

// Refuses, in one line, a path that is not a regular file (after following links): "<what>
// <path> does not exist", "is a folder", "is a FIFO, a device or a socket, not a file", or the
// system's reason (a link loop, a name too long).
void check_regular_file(const fs::path& path, std::string_view what);

// A filesystem_error (a link loop, a name too long, a permission) as one line: its paths and the
// system's reason, without the library's prefix.
std::string filesystem_error_line(const fs::filesystem_error& error);

// Reads a regular file of at most `max_bytes`. Errors name the file and the problem.
std::string read_text_file(const fs::path& path, size_t max_bytes = Limits::kMaxTextFile);

// The first `bytes` bytes of a regular file (fewer when it is shorter): a format's magic. Opened
// as every read is (a FIFO is refused, never waited on), so sniffing cannot hang.
std::string read_file_head(const fs::path& path, size_t bytes);

// The SHA-256 of the file's bytes, as 64 lowercase hex digits (what Civitai and ComfyUI name a
// LoRA file by). Throws Error, one line naming the file, when it cannot be read.
std::string file_sha256(const fs::path& path);

// A read-only mapping of a whole regular file.
class MappedFile final : public Storage {
 public:
  static std::shared_ptr<MappedFile> open(const fs::path& path);
  ~MappedFile() override;
  std::byte* data() override { return data_; }
  size_t size() const override { return size_; }
  const fs::path& path() const { return path_; }

 private:
  MappedFile() = default;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  fs::path path_;
};

// Writes `path` by calling `write(temporary_path)` and renaming the result into place, so a
// reader never sees a half-written file; the temporary is removed if `write` throws.
void write_atomically(const fs::path& path, const std::function<void(const fs::path&)>& write);

}  // namespace mmgen
