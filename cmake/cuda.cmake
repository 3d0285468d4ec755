# The CUDA part of mmgen (-DMMGEN_CUDA=ON; .cu files are C++17, as CMake 3.25 knows no CUDA20):
# the kernels and device runtime under core/cuda/ and attention/cuda/ build into mmgen_cuda; the
# GPU models under models/cuda/ (host code over the CPU models and those kernels) join mmgen_lib.
# Kernels are built for Hopper (sm_90a: wgmma and the tensor-copy engine need the arch-specific
# target). The GPU tests and benchmarks are plain executables (no GoogleTest: the GPU machine does
# not have it), run by scripts/gpu.sh.
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(MMGEN_CUDA_GENCODE "-gencode=arch=compute_90a,code=sm_90a" CACHE STRING
    "nvcc code generation flags for the CUDA kernels")

file(GLOB_RECURSE MMGEN_CUDA_SOURCES CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/core/cuda/*.cpp ${CMAKE_SOURCE_DIR}/core/cuda/*.cu
     ${CMAKE_SOURCE_DIR}/attention/cuda/*.cpp ${CMAKE_SOURCE_DIR}/attention/cuda/*.cu)
add_library(mmgen_cuda STATIC ${MMGEN_CUDA_SOURCES})
set_target_properties(mmgen_cuda PROPERTIES CUDA_ARCHITECTURES OFF CUDA_STANDARD 17
                                            CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
target_include_directories(mmgen_cuda PUBLIC ${CMAKE_SOURCE_DIR})
target_compile_options(mmgen_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:${MMGEN_CUDA_GENCODE} -Xptxas=-warn-spills --expt-relaxed-constexpr>)
target_compile_definitions(mmgen_cuda PUBLIC MMGEN_HAVE_CUDA=1)
target_link_libraries(mmgen_cuda PUBLIC CUDA::cudart CUDA::cublasLt spdlog::spdlog)

enable_testing()
add_subdirectory(${CMAKE_SOURCE_DIR}/tests/cuda ${CMAKE_BINARY_DIR}/tests/cuda)
add_subdirectory(${CMAKE_SOURCE_DIR}/bench/cuda ${CMAKE_BINARY_DIR}/bench/cuda)
