// A small n-dimensional array for the kernels: shape, strides (in elements), dtype, device, and
// shared storage that is either an owned buffer, a region of a memory-mapped file, or (in CUDA
// builds) a block of GPU memory. Views (slice, select, permute, view) share storage on either
// device; contiguous(), clone() and to() copy. A model is written once over these tensors and the
// ops in core/ops.h, which run where their inputs live.
// On the GPU, data() is a device pointer (for kernels only) and the element-wise host helpers
// (item_f32, strided copies, conversions other than float32 <-> bf16) refuse to run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace mmgen {

enum class Device { CPU, CUDA };
struct LowRankUpdate;                    // core/low_rank.h
const char* device_name(Device device);  // "cpu", "cuda"
using Shape = std::vector<int64_t>;

std::string shape_string(const Shape& shape);  // "[1, 16, 2]"
int64_t shape_numel(const Shape& shape);

// Bytes a tensor points into. Owning storage frees on destruction; mapped storage keeps its file
// mapping alive for as long as a tensor uses it.
class Storage {
 public:
  virtual ~Storage() = default;
  virtual std::byte* data() = 0;
  virtual size_t size() const = 0;
  virtual Device device() const { return Device::CPU; }
};

class OwnedStorage final : public Storage {
 public:
  explicit OwnedStorage(size_t bytes);
  ~OwnedStorage() override;
  std::byte* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* block_ = nullptr;      // what malloc returned
  std::byte* data_ = nullptr;  // block_ rounded up to 64 bytes
  size_t size_ = 0;
};

template <typename T>
constexpr bool kElementSizeMatches(DType dtype) {
  return sizeof(T) == dtype_size(dtype);
}

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::CPU);
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::CPU);
  static Tensor full(const Shape& shape, float value);
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  static Tensor from_vector(const Shape& shape, const std::vector<int64_t>& values);
  // A tensor over existing storage (a mapped file region); `offset` is in bytes.
  static Tensor wrap(std::shared_ptr<Storage> storage, size_t offset, const Shape& shape,
                     DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::CPU; }
  bool is_cpu() const { return device() == Device::CPU; }
  size_t nbytes() const;  // F8E4M3Rows: the values, padding and the row scales
  // An F8E4M3Rows tensor's float32 scales, one per row (core/dtype.h), where it lives.
  float* row_scales() const;
  bool is_contiguous() const;

  // Pointer to the first element. T must have the dtype's element size (uint16_t for bf16/f16).
  template <typename T>
  T* data() {
    check_element_size(sizeof(T));
    return reinterpret_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    check_element_size(sizeof(T));
    return reinterpret_cast<const T*>(raw());
  }
  std::byte* raw() const { return storage_->data() + offset_; }

  // Views (no copy).
  Tensor view(const Shape& shape) const;  // contiguous tensors only; one -1 is inferred
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;
  Tensor select(int64_t dim, int64_t index) const;  // drops the dimension
  Tensor permute(const std::vector<int64_t>& order) const;
  Tensor unsqueeze(int64_t dim) const;

  // Copies.
  Tensor reshape(const Shape& shape) const;  // a view when contiguous, else a copy
  Tensor contiguous() const;                 // shares storage when already contiguous
  Tensor clone() const;
  Tensor to(DType dtype) const;    // converts; shares storage when nothing changes
  Tensor to(Device device) const;  // copies (contiguously); shares when already there
  // Same shape; converts dtype. Into a host tensor from a host tensor; into a GPU tensor from
  // either device (a strided GPU source must be contiguous).
  void copy_from(const Tensor& source);

  // The low-rank update a product adds for this weight (a LoRA in the runtime mode,
  // core/low_rank.h), or null. Copies, conversions, moves and row or column slices carry it.
  const std::shared_ptr<const LowRankUpdate>& low_rank() const { return low_rank_; }
  Tensor with_low_rank(std::shared_ptr<const LowRankUpdate> update) const;
  Tensor without_low_rank() const;

  // Element access for tests and small host code (converts to float).
  float item_f32(const std::vector<int64_t>& index) const;

 private:
  void check_element_size(size_t size) const;
  // clone(), to(device) and to(dtype) before the update is carried over; carrying() puts
  // this tensor's update, placed as `result` needs it, on `result`.
  Tensor cloned() const;
  Tensor moved(Device device) const;
  Tensor converted(DType dtype) const;
  Tensor carrying(Tensor result) const;
  void require_cpu(const char* what) const;
  int64_t normalize_dim(int64_t d, int64_t rank) const;

  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::F32;
  std::shared_ptr<const LowRankUpdate> low_rank_;
};

Shape contiguous_strides(const Shape& shape);

}  // namespace mmgen
