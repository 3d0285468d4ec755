// GGUF files (ggml's format, as stable-diffusion.cpp, llama.cpp and the community's Wan / Z-Image
// quantizations write them), read from a memory map: the header, the metadata, the tensor table,
// and each tensor's blocks, dequantized to float32 on request (core/gguf_quants.h). Every count,
// length and offset is checked against the file before it is used; a bad file is refused in one
// line naming the file and what is wrong.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/gguf_quants.h"
#include "core/tensor.h"

namespace mmgen::gguf {

namespace fs = std::filesystem;

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  // Row-major, as torch and safetensors write it (GGUF stores the dimensions innermost first).
  Shape shape;
  uint64_t offset = 0;  // from the start of the data section
  size_t nbytes = 0;
};

class GgufFile {
 public:
  static GgufFile open(const fs::path& path);

  uint32_t version() const { return version_; }
  // Metadata as JSON: numbers, booleans, strings and arrays of them.
  const nlohmann::json& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // Null when the file has no tensor of that name.
  const GgufTensorInfo* find(const std::string& name) const;
  // The tensor's stored blocks (nbytes of them, inside the file).
  const std::byte* blocks(const GgufTensorInfo& tensor) const;
  // The tensor as float32 on the host (stored f32: a read-only view into the mapping).
  Tensor to_f32(const std::string& name) const;
  // A quantized tensor's blocks as they are in the mapped file: dtype q8_0 ... q6_k, shape
  // [rows..., cols / block] (core/dtype.h), for the CPU product to read without expanding it.
  Tensor quantized_blocks(const std::string& name) const;
  const fs::path& path() const { return file_->path(); }

 private:
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  nlohmann::json metadata_ = nlohmann::json::object();
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  size_t data_start_ = 0;
};

}  // namespace mmgen::gguf
