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

# NCCL for --gpus N (core/cuda/nccl_communicator.cpp): the toolkit's copy, a system package
# (libnccl-dev), $NCCL_HOME, or the wheel PyTorch ships (nvidia/nccl, which has libnccl.so.2 only).
file(GLOB MMGEN_NCCL_WHEELS /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl
     /usr/local/lib/python3*/dist-packages/nvidia/nccl)
find_path(MMGEN_NCCL_INCLUDE nccl.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include ${MMGEN_NCCL_WHEELS}
  PATH_SUFFIXES include)
find_library(MMGEN_NCCL_LIBRARY NAMES nccl libnccl.so.2
  HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME}/lib ${MMGEN_NCCL_WHEELS}
  PATH_SUFFIXES lib lib64)
if(MMGEN_NCCL_INCLUDE AND MMGEN_NCCL_LIBRARY)
  message(STATUS "NCCL: ${MMGEN_NCCL_LIBRARY} (--gpus N)")
else()
  message(STATUS "NCCL not found: --gpus N will say so; set NCCL_HOME to use it")
endif()
