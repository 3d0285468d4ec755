#include "core/cuda/cuda_check.h"

#include "core/error.h"

namespace mmgen::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  fail("CUDA error in {} ({}:{}): {}; check that a GPU is visible (nvidia-smi) and has free memory",
       call, file, line, cudaGetErrorString(status));
}

void throw_driver_error(CUresult status, const char* call, const char* file, int line) {
  const char* description = nullptr;
  if (cuGetErrorString(status, &description) != CUDA_SUCCESS) description = "unknown error";
  fail("CUDA driver error in {} ({}:{}): {}", call, file, line, description);
}

}  // namespace mmgen::cuda
