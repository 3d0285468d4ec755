// The guidance policies, written once for every pipeline: how a guided step combines the
// transformer's conditional prediction c and unconditional (negative-prompt) prediction u. Each
// pipeline's prediction (pipeline/denoise_loop.h) picks its policy; the arithmetic is float32 on
// the host in the order of float operations of the diffusers pipeline it follows, so the fixtures
// match to the last bit.
#pragma once

#include "core/tensor.h"

namespace mmgen {

struct GuidancePolicy {
  enum class Form {
    // u + s·(c − u): diffusers' classifier-free guidance (WanPipeline) and true CFG
    // (FluxPipeline, QwenImagePipeline).
    FromUnconditional,
    // c + s·(c − u): ZImagePipeline's (the conditional prediction pushed away from the negative).
    FromConditional,
  };
  enum class Rescale {
    None,
    // Each row (a token's values, the last dimension) scaled by ‖c_row‖ / ‖guided_row‖, each
    // norm rounded to float32 first: QwenImagePipeline's true CFG.
    RowsToConditionalNorm,
    // The whole guided prediction scaled down, where its norm exceeds cap·‖c‖, to that norm:
    // ZImagePipeline's cfg_normalization (cap 0: off).
    CapAtConditionalNorm,
  };
  Form form = Form::FromUnconditional;
  double scale = 1.0;
  Rescale rescale = Rescale::None;
  double cap = 0;
};

// The guided prediction, float32 in `conditional`'s shape (any float dtype in; both of one shape).
Tensor guided_prediction(const Tensor& conditional, const Tensor& unconditional,
                         const GuidancePolicy& policy);

}  // namespace mmgen
