#include "pipeline/output.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "core/file.h"
#include "core/npy.h"
#include "core/text.h"
#include "pipeline/mp4_check.h"

namespace mmgen {

using json = nlohmann::json;

namespace {

uint32_t crc32(const uint8_t* data, size_t size, uint32_t crc = 0) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t read_be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}

void append_be32(std::vector<uint8_t>& out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(value >> shift));
}

// File names keep letters, digits and a few safe marks; everything else becomes '_'.
std::string sanitize(const std::string& text, size_t max_length) {
  std::string out;
  for (unsigned char c : text) {
    if (out.size() >= max_length) break;
    out += (std::isalnum(c) || c == '-' || c == '.') ? char(c) : '_';
  }
  while (!out.empty() && (out.back() == '_' || out.back() == '.')) out.pop_back();
  return out.empty() ? "output" : out;
}

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  write_atomically(path, [&](const fs::path& temporary) {
    std::ofstream out(temporary, std::ios::binary);
    check(bool(out), "cannot write {}; check that the folder is writable", path.string());
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    out.close();
    check(bool(out), "writing {} failed (disk full?)", path.string());
  });
}

}  // namespace

namespace {

// FNV-1a, 64 bit: a hash that is the same on every build and machine, so the same settings give
// the same short hash.
uint64_t stable_hash(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

// Every format but PNG (which carries them inside) writes its settings beside: NAME.json.
bool has_settings_sidecar(const std::string& format) {
  return format != "png";
}
fs::path settings_sidecar(const fs::path& output) {
  fs::path sidecar = output;
  sidecar += ".json";
  return sidecar;
}

// Whether anything has the name, a link included: fs::exists follows a link, so a dangling one
// looked free and was replaced without --overwrite.
bool name_taken(const fs::path& path) {
  std::error_code error;
  return fs::symlink_status(path, error).type() != fs::file_type::not_found;
}

}  // namespace

fs::path output_file_path(const Request& request, std::optional<size_t> batch_index) {
  std::string extension = "." + request.output_format;
  std::string stem;
  const bool named = request.output_file_name.has_value();
  if (named) {
    stem = *request.output_file_name;
    check(!stem.empty() && stem.find('/') == std::string::npos && stem != "." && stem != "..",
          "--output-file-name '{}' must be a plain file name; put folders in --output-path",
          text_for_message(stem));
    // "." would become the hidden "..png".
    check(stem.front() != '.',
          "--output-file-name '{}' starts with a dot, which would hide the file; name it "
          "without the dot",
          text_for_message(stem));
    // A name whose extension is the format's keeps it as written (one.jpeg, B.PNG); any other
    // name gets the format's extension added.
    if (output_format_of_name(stem) == request.output_format) {
      extension = fs::path(stem).extension().string();
      stem.resize(stem.size() - extension.size());
    }
  } else {
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
    stem = fmt::format("{}_{}_{:08x}", sanitize(request.prompt, 100), stamp,
                       uint32_t(stable_hash(request.settings.dump()) >> 32));
  }
  if (batch_index) stem += "_" + std::to_string(*batch_index);
  // Linux takes at most 255 bytes for one name (NAME_MAX); a longer one failed only at the write.
  check(stem.size() + extension.size() <= 255,
        "--output-file-name: the file name would be {} bytes ('{}'); a file name may have at most "
        "255 with its extension",
        stem.size() + extension.size(), text_for_message(stem + extension));
  fs::path path = request.output_path / (stem + extension);
  const auto taken = [&](const fs::path& candidate) {
    return name_taken(candidate) ||
           (has_settings_sidecar(request.output_format) && name_taken(settings_sidecar(candidate)));
  };
  if (request.overwrite || !taken(path)) return path;
  // A generated name that is taken (the same request within the same second) gets a counter; a
  // name the user chose is theirs to replace.
  check(
      !named,
      "{} already exists; pass --overwrite to replace it or choose another --output-file-name",
      name_taken(path) ? path.string() : settings_sidecar(path).string() + " (its settings file)");
  for (int counter = 1;; ++counter) {
    path = request.output_path / fmt::format("{}_{}{}", stem, counter, extension);
    if (!taken(path)) return path;
  }
}

std::vector<uint8_t> frames_to_u8(const Tensor& frames, bool round) {
  Tensor source = frames.to(DType::F32);
  std::vector<uint8_t> out(size_t(source.numel()));
  const float* p = source.data<float>();
  for (size_t i = 0; i < out.size(); ++i) {
    // NaN passes std::clamp and its conversion to uint8 is undefined (it came out black).
    check(std::isfinite(p[i]),
          "the decoded frames hold NaN or infinity (value {} of {}): the VAE's output is not a "
          "picture; check the VAE's weights (and --latents, if given)",
          i, out.size());
    const float scaled = std::clamp(p[i], 0.0f, 1.0f) * 255.0f;
    out[i] = uint8_t(round ? std::nearbyint(scaled) : scaled);
  }
  return out;
}

std::vector<uint8_t> png_with_text(const std::vector<uint8_t>& png, const std::string& keyword,
                                   const std::string& text) {
  check(png.size() >= 20, "PNG encoder returned too little data");
  // Chunk data: keyword \0, compression flag 0, method 0, language "" \0, translated "" \0, text.
  std::vector<uint8_t> chunk = {'i', 'T', 'X', 't'};
  chunk.insert(chunk.end(), keyword.begin(), keyword.end());
  chunk.insert(chunk.end(), {0, 0, 0, 0, 0});
  chunk.insert(chunk.end(), text.begin(), text.end());
  // IEND is the last 12 bytes of a PNG: insert the new chunk before it.
  std::vector<uint8_t> out(png.begin(), png.end() - 12);
  append_be32(out, uint32_t(chunk.size() - 4));
  out.insert(out.end(), chunk.begin(), chunk.end());
  append_be32(out, crc32(chunk.data(), chunk.size()));
  out.insert(out.end(), png.end() - 12, png.end());
  return out;
}

std::string png_text(const std::vector<uint8_t>& png, const std::string& keyword) {
  size_t position = 8;
  while (position + 12 <= png.size()) {
    const uint32_t length = read_be32(&png[position]);
    if (length > png.size() - position - 12) break;
    const std::string type(png.begin() + long(position) + 4, png.begin() + long(position) + 8);
    const uint8_t* data = &png[position + 8];
    if ((type == "iTXt" || type == "tEXt") && length > keyword.size() &&
        std::equal(keyword.begin(), keyword.end(), data) && data[keyword.size()] == 0) {
      size_t skip = keyword.size() + 1;
      if (type == "iTXt") {  // compression flag, method, then two NUL-terminated strings
        skip += 2;
        for (int strings = 0; strings < 2 && skip < length; ++skip)
          if (data[skip] == 0) ++strings;
      }
      return std::string(reinterpret_cast<const char*>(data) + skip, length - skip);
    }
    position += 12 + length;
  }
  return "";
}

void check_output_folder_writable(const fs::path& folder) {
  const fs::path given = folder.empty() ? fs::path(".") : folder;
  std::error_code error;
  fs::path existing = fs::absolute(given, error).lexically_normal();
  check(!error, "--output-path {}: {}", given.string(), error.message());
  // The deepest part of the path that exists: the folder itself, or where it would be created.
  while (!fs::exists(existing, error) && existing.has_parent_path() &&
         existing != existing.parent_path())
    existing = existing.parent_path();
  check(fs::is_directory(existing, error),
        "--output-path {}: {} is not a folder; pass a folder for outputs", given.string(),
        existing.string());
  // Permissions alone do not tell (root, read-only mounts, ACLs): create and remove a file.
  std::string probe = (existing / ".mmgen-write-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  check(fd >= 0,
        "--output-path {}: cannot write in {} ({}); pass --output-path to a folder you can write",
        given.string(), existing.string(), std::strerror(errno));
  ::close(fd);
  fs::remove(probe, error);
}

std::vector<fs::path> write_frames(const Tensor& frames, const std::string& format,
                                   const fs::path& path, const json& settings, double fps) {
  check(frames.dim() == 4 && frames.size(3) == 3,
        "output frames must be [frames, height, width, 3], got {}", shape_string(frames.shape()));
  std::error_code error;
  fs::create_directories(path.parent_path().empty() ? fs::path(".") : path.parent_path(), error);
  check(!error, "cannot create output folder {}: {}", path.parent_path().string(), error.message());
  const std::string text = settings.dump();
  // The output and its settings are one result: when the sidecar cannot be written (a full
  // disk), the output written just before is removed too and the error goes on.
  auto write_sidecar = [&] {
    const fs::path sidecar = settings_sidecar(path);
    const std::string pretty = settings.dump(2) + "\n";
    try {
      write_bytes(sidecar, std::vector<uint8_t>(pretty.begin(), pretty.end()));
    } catch (...) {
      std::error_code ignored;
      fs::remove(path, ignored);
      throw;
    }
    return sidecar;
  };

  const int64_t count = frames.size(0), height = frames.size(1), width = frames.size(2);
  if (format == "npy") {
    write_npy(path, frames.to(DType::F32));
    return {path, write_sidecar()};
  }
  if (format == "mp4") {
    const std::vector<uint8_t> rgb = frames_to_u8(frames, /*round=*/false);
    write_atomically(path, [&](const fs::path& temporary) {
      write_mp4(rgb, count, height, width, fps, temporary);
      // A video cut short is never renamed into place (the writer reports no errors itself).
      check(mp4_is_complete(temporary), "writing {} failed (disk full?): the video is incomplete",
            path.string());
    });
    return {path, write_sidecar()};
  }
  check(count == 1, "{} holds one picture but there are {} frames; use mp4 or npy", format, count);
  const std::vector<uint8_t> rgb = frames_to_u8(frames, /*round=*/true);
  Tensor image = Tensor::empty({height, width, 3}, DType::U8);
  std::copy(rgb.begin(), rgb.end(), image.data<uint8_t>());
  std::vector<uint8_t> encoded = encode_image(image, format);
  if (format == "png") encoded = png_with_text(encoded, "parameters", text);
  write_bytes(path, encoded);
  if (!has_settings_sidecar(format)) return {path};
  return {path, write_sidecar()};
}

}  // namespace mmgen
