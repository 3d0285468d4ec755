// One generation spread over several ranks (`mmgen generate --gpus N`, issue 24). The ranks are
// laid out as SGLang diffusion lays them: with classifier-free-guidance parallel the two guidance
// branches run on two halves of the ranks (branch = rank / (N / 2)); within a branch the ranks
// share the token sequence, Ulysses style (attention/ulysses.h). Every rank runs the same loop on
// the same latents; rank 0 (the leader) encodes the prompts and broadcasts them, decodes the video
// and writes it.
#pragma once

#include <memory>

#include "core/communicator.h"

namespace mmgen {

struct ParallelLayout {
  int world_size = 1;
  int cfg_degree = 1;  // 2: classifier-free-guidance parallel

  int sequence_degree() const { return world_size / cfg_degree; }
  int branch_of(int rank) const { return rank / sequence_degree(); }
  int sequence_rank_of(int rank) const { return rank % sequence_degree(); }
  // Refuses a layout that does not split (one line naming the flags).
  void validate() const;
};

struct ParallelRun {
  ParallelLayout layout;
  std::unique_ptr<dist::Communicator> world;
  // The ranks of this rank's guidance branch (Ulysses group); null with one rank per branch.
  std::unique_ptr<dist::Communicator> sequence;
  // The ranks holding this rank's sequence rows in the two branches (cfg_degree 2), else null.
  std::unique_ptr<dist::Communicator> guidance;

  int rank() const { return world ? world->rank() : 0; }
  bool leader() const { return rank() == 0; }
  // This rank's branch (0: the prompt, 1: the negative prompt) under CFG parallel.
  int branch() const { return layout.branch_of(rank()); }
};

}  // namespace mmgen
