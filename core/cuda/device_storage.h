// GPU memory behind a Tensor: storage from the caching allocator, and the copies and dtype
// conversions Tensor::to() needs. Copies are synchronous on the legacy default stream, the stream
// every op runs on, so a tensor read after a copy sees its bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/tensor.h"

namespace mmgen::cuda {

std::shared_ptr<Storage> make_device_storage(size_t bytes);

void copy_host_to_device(void* device, const void* host, size_t bytes);
void copy_device_to_host(void* host, const void* device, size_t bytes);
void copy_device_to_device(void* to, const void* from, size_t bytes);
void fill_device_bytes(void* device, unsigned char value, size_t bytes);
// `rows` rows of `row_bytes`, `from_pitch` apart at `from`, `to_pitch` apart at `to` (one
// cudaMemcpy2D on the device).
void copy_2d_device_to_device(void* to, size_t to_pitch, const void* from, size_t from_pitch,
                              size_t row_bytes, size_t rows);

// count elements from `from` (dtype `from_type`) to `to` (dtype `to_type`), both contiguous
// device memory. float32 <-> bf16 (round to nearest even, as torch) only.
void convert_on_device(const void* from, DType from_type, void* to, DType to_type, int64_t count);

}  // namespace mmgen::cuda
