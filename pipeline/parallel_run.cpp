#include "pipeline/parallel_run.h"

#include "core/error.h"

namespace mmgen {

void ParallelLayout::validate() const {
  check(world_size >= 1, "--gpus {}: give at least 1", world_size);
  check(cfg_degree == 1 || cfg_degree == 2, "cfg degree {}: 1 or 2", cfg_degree);
  check(world_size % cfg_degree == 0,
        "--cfg-parallel runs the two guidance branches on two halves of the GPUs: --gpus {} is "
        "odd; use an even count or drop --cfg-parallel",
        world_size);
}

}  // namespace mmgen
