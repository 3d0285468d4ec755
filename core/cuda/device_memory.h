// Device memory: a caching allocator over plain cudaMalloc (no managed memory) and an owning
// buffer that returns its block to the cache. Freed blocks are kept per rounded size and reused,
// so a denoising loop that allocates the same activations every step calls cudaMalloc once.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

namespace mmgen::cuda {

class CachingAllocator {
 public:
  static CachingAllocator& instance();

  void* allocate(size_t bytes);
  void release(void* pointer, size_t bytes);  // back to the cache; the memory stays reserved
  void empty_cache();                         // gives every cached block back to the driver

  size_t bytes_in_use() const;
  size_t bytes_reserved() const;  // in use + cached
  size_t peak_bytes_in_use() const;
  // What a request could still get: the driver's free memory plus the cached free blocks, and
  // under a limit no more than the limit less what is in use.
  size_t available_bytes() const;

  // --max-gpu-memory: at most `bytes` reserved (in use + cached) through this allocator; 0 lifts
  // the limit. A request beyond it first gives the cached blocks back, then fails in one line.
  // The CUDA context and the libraries' own workspaces are outside it.
  void set_limit(size_t bytes);
  size_t limit() const;

  // Sizes are rounded up to 512 bytes below 1 MiB and to 2 MiB above, so nearby sizes share blocks.
  static size_t rounded_size(size_t bytes);

 private:
  CachingAllocator() = default;
  ~CachingAllocator();

  // Gives every cached block back to the driver; the mutex is held.
  void free_cached_locked();

  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_blocks_;  // rounded size -> block
  size_t in_use_ = 0, reserved_ = 0, peak_in_use_ = 0, limit_ = 0;
};

// Owns `bytes` of device memory from the caching allocator.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }

  void upload(const void* host, size_t bytes);    // synchronous
  void download(void* host, size_t bytes) const;  // synchronous
  void fill_bytes(unsigned char value);           // synchronous (poisoning in tests)

 private:
  void reset();
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace mmgen::cuda
