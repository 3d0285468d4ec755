// Shared by the libFuzzer targets: a scratch file for APIs that read paths, and the rule every
// target enforces — bad input may only surface as mmgen::Error; anything else (another exception,
// a crash, a sanitizer report) is a finding.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace mmgen::fuzz {

inline std::filesystem::path scratch_file(const std::string& name) {
  static const std::filesystem::path dir = [] {
    auto path =
        std::filesystem::temp_directory_path() / ("mmgen-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    return path;
  }();
  return dir / name;
}

inline std::filesystem::path write_scratch(const std::string& name, const uint8_t* data,
                                           size_t size) {
  const auto path = scratch_file(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), std::streamsize(size));
  return path;
}

// Runs `body`; an mmgen::Error is the expected answer to bad input, anything else aborts.
template <typename Body>
int expect_only_errors(Body&& body) {
  try {
    body();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception (not mmgen::Error): %s\n", e.what());
    std::abort();
  }
  return 0;
}

}  // namespace mmgen::fuzz
