# The CUDA part of mmgen (-DMMGEN_CUDA=ON): kernels and their host code live in the layer they
# belong to (core/cuda/, attention/cuda/, models/cuda/, *_cuda.cpp) and join that layer's library
# (cmake/layers.cmake). Kernels are built for Hopper (sm_90a: wgmma and the tensor-copy engine
# need the arch-specific target). The GPU tests and benchmarks are plain executables (no
# GoogleTest: the GPU machine does not have it), run by scripts/gpu.sh.
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(MMGEN_CUDA_GENCODE "-gencode=arch=compute_90a,code=sm_90a" CACHE STRING
    "nvcc code generation flags for the CUDA kernels")
set(MMGEN_CUDA_FLAGS ${MMGEN_CUDA_GENCODE} -Xptxas=-warn-spills --expt-relaxed-constexpr)
