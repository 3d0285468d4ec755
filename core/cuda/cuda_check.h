// Error checks for every CUDA runtime call and kernel launch. A failure becomes mmgen::Error with
// the call, the file and line, and CUDA's own words, so the CLI can print it as one line.
#pragma once

#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime.h>

namespace mmgen::cuda {

// Throws mmgen::Error for a failed call (defined in a .cpp: nvcc cannot compile fmt's
// compile-time format checks, so .cu files only call this).
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
}

// The same for cuBLAS(Lt) calls.
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);
inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, call, file, line);
}

// The same for driver-API calls (tensor maps for the copy engine).
[[noreturn]] void throw_driver_error(CUresult status, const char* call, const char* file, int line);

inline void check_driver(CUresult status, const char* call, const char* file, int line) {
  if (status != CUDA_SUCCESS) throw_driver_error(status, call, file, line);
}

}  // namespace mmgen::cuda

#define MMGEN_CUDA_CHECK(call) ::mmgen::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define MMGEN_CUBLAS_CHECK(call) ::mmgen::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: catches bad launch configurations at once (asynchronous faults surface at
// the next synchronising call, which is checked too).
#define MMGEN_CUDA_CHECK_LAUNCH() \
  ::mmgen::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
