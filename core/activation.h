// The pointwise activations models name in their configs, shared by the CPU ops and their CUDA
// kernels.
#pragma once

namespace mmgen {

enum class Activation {
  Relu,
  Gelu,      // exact: 0.5·x·(1 + erf(x/√2))
  GeluTanh,  // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
  Silu,      // x·sigmoid(x)
};

}  // namespace mmgen
