#include "core/npy.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <regex>

#include "core/error.h"
#include "core/limits.h"
#include "core/safetensors.h"

namespace mmgen {
namespace {

struct NpyType {
  const char* descr;
  DType dtype;
};
constexpr NpyType kNpyTypes[] = {{"<f4", DType::F32}, {"<f8", DType::F64}, {"<f2", DType::F16},
                                 {"<i8", DType::I64}, {"<i4", DType::I32}, {"|i1", DType::I8},
                                 {"|u1", DType::U8},  {"|b1", DType::Bool}};

}  // namespace

Tensor read_npy(const fs::path& path) {
  auto file = MappedFile::open(path);
  const std::string where = path.string();
  const auto* bytes = reinterpret_cast<const unsigned char*>(file->data());
  const size_t size = file->size();
  check(size >= 10 && std::memcmp(bytes, "\x93NUMPY", 6) == 0, "{}: not a .npy file (bad magic)",
        where);
  const int major = bytes[6];
  check(major >= 1 && major <= 3, "{}: unsupported .npy version {}", where, major);
  size_t header_length = 0, prefix = 0;
  if (major == 1) {
    header_length = size_t(bytes[8]) | size_t(bytes[9]) << 8;
    prefix = 10;
  } else {
    check(size >= 12, "{}: truncated .npy header", where);
    header_length = size_t(bytes[8]) | size_t(bytes[9]) << 8 | size_t(bytes[10]) << 16 |
                    size_t(bytes[11]) << 24;
    prefix = 12;
  }
  check(prefix + header_length <= size, "{}: .npy header runs past the end of the file", where);
  // numpy itself refuses longer headers (np.load's max_header_size); the std::regex searches below
  // recurse per character and overflowed the stack on a 60 KB one.
  constexpr size_t kMaxNpyHeader = Limits::kMaxNpyHeader;
  check(header_length <= kMaxNpyHeader,
        "{}: .npy header of {} bytes is longer than the {} numpy reads; re-save the array with "
        "np.save",
        where, header_length, kMaxNpyHeader);
  const std::string header(reinterpret_cast<const char*>(bytes + prefix), header_length);

  std::smatch match;
  check(std::regex_search(header, match, std::regex(R"('descr'\s*:\s*'([^']*)')")),
        "{}: .npy header has no 'descr'", where);
  const std::string descr = match[1];
  const NpyType* type = nullptr;
  for (const auto& candidate : kNpyTypes)
    if (descr == candidate.descr) type = &candidate;
  check(type != nullptr,
        "{}: .npy dtype '{}' is not supported (use float32, float64, float16 or little-endian "
        "integers)",
        where, descr);
  check(std::regex_search(header, match, std::regex(R"('fortran_order'\s*:\s*(True|False))")) &&
            match[1] == "False",
        "{}: Fortran-ordered .npy files are not supported; save with np.ascontiguousarray", where);
  check(std::regex_search(header, match, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")),
        "{}: .npy header has no shape", where);
  Shape shape;
  const std::string dims = match[1];
  // `span` multiplies the non-zero extents: a zero extent empties the array, but the strides are
  // still products of the others and must fit in int64 ((0, 10^12, 10^12) overflowed them).
  uint64_t bytes_needed = dtype_size(type->dtype), span = bytes_needed;
  // The tuple as numpy writes it: "()", "(5,)", "(2, 3)"; every entry a non-negative integer.
  size_t begin = 0;
  while (begin < dims.size()) {
    size_t end = dims.find(',', begin);
    if (end == std::string::npos) end = dims.size();
    std::string entry = dims.substr(begin, end - begin);
    entry.erase(0, entry.find_first_not_of(" \t"));
    entry.erase(entry.find_last_not_of(" \t") + 1);
    begin = end + 1;
    if (entry.empty() && end == dims.size() && !shape.empty()) break;  // "(5,)"
    check(!entry.empty() && entry.find_first_not_of("0123456789") == std::string::npos,
          "{}: .npy shape entry '{}' is not a non-negative integer; re-save the array with "
          "np.save",
          where, entry.substr(0, 24));
    check(entry.size() <= 12, "{}: .npy shape entry {} is too large", where, entry);
    const int64_t extent = std::stoll(entry);
    check(!__builtin_mul_overflow(span, uint64_t(std::max<int64_t>(extent, 1)), &span) &&
              span <= uint64_t(INT64_MAX),
          "{}: .npy shape too large", where);
    bytes_needed *= uint64_t(extent);  // at most span
    shape.push_back(extent);
  }
  const size_t data_start = prefix + header_length;
  check(bytes_needed == size - data_start,
        "{}: shape {} needs {} bytes of data but the file holds {}", where, shape_string(shape),
        bytes_needed, size - data_start);
  Tensor tensor = Tensor::empty(shape, type->dtype);
  std::memcpy(tensor.raw(), bytes + data_start, bytes_needed);
  return tensor;
}

void write_npy(const fs::path& path, const Tensor& tensor) {
  const char* descr = nullptr;
  for (const auto& candidate : kNpyTypes)
    if (candidate.dtype == tensor.dtype()) descr = candidate.descr;
  Tensor data = descr ? tensor.contiguous() : tensor.to(DType::F32);  // bf16 has no numpy type
  if (!descr) descr = "<f4";
  std::string shape;
  for (int64_t extent : data.shape()) shape += std::to_string(extent) + ", ";
  if (data.dim() > 1) shape.resize(shape.size() - 1);  // "(2, 3)" but "(2,)"
  if (data.dim() > 1) shape.pop_back();
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  write_atomically(path, [&](const fs::path& temporary) {
    std::ofstream out(temporary, std::ios::binary);
    check(bool(out), "cannot write {}; check that the folder is writable", path.string());
    out.write("\x93NUMPY\x01\x00", 8);
    const uint16_t length = uint16_t(header.size());
    const char length_bytes[2] = {char(length & 0xff), char(length >> 8)};
    out.write(length_bytes, 2);
    out.write(header.data(), std::streamsize(header.size()));
    out.write(reinterpret_cast<const char*>(data.raw()), std::streamsize(data.nbytes()));
    out.close();
    check(bool(out), "writing {} failed (disk full?)", path.string());
  });
}

Tensor read_tensor_file(const fs::path& path) {
  const std::string extension = path.extension().string();
  if (extension == ".npy") return read_npy(path);
  if (extension == ".safetensors") {
    SafetensorsFile file = SafetensorsFile::open(path);
    if (file.has("latents")) return file.tensor("latents").clone();
    auto names = file.names();
    check(names.size() == 1, "{} holds {} tensors; name the one to use 'latents'", path.string(),
          names.size());
    return file.tensor(names[0]).clone();
  }
  fail("{}: latents must be a .npy or .safetensors file", path.string());
}

}  // namespace mmgen
