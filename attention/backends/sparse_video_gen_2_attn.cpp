// sparse_video_gen_2_attn: Sparse VideoGen 2 (k-means clusters of queries and keys per head,
// top-p cluster pairs, permuted block-sparse attention); the kernel is attention/svg2_attention.h.
#include "attention/backends/factories.h"
#include "attention/svg2_attention.h"

namespace mmgen::attention {

BackendFactory sparse_video_gen_2_attn_factory() {
  return [](const nlohmann::json& config) {
    return std::make_unique<svg2::Svg2Attention>(svg2::Options::from_json(config));
  };
}

}  // namespace mmgen::attention
