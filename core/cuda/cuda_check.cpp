#include "core/cuda/cuda_check.h"

#include "core/error.h"

namespace mmgen::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  fail("CUDA error in {} ({}:{}): {}; check that a GPU is visible (nvidia-smi) and has free memory",
       call, file, line, cudaGetErrorString(status));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  fail("cuBLAS error in {} ({}:{}): {}", call, file, line, cublasLtGetStatusString(status));
}

void throw_driver_error(CUresult status, const char* call, const char* file, int line) {
  // The driver library is reached only through the runtime's entry points (so the binary starts
  // on machines without one): its error strings are not linked in; the code is in cuda.h.
  fail("CUDA driver error {} in {} ({}:{}); see CUresult in cuda.h", int(status), call, file, line);
}

}  // namespace mmgen::cuda
