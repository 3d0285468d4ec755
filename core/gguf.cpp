#include "core/gguf.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/limits.h"
#include "core/text.h"

namespace mmgen::gguf {
namespace {

// Metadata value types (gguf_type).
enum ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// Reads the header front to back; every read is checked against the file's end.
class Cursor {
 public:
  Cursor(const std::byte* data, size_t size, const fs::path& path)
      : data_(data), size_(size), path_(path) {}

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, data_ + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string string(const char* what) {
    const uint64_t length = read<uint64_t>(what);
    need(length, what);
    std::string text(reinterpret_cast<const char*>(data_ + at_), size_t(length));
    at_ += size_t(length);
    return text;
  }
  size_t position() const { return at_; }
  [[noreturn]] void bad(const std::string& problem) const {
    fail("{}: not a GGUF file mmgen can read: {} (at byte {}); re-export it or check the download",
         path_.string(), problem, at_);
  }

 private:
  void need(uint64_t bytes, const char* what) const {
    if (bytes > size_ - at_) bad(fmt::format("the file ends inside {}", what));
  }
  const std::byte* data_;
  size_t size_, at_ = 0;
  const fs::path& path_;
};

nlohmann::json read_value(Cursor& in, uint32_t type, int depth) {
  switch (type) {
    case kU8:
      return in.read<uint8_t>("a u8 value");
    case kI8:
      return in.read<int8_t>("an i8 value");
    case kU16:
      return in.read<uint16_t>("a u16 value");
    case kI16:
      return in.read<int16_t>("an i16 value");
    case kU32:
      return in.read<uint32_t>("a u32 value");
    case kI32:
      return in.read<int32_t>("an i32 value");
    case kF32:
      return in.read<float>("an f32 value");
    case kBool:
      return in.read<uint8_t>("a bool value") != 0;
    case kString:
      return in.string("a string value");
    case kU64:
      return in.read<uint64_t>("a u64 value");
    case kI64:
      return in.read<int64_t>("an i64 value");
    case kF64:
      return in.read<double>("an f64 value");
    case kArray: {
      if (depth > 8) in.bad("metadata arrays nested too deep");
      const uint32_t element = in.read<uint32_t>("an array's element type");
      const uint64_t count = in.read<uint64_t>("an array's length");
      if (count > Limits::kMaxGgufArray)
        in.bad(fmt::format("a metadata array of {} elements (at most {})", count,
                           Limits::kMaxGgufArray));
      nlohmann::json array = nlohmann::json::array();
      for (uint64_t i = 0; i < count; ++i) array.push_back(read_value(in, element, depth + 1));
      return array;
    }
    default:
      in.bad(fmt::format("metadata value type {}", type));
  }
}

}  // namespace

GgufFile GgufFile::open(const fs::path& path) {
  GgufFile file;
  file.file_ = MappedFile::open(path);
  const std::byte* data = file.file_->data();
  const size_t size = file.file_->size();
  Cursor in(data, size, path);
  const uint32_t magic = in.read<uint32_t>("the magic");
  if (magic != 0x46554747u) in.bad("it does not start with \"GGUF\"");
  file.version_ = in.read<uint32_t>("the version");
  if (file.version_ != 2 && file.version_ != 3)
    in.bad(fmt::format("version {} (2 and 3 are read)", file.version_));
  const uint64_t tensor_count = in.read<uint64_t>("the tensor count");
  const uint64_t metadata_count = in.read<uint64_t>("the metadata count");
  if (tensor_count > Limits::kMaxGgufEntries || metadata_count > Limits::kMaxGgufEntries)
    in.bad(fmt::format("{} tensors and {} metadata keys (at most {} each)", tensor_count,
                       metadata_count, Limits::kMaxGgufEntries));
  for (uint64_t i = 0; i < metadata_count; ++i) {
    const std::string key = in.string("a metadata key");
    const uint32_t type = in.read<uint32_t>("a metadata type");
    file.metadata_[key] = read_value(in, type, 0);
  }
  uint64_t alignment = 32;
  if (file.metadata_.contains("general.alignment")) {
    const nlohmann::json& value = file.metadata_["general.alignment"];
    if (!value.is_number_unsigned() || value.get<uint64_t>() == 0 ||
        value.get<uint64_t>() > (1u << 20) || (value.get<uint64_t>() & (value.get<uint64_t>() - 1)))
      in.bad("general.alignment is not a power of two");
    alignment = value.get<uint64_t>();
  }
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo tensor;
    tensor.name = in.string("a tensor name");
    const uint32_t dims = in.read<uint32_t>("a tensor's dimension count");
    if (dims == 0 || dims > 4)
      in.bad(fmt::format("tensor {} has {} dimensions", text_for_message(tensor.name), dims));
    std::vector<uint64_t> ne(dims);
    uint64_t count = 1;
    for (uint32_t d = 0; d < dims; ++d) {
      ne[d] = in.read<uint64_t>("a tensor dimension");
      if (ne[d] == 0 || ne[d] > (uint64_t(1) << 40) || count > (uint64_t(1) << 40) / ne[d])
        in.bad(fmt::format("tensor {} has dimension {} of {}", text_for_message(tensor.name), d,
                           ne[d]));
      count *= ne[d];
    }
    const uint32_t type = in.read<uint32_t>("a tensor type");
    const GgmlTypeInfo* info = ggml_type_info(type);
    if (!info)
      in.bad(
          fmt::format("tensor {} has ggml type {}, which mmgen does not read (it reads f32, "
                      "f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k)",
                      text_for_message(tensor.name), type));
    if (ne[0] % uint64_t(info->block) != 0)
      in.bad(fmt::format("tensor {} has rows of {} elements, not whole {} blocks of {}",
                         text_for_message(tensor.name), ne[0], info->name, info->block));
    tensor.type = GgmlType(type);
    tensor.offset = in.read<uint64_t>("a tensor offset");
    if (tensor.offset % alignment != 0)
      in.bad(fmt::format("tensor {} starts at {}, not a multiple of the alignment {}",
                         text_for_message(tensor.name), tensor.offset, alignment));
    tensor.nbytes = size_t(count / uint64_t(info->block) * info->bytes);
    for (uint32_t d = dims; d-- > 0;) tensor.shape.push_back(int64_t(ne[d]));
    if (file.index_.count(tensor.name))
      in.bad(fmt::format("tensor {} appears twice", text_for_message(tensor.name)));
    file.index_[tensor.name] = file.tensors_.size();
    file.tensors_.push_back(std::move(tensor));
  }
  file.data_start_ = (in.position() + alignment - 1) / alignment * alignment;
  for (const GgufTensorInfo& tensor : file.tensors_)
    if (file.data_start_ > size || tensor.offset > size - file.data_start_ ||
        tensor.nbytes > size - file.data_start_ - tensor.offset)
      fail(
          "{}: not a GGUF file mmgen can read: tensor {} ({} bytes at {}) runs past the end of "
          "the file ({} bytes); the file is truncated",
          path.string(), text_for_message(tensor.name), tensor.nbytes,
          file.data_start_ + tensor.offset, size);
  // No two tensors may share bytes, as safetensors requires: a writer that overlaps them is
  // damaged or hostile, and one weight's bytes would be read as another's.
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& tensor : file.tensors_) by_offset.push_back(&tensor);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    check(by_offset[i]->offset >= by_offset[i - 1]->offset + by_offset[i - 1]->nbytes,
          "{}: not a GGUF file mmgen can read: tensors {} and {} overlap in the data section",
          path.string(), text_for_message(by_offset[i - 1]->name),
          text_for_message(by_offset[i]->name));
  return file;
}

const GgufTensorInfo* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const std::byte* GgufFile::blocks(const GgufTensorInfo& tensor) const {
  return file_->data() + data_start_ + tensor.offset;
}

Tensor GgufFile::quantized_blocks(const std::string& name) const {
  const GgufTensorInfo* tensor = find(name);
  check(tensor != nullptr && block_dtype(tensor->type).has_value() && !tensor->shape.empty(),
        "{}: no quantized tensor {}", path().string(), name);
  const DType dtype = block_dtype(tensor->type).value_or(DType::F32);
  check(tensor->shape.back() % dtype_block_values(dtype) == 0, "{}: {} is not whole {} blocks",
        path().string(), name, dtype_name(dtype));
  Shape blocks_shape = tensor->shape;
  blocks_shape.back() /= dtype_block_values(dtype);
  return Tensor::wrap(file_, data_start_ + tensor->offset, blocks_shape, dtype);
}

Tensor GgufFile::to_f32(const std::string& name) const {
  const GgufTensorInfo* tensor = find(name);
  check(tensor != nullptr, "{}: no tensor {}", path().string(), name);
  // float32 as stored: a view into the mapping (read-only, like a safetensors tensor's), so the
  // pages are not held twice.
  const size_t offset = data_start_ + tensor->offset;
  if (tensor->type == GgmlType::F32 && offset % alignof(float) == 0)
    return Tensor::wrap(file_, offset, tensor->shape, DType::F32);
  Tensor out = Tensor::empty(tensor->shape);
  dequantize(tensor->type, blocks(*tensor), out.data<float>(), out.numel());
  return out;
}

}  // namespace mmgen::gguf
