#include "core/cuda/device_memory.h"

#include <algorithm>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/error.h"
#include "core/system_memory.h"

namespace mmgen::cuda {

CachingAllocator& CachingAllocator::instance() {
  static CachingAllocator allocator;
  return allocator;
}

CachingAllocator::~CachingAllocator() {
  // The driver may already be shutting down at exit; errors here are not the user's to fix.
  for (auto& [size, pointer] : free_blocks_) cudaFree(pointer);
}

size_t CachingAllocator::rounded_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20;
  const size_t unit = bytes < (size_t(1) << 20) ? kSmall : kLarge;
  return std::max(unit, (bytes + unit - 1) / unit * unit);
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = rounded_size(bytes);
  std::lock_guard lock(mutex_);
  // Reuse an exact-size block first; a larger cached block is only taken when it wastes little.
  auto found = free_blocks_.lower_bound(size);
  if (found != free_blocks_.end() && found->first <= size + size / 8) {
    void* pointer = found->second;
    const size_t block = found->first;
    free_blocks_.erase(found);
    in_use_ += block;
    peak_in_use_ = std::max(peak_in_use_, in_use_);
    return pointer;
  }
  // Under a limit a new block must fit beside what is reserved; the cached blocks go back first.
  if (limit_ && reserved_ + size > limit_) {
    free_cached_locked();
    if (in_use_ + size > limit_)
      fail(
          "GPU memory limit reached: --max-gpu-memory {} with {} in use and {} more asked; raise the "
          "limit, use a smaller request (fewer frames, smaller size) or, for Wan, "
          "--gpu-matmul-precision fp8",
          format_bytes(limit_), format_bytes(in_use_), format_bytes(size));
  }
  void* pointer = nullptr;
  cudaError_t status = cudaMalloc(&pointer, size);
  if (status == cudaErrorMemoryAllocation && !free_blocks_.empty()) {
    cudaGetLastError();  // clear the sticky-free error state before retrying
    free_cached_locked();
    status = cudaMalloc(&pointer, size);
  }
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    fail(
        "out of GPU memory: asked for {:.1f} MiB with {:.1f} MiB free of {:.1f} MiB; use a smaller "
        "request (fewer frames, smaller size) or free the GPU",
        size / 1048576.0, free_bytes / 1048576.0, total_bytes / 1048576.0);
  }
  MMGEN_CUDA_CHECK(status);
  reserved_ += size;
  in_use_ += size;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  return pointer;
}

void CachingAllocator::release(void* pointer, size_t bytes) {
  if (!pointer) return;
  const size_t size = rounded_size(bytes);
  std::lock_guard lock(mutex_);
  free_blocks_.emplace(size, pointer);
  in_use_ -= size;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  free_cached_locked();
}

void CachingAllocator::free_cached_locked() {
  for (auto& [size, pointer] : free_blocks_) {
    MMGEN_CUDA_CHECK(cudaFree(pointer));
    reserved_ -= size;
  }
  free_blocks_.clear();
}

void CachingAllocator::set_limit(size_t bytes) {
  std::lock_guard lock(mutex_);
  limit_ = bytes;
  if (limit_ && reserved_ > limit_) free_cached_locked();
}

size_t CachingAllocator::limit() const {
  std::lock_guard lock(mutex_);
  return limit_;
}

size_t CachingAllocator::bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}
size_t CachingAllocator::bytes_reserved() const {
  std::lock_guard lock(mutex_);
  return reserved_;
}
size_t CachingAllocator::available_bytes() const {
  size_t free_bytes = 0, total_bytes = 0;
  MMGEN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::lock_guard lock(mutex_);
  const size_t available = free_bytes + (reserved_ - in_use_);
  return limit_ ? std::min(available, limit_ > in_use_ ? limit_ - in_use_ : 0) : available;
}
size_t CachingAllocator::peak_bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return peak_in_use_;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : size_(bytes) {
  data_ = CachingAllocator::instance().allocate(bytes);
}

DeviceBuffer::~DeviceBuffer() {
  reset();
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() {
  // Work queued on the default stream that uses this block runs before any later use of it, as
  // every mmgen launch goes to one stream per device; the cache hands it out only after that.
  CachingAllocator::instance().release(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  check(bytes <= size_, "device upload of {} bytes into a buffer of {}", bytes, size_);
  MMGEN_CUDA_CHECK(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  check(bytes <= size_, "device download of {} bytes from a buffer of {}", bytes, size_);
  MMGEN_CUDA_CHECK(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  MMGEN_CUDA_CHECK(cudaMemset(data_, value, size_));
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace mmgen::cuda
