#!/usr/bin/env bash
# The NCCL code compiles in a CPU-only build's CI (issue 24): core/cuda/nccl_communicator.cpp and
# generate/multi_gpu.cpp are checked with the build's compiler against the CUDA toolkit's and
# NCCL's headers, with MMGEN_HAVE_CUDA and MMGEN_HAVE_NCCL on, where those headers are found
# (the GPU build compiles them for real). Where they are not, it says so and passes: nothing of
# the CPU build depends on them.
# Usage: nccl_compile_check.sh CXX SOURCE_DIR
set -u
cxx=$1 source=$2
cuda_include=""
for dir in "${CUDA_HOME:-/usr/local/cuda}/include" /usr/include; do
  [ -f "$dir/cuda_runtime.h" ] && cuda_include=$dir && break
done
nccl_include=""
for dir in "${NCCL_HOME:-/nonexistent}/include" "$cuda_include" /usr/include /usr/local/include; do
  [ -n "$dir" ] && [ -f "$dir/nccl.h" ] && nccl_include=$dir && break
done
if [ -z "$cuda_include" ] || [ -z "$nccl_include" ]; then
  echo "SKIPPED: no CUDA toolkit or NCCL headers here (cuda: '${cuda_include}', nccl: '${nccl_include}')"
  exit 0
fi
status=0
for file in core/cuda/nccl_communicator.cpp generate/multi_gpu.cpp; do
  if ! "$cxx" -std=c++20 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-parameter \
    -DMMGEN_HAVE_CUDA=1 -DMMGEN_HAVE_NCCL=1 -I "$source" -isystem "$cuda_include" \
    -isystem "$nccl_include" "$source/$file"; then
    echo "FAIL: $file does not compile with NCCL ($nccl_include)"
    status=1
  else
    echo "ok: $file compiles with NCCL ($nccl_include/nccl.h)"
  fi
done
exit $status
