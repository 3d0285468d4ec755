// The Communicator over NCCL: one process per GPU, each rank's collectives on the legacy default
// stream that every op of mmgen runs on, so they order with the kernels around them without
// extra synchronisation. Built where CMake finds NCCL (MMGEN_HAVE_NCCL).
//
// Bootstrap: rank 0 makes a unique id (new_unique_id) and hands it to the other ranks, which
// join with it. On one host the id travels in the environment of the ranks mmgen starts
// (generate/multi_gpu.h). Across hosts it would travel over TCP from rank 0's address, as
// torchrun's rendezvous does: the communicator itself does not change (docs/usage.md, "Several
// GPUs").
#pragma once

#include <memory>
#include <string>

#include "core/communicator.h"

namespace mmgen::cuda {

// True when this build links NCCL.
bool nccl_available();

// The GPUs this process sees, and the one a rank runs on (every later CUDA call of the process
// goes there: set it before the first).
int cuda_device_count();
void use_cuda_device(int ordinal);

// A fresh NCCL unique id (rank 0 only), as hex text for an environment variable.
std::string new_nccl_unique_id();

// Joins the group of `size` ranks as `rank` on the current CUDA device (set it first).
std::unique_ptr<dist::Communicator> nccl_communicator(const std::string& unique_id_hex, int rank,
                                                      int size);

// The ranks of `parent` with the same `color` as one new communicator, ordered by `key`: every
// rank of `parent` calls it (NCCL's ncclCommSplit).
std::unique_ptr<dist::Communicator> split_nccl_communicator(dist::Communicator& parent, int color,
                                                            int key);

}  // namespace mmgen::cuda
