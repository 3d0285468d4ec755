#include "core/cuda/device_storage.h"

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/elementwise.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

class DeviceStorage final : public Storage {
 public:
  explicit DeviceStorage(size_t bytes) : buffer_(bytes) {}
  std::byte* data() override { return buffer_.as<std::byte>(); }
  size_t size() const override { return buffer_.size(); }
  Device device() const override { return Device::CUDA; }

 private:
  DeviceBuffer buffer_;
};

}  // namespace

std::shared_ptr<Storage> make_device_storage(size_t bytes) {
  return std::make_shared<DeviceStorage>(bytes);
}

void copy_host_to_device(void* device, const void* host, size_t bytes) {
  if (bytes) MMGEN_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
}

void copy_device_to_host(void* host, const void* device, size_t bytes) {
  if (bytes) MMGEN_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}

void copy_device_to_device(void* to, const void* from, size_t bytes) {
  if (bytes) MMGEN_CUDA_CHECK(cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToDevice));
}

void copy_2d_device_to_device(void* to, size_t to_pitch, const void* from, size_t from_pitch,
                              size_t row_bytes, size_t rows) {
  if (row_bytes && rows)
    MMGEN_CUDA_CHECK(cudaMemcpy2DAsync(to, to_pitch, from, from_pitch, row_bytes, rows,
                                       cudaMemcpyDeviceToDevice, nullptr));
}

void fill_device_bytes(void* device, unsigned char value, size_t bytes) {
  if (bytes) MMGEN_CUDA_CHECK(cudaMemset(device, value, bytes));
}

void convert_on_device(const void* from, DType from_type, void* to, DType to_type, int64_t count) {
  if (from_type == DType::F32 && to_type == DType::BF16)
    return f32_to_bf16(static_cast<const float*>(from), to, count);
  if (from_type == DType::BF16 && to_type == DType::F32)
    return bf16_to_f32(from, static_cast<float*>(to), count);
  fail("converting {} to {} on the GPU is not supported (float32 <-> bf16 only)",
       dtype_name(from_type), dtype_name(to_type));
}

}  // namespace mmgen::cuda
