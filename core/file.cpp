#include "core/file.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/interrupt.h"

namespace mmgen {
namespace {

// What a path that is not a regular file is, for messages.
const char* not_a_file(fs::file_type type) {
  switch (type) {
    case fs::file_type::not_found:
      return "does not exist";
    case fs::file_type::directory:
      return "is a folder, not a file";
    default:
      return "is a FIFO, a device or a socket, not a file";
  }
}

// Opens `path` read-only and checks that it is a regular file (after following symlinks).
int open_regular(const fs::path& path, size_t& size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  check(fd >= 0, "cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    std::error_code error;
    fail("{} is not a regular file: it {}; point mmgen at a real file", path.string(),
         not_a_file(fs::status(path, error).type()));
  }
  size = size_t(info.st_size);
  return fd;
}

// Reads up to `size` bytes from `fd` and closes it; returns what was read.
std::string read_and_close(int fd, size_t size) {
  std::string text(size, '\0');
  size_t done = 0;
  while (done < size) {
    ssize_t got = ::read(fd, text.data() + done, size - done);
    if (got <= 0) break;
    done += size_t(got);
  }
  ::close(fd);
  text.resize(done);
  return text;
}

}  // namespace

void check_regular_file(const fs::path& path, std::string_view what) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error && error != std::errc::no_such_file_or_directory)
    fail("{} {}: {}", what, path.string(), error.message());
  if (status.type() != fs::file_type::regular)
    fail("{} {} {}; give a regular file", what, path.string(), not_a_file(status.type()));
}

std::string filesystem_error_line(const fs::filesystem_error& error) {
  std::string paths = error.path1().string();
  if (!error.path2().empty()) paths += " -> " + error.path2().string();
  return fmt::format("{}: {}", paths.empty() ? "a file" : paths, error.code().message());
}

std::string read_text_file(const fs::path& path, size_t max_bytes) {
  size_t size = 0;
  int fd = open_regular(path, size);
  if (size > max_bytes) {
    ::close(fd);
    fail("{} is {} bytes, more than the {} allowed for this kind of file", path.string(), size,
         max_bytes);
  }
  std::string text = read_and_close(fd, size);
  check(text.size() == size, "could not read all of {}", path.string());
  return text;
}

std::string read_file_head(const fs::path& path, size_t bytes) {
  size_t size = 0;
  const int fd = open_regular(path, size);
  return read_and_close(fd, std::min(size, bytes));
}

std::shared_ptr<MappedFile> MappedFile::open(const fs::path& path) {
  size_t size = 0;
  int fd = open_regular(path, size);
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = size;
  if (size > 0) {
    void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    check(address != MAP_FAILED, "cannot map {}: {}", path.string(), std::strerror(errno));
    file->data_ = static_cast<std::byte*>(address);
  } else {
    ::close(fd);
  }
  return file;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

void write_atomically(const fs::path& path, const std::function<void(const fs::path&)>& write) {
  std::random_device random;
  fs::path temporary = path;
  // Keep the extension last: OpenCV picks the encoder from it.
  temporary.replace_filename("." + path.stem().string() + ".partial-" + std::to_string(random()) +
                             path.extension().string());
  // A second Ctrl-C while writing deletes the temporary (core/interrupt.h).
  set_partial_output(temporary.string());
  try {
    write(temporary);
    std::error_code error;
    fs::rename(temporary, path, error);
    check(!error, "cannot move the finished output to {}: {}", path.string(), error.message());
  } catch (...) {
    set_partial_output("");
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw;
  }
  set_partial_output("");
}

std::string file_sha256(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  check(bool(in), "{}: cannot be read to hash it", path.string());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                  EVP_MD_CTX_free);
  check(context && EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) == 1,
        "{}: SHA-256 is not available from libcrypto", path.string());
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(context.get(), buffer.data(), size_t(in.gcount()));
  }
  check(in.eof(), "{}: a read failed while hashing it", path.string());
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context.get(), digest, &length);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

}  // namespace mmgen
