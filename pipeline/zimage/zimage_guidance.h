// Z-Image's classifier-free guidance, as ZImagePipeline applies it: pos + g·(pos − neg) (the
// conditional prediction pushed away from the negative one, not diffusers' usual
// uncond + g·(cond − uncond) form), with two options of its own: cfg_truncation (guidance turns
// off once the normalised time (1000 − t)/1000 passes it) and cfg_normalization (the guided
// prediction's norm capped at that multiple of the conditional one's).
#pragma once

#include "pipeline/guidance.h"

namespace mmgen {

struct ZImageGuidance {
  double scale = 0;          // guidance_scale; guidance runs when it is > 0
  double truncation = 1.0;   // cfg_truncation; > 1 disables truncation
  double normalization = 0;  // cfg_normalization; 0 (False) disables the cap
  // Whether the negative prompt is encoded at all (diffusers' do_classifier_free_guidance).
  bool enabled() const { return scale > 0; }
  // The scale of the step whose normalised time is `t_norm`: 0 once truncated.
  double scale_at(float t_norm) const;
  // The policy a step guided at `scale` combines its predictions by (pipeline/guidance.h):
  // c + scale·(c − u), capped at `normalization`·‖c‖ when that is above 0.
  GuidancePolicy policy(double scale) const {
    return {GuidancePolicy::Form::FromConditional, scale,
            GuidancePolicy::Rescale::CapAtConditionalNorm, normalization};
  }
};

}  // namespace mmgen
