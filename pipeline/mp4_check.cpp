#include "pipeline/mp4_check.h"

#include <cstdint>
#include <fstream>
#include <set>
#include <string>

namespace mmgen {

bool mp4_is_complete(const std::filesystem::path& path) {
  std::error_code error;
  const uint64_t size = std::filesystem::file_size(path, error);
  if (error) return false;
  std::ifstream in(path, std::ios::binary);
  std::set<std::string> seen;
  uint64_t at = 0;
  while (at < size) {
    // A box: 32-bit big-endian size (1: a 64-bit size follows; 0: to the end of the file), type.
    unsigned char header[16];
    if (size - at < 8 || !in.seekg(std::streamoff(at)) ||
        !in.read(reinterpret_cast<char*>(header), 8))
      return false;
    uint64_t box = 0;
    for (int i = 0; i < 4; ++i) box = box << 8 | header[i];
    uint64_t header_size = 8;
    if (box == 1) {
      if (size - at < 16 || !in.read(reinterpret_cast<char*>(header + 8), 8)) return false;
      box = 0;
      for (int i = 8; i < 16; ++i) box = box << 8 | header[i];
      header_size = 16;
    } else if (box == 0) {
      box = size - at;
    }
    if (box < header_size || box > size - at) return false;  // cut short: runs past the end
    seen.insert(std::string(reinterpret_cast<const char*>(header + 4), 4));
    at += box;
  }
  return seen.count("ftyp") && seen.count("mdat") && seen.count("moov");
}

}  // namespace mmgen
