#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <new>
#include <utility>

#include "core/error.h"
#include "core/gguf_quants.h"
#include "core/low_rank.h"
#include "core/parallel.h"
#include "core/scaled_fp8.h"
#ifdef MMGEN_HAVE_CUDA
#include "core/cuda/device_storage.h"
#include "core/cuda/fp8.h"
#include "core/cuda/gguf_dequant.h"
#endif

namespace mmgen {

const char* device_name(Device device) {
  return device == Device::CUDA ? "cuda" : "cpu";
}

namespace {

std::shared_ptr<Storage> allocate(size_t bytes, Device device) {
  if (device == Device::CPU) return std::make_shared<OwnedStorage>(bytes);
#ifdef MMGEN_HAVE_CUDA
  return cuda::make_device_storage(bytes);
#else
  fail("a CUDA tensor was asked for, but this build has no CUDA support; use --device cpu");
#endif
}

}  // namespace

std::string shape_string(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

namespace {

// glibc serves blocks of 32 MiB and more (the most M_MMAP_THRESHOLD may be) with mmap and
// returns them on free, so every large tensor was fresh pages for the kernel to zero: page
// clearing was a fifth of a 480x832 Wan VAE decode on the CPU. Freed large blocks wait here for
// the next request of the same size (a layer's tensors repeat their shapes), up to kHeldBytes in
// all, the oldest dropped first.
class LargeBlocks {
 public:
  static constexpr size_t kHeldBytes = size_t(2) << 30;
  static bool large(size_t bytes) { return bytes >= (size_t(32) << 20); }

  void* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (it->first == bytes) {
        void* block = it->second;
        held_ -= bytes;
        blocks_.erase(it);
        return block;
      }
    return nullptr;
  }

  void give(size_t bytes, void* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes > kHeldBytes) return std::free(block);
    while (held_ + bytes > kHeldBytes) {
      held_ -= blocks_.back().first;
      std::free(blocks_.back().second);
      blocks_.pop_back();
    }
    blocks_.emplace_front(bytes, block);
    held_ += bytes;
  }

 private:
  std::mutex mutex_;
  std::list<std::pair<size_t, void*>> blocks_;  // newest first
  size_t held_ = 0;
};

LargeBlocks& large_blocks() {
  // Never destroyed (tensors may outlive statics), so the blocks it holds are never freed at exit.
  static LargeBlocks* blocks = new LargeBlocks;
  return *blocks;
}

}  // namespace

OwnedStorage::OwnedStorage(size_t bytes) : size_(bytes) {
  // 64-byte alignment keeps AVX loads on cache lines. The block comes from malloc, 64 bytes
  // larger and aligned by hand: glibc's aligned_alloc does not hand a freed block back to the
  // next request of the same size, so a loop's host buffers (a denoising step's latents, its
  // download) were fresh pages every time, faulted in again (0.3 ms per MiB on the VMs measured).
  // malloc reuses them, with keep_freed_host_memory() (core/system_memory.h) keeping them mapped;
  // blocks too large for that are kept by LargeBlocks above.
  if (LargeBlocks::large(bytes + 64)) block_ = large_blocks().take(bytes + 64);
  if (!block_) block_ = std::malloc(bytes + 64);
  if (!block_) throw std::bad_alloc();
  const auto address = reinterpret_cast<uintptr_t>(block_);
  data_ = static_cast<std::byte*>(block_) + ((64 - address % 64) % 64);
}

OwnedStorage::~OwnedStorage() {
  if (LargeBlocks::large(size_ + 64))
    large_blocks().give(size_ + 64, block_);
  else
    std::free(block_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t extent : shape)
    check(extent >= 0, "negative tensor extent in shape {}", shape_string(shape));
  Tensor tensor;
  tensor.shape_ = shape;
  tensor.strides_ = contiguous_strides(shape);
  tensor.dtype_ = dtype;
  tensor.storage_ = allocate(tensor.nbytes(), device);
  return tensor;
}

size_t Tensor::nbytes() const {
  if (dtype_ != DType::F8E4M3Rows) return size_t(numel()) * dtype_size(dtype_);
  const int64_t cols = shape_.empty() ? 1 : shape_.back();
  return row_scales_offset(numel()) + size_t(cols > 0 ? numel() / cols : 0) * sizeof(float);
}

float* Tensor::row_scales() const {
  check(dtype_ == DType::F8E4M3Rows, "row scales of a {} tensor: only f8_e4m3_rows has them",
        dtype_name(dtype_));
  return reinterpret_cast<float*>(raw() + row_scales_offset(numel()));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor tensor = empty(shape, dtype, device);
#ifdef MMGEN_HAVE_CUDA
  if (device == Device::CUDA) {
    cuda::fill_device_bytes(tensor.raw(), 0, tensor.nbytes());
    return tensor;
  }
#endif
  std::memset(tensor.raw(), 0, tensor.nbytes());
  return tensor;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor tensor = empty(shape, DType::F32);
  float* data = tensor.data<float>();
  for (int64_t i = 0; i < tensor.numel(); ++i) data[i] = value;
  return tensor;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  check(int64_t(values.size()) == shape_numel(shape), "{} values do not fill shape {}",
        values.size(), shape_string(shape));
  Tensor tensor = empty(shape, DType::F32);
  std::memcpy(tensor.raw(), values.data(), values.size() * sizeof(float));
  return tensor;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<int64_t>& values) {
  check(int64_t(values.size()) == shape_numel(shape), "{} values do not fill shape {}",
        values.size(), shape_string(shape));
  Tensor tensor = empty(shape, DType::I64);
  std::memcpy(tensor.raw(), values.data(), values.size() * sizeof(int64_t));
  return tensor;
}

Tensor Tensor::wrap(std::shared_ptr<Storage> storage, size_t offset, const Shape& shape,
                    DType dtype) {
  Tensor tensor;
  tensor.shape_ = shape;
  tensor.strides_ = contiguous_strides(shape);
  tensor.dtype_ = dtype;
  check(offset + tensor.nbytes() <= storage->size(),
        "tensor of {} bytes at offset {} lies outside its {}-byte storage", tensor.nbytes(), offset,
        storage->size());
  tensor.storage_ = std::move(storage);
  tensor.offset_ = offset;
  return tensor;
}

int64_t Tensor::normalize_dim(int64_t d, int64_t rank) const {
  int64_t normalized = d < 0 ? d + rank : d;
  check(normalized >= 0 && normalized < rank, "dimension {} out of range for a {}-d tensor", d,
        rank);
  return normalized;
}

int64_t Tensor::size(int64_t d) const {
  return shape_[size_t(normalize_dim(d, dim()))];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void Tensor::check_element_size(size_t size) const {
  check(size == dtype_size(dtype_), "tensor of dtype {} accessed with a {}-byte element type",
        dtype_name(dtype_), size);
}

Tensor Tensor::view(const Shape& shape) const {
  check(is_contiguous(), "view of a non-contiguous tensor; call contiguous() first");
  Shape resolved = shape;
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      check(inferred < 0, "view shape {} has more than one -1", shape_string(shape));
      inferred = int64_t(i);
    } else {
      known *= resolved[i];
    }
  }
  if (inferred >= 0) {
    check(known > 0 && numel() % known == 0, "cannot view {} as {}", shape_string(shape_),
          shape_string(shape));
    resolved[size_t(inferred)] = numel() / known;
  }
  check(shape_numel(resolved) == numel(), "cannot view {} as {}", shape_string(shape_),
        shape_string(shape));
  check(dtype_ != DType::F8E4M3Rows ||
            (!resolved.empty() && !shape_.empty() && resolved.back() == shape_.back()),
        "an f8_e4m3_rows view keeps its rows: {} cannot be viewed as {}", shape_string(shape_),
        shape_string(shape));
  check(!low_rank_ || resolved == shape_,
        "a weight {} that carries a LoRA's update is not viewed "
        "as {}; use --lora-mode merge",
        shape_string(shape_), shape_string(resolved));
  Tensor result = *this;
  result.shape_ = resolved;
  result.strides_ = contiguous_strides(resolved);
  return result;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  d = normalize_dim(d, dim());
  int64_t extent = shape_[size_t(d)];
  check(0 <= start && start <= end && end <= extent,
        "slice [{}, {}) outside dimension {} of size {}", start, end, d, extent);
  check(dtype_ != DType::F8E4M3Rows || (start == 0 && end == extent),
        "a slice of an f8_e4m3_rows tensor {} would lose its row scales; slice it before "
        "quantizing",
        shape_string(shape_));
  check(!low_rank_ || (dim() == 2 && !dtype_is_blocks(dtype_)),
        "a slice of a {} {} weight that carries a LoRA's update; use --lora-mode merge",
        dtype_name(dtype_), shape_string(shape_));
  Tensor result = *this;
  result.offset_ += size_t(start * strides_[size_t(d)]) * dtype_size(dtype_);
  result.shape_[size_t(d)] = end - start;
  if (low_rank_) result.low_rank_ = low_rank_slice(*low_rank_, d, start, end);
  return result;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  check(!low_rank_,
        "a weight {} that carries a LoRA's update is not indexed; use --lora-mode merge",
        shape_string(shape_));
  d = normalize_dim(d, dim());
  Tensor result = slice(d, index, index + 1);
  result.shape_.erase(result.shape_.begin() + d);
  result.strides_.erase(result.strides_.begin() + d);
  return result;
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  check(!low_rank_,
        "a weight {} that carries a LoRA's update is not permuted; use --lora-mode merge",
        shape_string(shape_));
  check(int64_t(order.size()) == dim(), "permute order has {} entries for a {}-d tensor",
        order.size(), dim());
  check(dtype_ != DType::F8E4M3Rows,
        "an f8_e4m3_rows tensor {} is not permuted (its row scales "
        "follow its rows); permute it before quantizing",
        shape_string(shape_));
  Tensor result = *this;
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t source = normalize_dim(order[i], dim());
    check(!seen[size_t(source)], "permute order repeats dimension {}", source);
    seen[size_t(source)] = true;
    result.shape_[i] = shape_[size_t(source)];
    result.strides_[i] = strides_[size_t(source)];
  }
  return result;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  check(!low_rank_,
        "a weight {} that carries a LoRA's update is not reshaped; use --lora-mode merge",
        shape_string(shape_));
  d = normalize_dim(d, dim() + 1);
  check(dtype_ != DType::F8E4M3Rows || d < dim(),
        "an f8_e4m3_rows tensor {} keeps its last dimension", shape_string(shape_));
  Tensor result = *this;
  int64_t stride = d < dim() ? strides_[size_t(d)] * shape_[size_t(d)] : 1;
  result.shape_.insert(result.shape_.begin() + d, 1);
  result.strides_.insert(result.strides_.begin() + d, stride);
  return result;
}

Tensor Tensor::reshape(const Shape& shape) const {
  return contiguous().view(shape);
}

namespace {

// Copies elements of `source` (any strides) into contiguous `destination` bytes, same dtype.
void strided_copy(const Tensor& source, std::byte* destination) {
  const size_t element = dtype_size(source.dtype());
  const int64_t rank = source.dim();
  if (source.numel() == 0) return;
  if (source.is_contiguous()) {
    std::memcpy(destination, source.raw(), source.nbytes());
    return;
  }
  // Walk all but the last dimension with an index counter; copy the innermost run.
  const int64_t inner = rank ? source.shape().back() : 1;
  const int64_t inner_stride = rank ? source.strides().back() : 1;
  std::vector<int64_t> index(size_t(std::max<int64_t>(rank - 1, 0)), 0);
  const std::byte* base = source.raw();
  const int64_t outer = source.numel() / inner;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t offset = 0;
    for (size_t i = 0; i < index.size(); ++i) offset += index[i] * source.strides()[i];
    const std::byte* from = base + offset * int64_t(element);
    if (inner_stride == 1) {
      std::memcpy(destination, from, size_t(inner) * element);
      destination += size_t(inner) * element;
    } else {
      for (int64_t j = 0; j < inner; ++j, destination += element)
        std::memcpy(destination, from + j * inner_stride * int64_t(element), element);
    }
    for (size_t i = index.size(); i-- > 0;) {
      if (++index[i] < source.shape()[i]) break;
      index[i] = 0;
    }
  }
}

double load_as_double(const std::byte* p, DType dtype) {
  switch (dtype) {
    case DType::F32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::F64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::BF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16_to_f32(v);
    }
    case DType::F16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return f16_to_f32(v);
    }
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return double(v);
    }
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::I8:
      return double(int8_t(*p));
    case DType::U8:
      return double(uint8_t(*p));
    case DType::Bool:
      return *p != std::byte{0} ? 1.0 : 0.0;
    case DType::F8E4M3:
      return e4m3_to_f32(uint8_t(*p));
    case DType::F8E4M3Rows:  // scaled per row: to() converts the whole tensor
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      break;  // blocks, not values: to() expands them first
  }
  return 0;
}

void store_from_double(std::byte* p, DType dtype, double value) {
  switch (dtype) {
    case DType::F32: {
      float v = float(value);
      std::memcpy(p, &v, 4);
      return;
    }
    case DType::F64:
      std::memcpy(p, &value, 8);
      return;
    case DType::BF16: {
      uint16_t v = f32_to_bf16(float(value));
      std::memcpy(p, &v, 2);
      return;
    }
    case DType::F16: {
      uint16_t v = f32_to_f16(float(value));
      std::memcpy(p, &v, 2);
      return;
    }
    case DType::I64: {
      int64_t v = int64_t(value);
      std::memcpy(p, &v, 8);
      return;
    }
    case DType::I32: {
      int32_t v = int32_t(value);
      std::memcpy(p, &v, 4);
      return;
    }
    case DType::I8:
      *p = std::byte(uint8_t(int8_t(value)));
      return;
    case DType::U8:
      *p = std::byte(uint8_t(value));
      return;
    case DType::Bool:
      *p = std::byte(value != 0 ? 1 : 0);
      return;
    case DType::F8E4M3:
      *p = std::byte(f32_to_e4m3(float(value)));
      return;
    case DType::F8E4M3Rows:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return;  // never a conversion's target: to() refuses it
  }
}

#ifdef MMGEN_HAVE_CUDA
// The GPU dequantizer's name for a block dtype (the .cu files do not include core/dtype.h).
cuda::GgufBlock gpu_block_type(DType dtype) {
  switch (dtype) {
    case DType::Q4_0:
      return cuda::GgufBlock::Q4_0;
    case DType::Q4_1:
      return cuda::GgufBlock::Q4_1;
    case DType::Q5_0:
      return cuda::GgufBlock::Q5_0;
    case DType::Q5_1:
      return cuda::GgufBlock::Q5_1;
    case DType::Q4_K:
      return cuda::GgufBlock::Q4_K;
    case DType::Q5_K:
      return cuda::GgufBlock::Q5_K;
    case DType::Q6_K:
      return cuda::GgufBlock::Q6_K;
    default:
      check(dtype == DType::Q8_0, "the GPU expands ggml's blocks, not {}", dtype_name(dtype));
      return cuda::GgufBlock::Q8_0;
  }
}
#endif

// To or from F8E4M3Rows on the host, through float32: each row's scale is max|row| / 448 (1 for
// a row of zeros) and its values e4m3(x / scale), as core/cuda/fp8.cu's quantize_e4m3_rows.
Tensor convert_rows_on_host(const Tensor& source, DType dtype, int64_t rows, int64_t cols) {
  if (source.dtype() == DType::F8E4M3Rows) {
    Tensor values = Tensor::empty(source.shape(), DType::F32);
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(source.raw());
    const float* scales = source.row_scales();
    float* out = values.data<float>();
    const auto& table = fp8::e4m3_values();  // e4m3_to_f32 of every byte
    const int threads = threads_for(rows * cols);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = table[bytes[r * cols + c]] * scales[r];
    return values.to(dtype);
  }
  const Tensor values = source.to(DType::F32);
  Tensor result = Tensor::empty(source.shape(), DType::F8E4M3Rows);
  const float* in = values.data<float>();
  uint8_t* bytes = reinterpret_cast<uint8_t*>(result.raw());
  float* scales = result.row_scales();
  const int threads = threads_for(rows * cols);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(in[r * cols + c]));
    const float scale = amax > 0.0f && std::isfinite(amax) ? amax / kE4m3Largest : 1.0f;
    scales[r] = scale;
    for (int64_t c = 0; c < cols; ++c) bytes[r * cols + c] = f32_to_e4m3(in[r * cols + c] / scale);
  }
  return result;
}

}  // namespace

void Tensor::require_cpu(const char* what) const {
  check(is_cpu(),
        "{} of a {} tensor on the GPU: the host helper cannot read device memory; move it with "
        ".to(Device::CPU) first",
        what, shape_string(shape_));
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  require_cpu("a strided copy");
  Tensor result = empty(shape_, dtype_);
  strided_copy(*this, result.raw());
  result.low_rank_ = low_rank_;
  return result;
}

Tensor Tensor::clone() const {
  return carrying(cloned());
}

Tensor Tensor::cloned() const {
#ifdef MMGEN_HAVE_CUDA
  if (!is_cpu()) {
    check(is_contiguous(), "clone of a strided {} tensor on the GPU is not supported",
          shape_string(shape_));
    Tensor result = empty(shape_, dtype_, device());
    cuda::copy_device_to_device(result.raw(), raw(), nbytes());
    return result;
  }
#endif
  Tensor result = empty(shape_, dtype_);
  strided_copy(*this, result.raw());
  return result;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  return carrying(moved(device));
}

Tensor Tensor::moved(Device device) const {
#ifdef MMGEN_HAVE_CUDA
  if (device == Device::CUDA) {
    // Quantized blocks go up as they are: ops::linear expands each matrix before its product.
    const Tensor source = contiguous();
    Tensor result = empty(shape_, dtype_, Device::CUDA);
    cuda::copy_host_to_device(result.raw(), source.raw(), nbytes());
    return result;
  }
  check(is_contiguous(), "copying a strided {} tensor from the GPU is not supported",
        shape_string(shape_));
  Tensor result = empty(shape_, dtype_);
  cuda::copy_device_to_host(result.raw(), raw(), nbytes());
  return result;
#else
  fail("a CUDA tensor was asked for, but this build has no CUDA support; use --device cpu");
#endif
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return contiguous();
  return carrying(converted(dtype));
}

Tensor Tensor::with_low_rank(std::shared_ptr<const LowRankUpdate> update) const {
  Tensor result = *this;
  result.low_rank_ = std::move(update);
  return result;
}

Tensor Tensor::without_low_rank() const {
  return with_low_rank(nullptr);
}

Tensor Tensor::carrying(Tensor result) const {
  if (low_rank_) result.low_rank_ = low_rank_for(low_rank_, result.device(), result.dtype());
  return result;
}

Tensor Tensor::converted(DType dtype) const {
  check(!dtype_is_blocks(dtype), "a tensor is not converted to {} here (mmgen convert writes it)",
        dtype_name(dtype));
  if (dtype_is_blocks(dtype_)) {  // blocks [..., b] → values [..., block · b]
    const Tensor blocks = contiguous();
    Shape shape = shape_;
    check(!shape.empty(), "a {} tensor has at least one dimension", dtype_name(dtype_));
    shape.back() *= dtype_block_values(dtype_);
#ifdef MMGEN_HAVE_CUDA
    if (!is_cpu()) {  // expanded where they are, to float32 or bf16 (the products' dtypes)
      const DType expanded = dtype == DType::BF16 ? DType::BF16 : DType::F32;
      Tensor values = empty(shape, expanded, device());
      cuda::dequantize_blocks(gpu_block_type(dtype_), int(dtype_size(dtype_)),
                              int(dtype_block_values(dtype_)), blocks.raw(), blocks.numel(),
                              values.raw(), expanded == DType::BF16);
      return values.to(dtype);
    }
#endif
    Tensor values = empty(shape, DType::F32);
    gguf::dequantize(gguf::ggml_type_of_blocks(dtype_), blocks.raw(), values.data<float>(),
                     values.numel());
    return values.to(dtype);
  }
  const bool rows_scaled = dtype == DType::F8E4M3Rows || dtype_ == DType::F8E4M3Rows;
  check(!rows_scaled || (!shape_.empty() && shape_.back() > 0),
        "f8_e4m3_rows needs rows: a {} tensor has none", shape_string(shape_));
  const int64_t cols = rows_scaled ? shape_.back() : 1, rows = numel() / cols;
#ifdef MMGEN_HAVE_CUDA
  if (!is_cpu()) {
    check(is_contiguous(), "converting a strided {} tensor on the GPU is not supported",
          shape_string(shape_));
    Tensor result = empty(shape_, dtype, device());
    if (dtype == DType::F8E4M3Rows) {
      check(dtype_ == DType::BF16, "the GPU quantizes bf16 rows to f8_e4m3_rows, not {}",
            dtype_name(dtype_));
      cuda::quantize_e4m3_rows(raw(), rows, cols, cols, result.raw(), result.row_scales());
    } else if (dtype_ == DType::F8E4M3Rows) {
      check(dtype == DType::BF16 || dtype == DType::F32,
            "the GPU expands f8_e4m3_rows to bf16 or float32, not {}", dtype_name(dtype));
      cuda::dequantize_e4m3_rows(raw(), row_scales(), rows, cols, result.raw(),
                                 dtype == DType::BF16);
    } else {
      cuda::convert_on_device(raw(), dtype_, result.raw(), dtype, numel());
    }
    return result;
  }
#endif
  if (rows_scaled) return convert_rows_on_host(contiguous(), dtype, rows, cols);
  Tensor source = contiguous();
  Tensor result = empty(shape_, dtype);
  const int64_t count = numel();
  if (dtype_ == DType::BF16 && dtype == DType::F32) {  // the hot case: weights used in f32
    const uint16_t* from = source.data<uint16_t>();
    float* to = result.data<float>();
    const int threads = threads_for(count);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t i = 0; i < count; ++i) to[i] = bf16_to_f32(from[i]);
    return result;
  }
  if (dtype_ == DType::F32 && dtype == DType::BF16) {  // weights placed on a GPU, activations
    const float* from = source.data<float>();
    uint16_t* to = result.data<uint16_t>();
    const int threads = threads_for(count);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t i = 0; i < count; ++i) to[i] = f32_to_bf16(from[i]);
    return result;
  }
  const size_t from_size = dtype_size(dtype_), to_size = dtype_size(dtype);
  for (int64_t i = 0; i < count; ++i)
    store_from_double(result.raw() + i * int64_t(to_size), dtype,
                      load_as_double(source.raw() + i * int64_t(from_size), dtype_));
  return result;
}

void Tensor::copy_from(const Tensor& source) {
  check(source.shape() == shape_, "copy from {} into {}", shape_string(source.shape()),
        shape_string(shape_));
  check(is_contiguous(), "copy into a non-contiguous tensor");
#ifdef MMGEN_HAVE_CUDA
  if (!is_cpu()) {  // into the GPU: from the host (converted there first) or from the GPU
    const Tensor converted = source.to(dtype_).contiguous();
    if (converted.is_cpu())
      cuda::copy_host_to_device(raw(), converted.raw(), nbytes());
    else
      cuda::copy_device_to_device(raw(), converted.raw(), nbytes());
    return;
  }
#endif
  require_cpu("copy_from");
  source.require_cpu("copy_from");
  Tensor converted = source.to(dtype_);
  std::memcpy(raw(), converted.raw(), nbytes());
}

float Tensor::item_f32(const std::vector<int64_t>& index) const {
  require_cpu("item_f32");
  check(dtype_ != DType::F8E4M3Rows, "item_f32 of an f8_e4m3_rows tensor: convert it first");
  check(int64_t(index.size()) == dim(), "index of {} entries for a {}-d tensor", index.size(),
        dim());
  int64_t offset = 0;
  for (size_t i = 0; i < index.size(); ++i) {
    check(index[i] >= 0 && index[i] < shape_[i],
          "index {} out of range for dimension {} of size {}", index[i], i, shape_[i]);
    offset += index[i] * strides_[i];
  }
  return float(load_as_double(raw() + offset * int64_t(dtype_size(dtype_)), dtype_));
}

}  // namespace mmgen
