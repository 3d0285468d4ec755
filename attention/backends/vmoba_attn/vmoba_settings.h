// vmoba_attn's settings, read once from the validated --attention-backend-config (the schema and
// defaults are in vmoba_attn.cpp's descriptor) and shared by the CPU and the CUDA implementation,
// with the rules both apply: which steps and layers run dense, which chunking a layer uses and how
// its queries choose chunks.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "attention/backends/vmoba_attn/vmoba_layout.h"
#include "attention/backends/vmoba_attn/vmoba_select.h"
#include "core/error.h"

namespace mmgen::attention::vmoba_attn {

struct VmobaSettings {
  int64_t temporal_chunk = 2, temporal_topk = 3;
  std::array<int64_t, 2> spatial_chunk = {3, 4};
  int64_t spatial_topk = 20;
  std::array<int64_t, 3> st_chunk = {4, 6, 4};
  int64_t st_topk = 15;
  vmoba::SelectMode mode = vmoba::SelectMode::Threshold;
  vmoba::SelectGroup group = vmoba::SelectGroup::QueryHead;
  double threshold = 0.25;
  int64_t first_full_step = 12, first_full_layer = 0;
  int64_t temporal_layers = 1, spatial_layers = 1, st_layers = 1;

  static VmobaSettings from_json(const nlohmann::json& config) {
    VmobaSettings s;
    config.at("temporal_chunk_size").get_to(s.temporal_chunk);
    config.at("temporal_topk").get_to(s.temporal_topk);
    config.at("spatial_chunk_size").get_to(s.spatial_chunk);
    config.at("spatial_topk").get_to(s.spatial_topk);
    config.at("st_chunk_size").get_to(s.st_chunk);
    config.at("st_topk").get_to(s.st_topk);
    const std::string mode = config.at("moba_select_mode").get<std::string>();
    check(mode == "threshold" || mode == "topk",
          "vmoba_attn: moba_select_mode '{}' is not threshold or topk", mode);
    s.mode = mode == "topk" ? vmoba::SelectMode::TopK : vmoba::SelectMode::Threshold;
    const std::string type = config.at("moba_threshold_type").get<std::string>();
    if (type == "query_head")
      s.group = vmoba::SelectGroup::QueryHead;
    else if (type == "head_global")
      s.group = vmoba::SelectGroup::HeadGlobal;
    else if (type == "overall")
      s.group = vmoba::SelectGroup::Overall;
    else
      fail("vmoba_attn: moba_threshold_type '{}' is not query_head, head_global or overall", type);
    config.at("moba_threshold").get_to(s.threshold);
    config.at("first_full_step").get_to(s.first_full_step);
    config.at("first_full_layer").get_to(s.first_full_layer);
    config.at("temporal_layer").get_to(s.temporal_layers);
    config.at("spatial_layer").get_to(s.spatial_layers);
    config.at("st_layer").get_to(s.st_layers);
    check(s.temporal_chunk >= 1 && s.spatial_chunk[0] >= 1 && s.spatial_chunk[1] >= 1 &&
              s.st_chunk[0] >= 1 && s.st_chunk[1] >= 1 && s.st_chunk[2] >= 1,
          "vmoba_attn: chunk sizes must be at least 1");
    check(s.temporal_topk >= 1 && s.spatial_topk >= 1 && s.st_topk >= 1,
          "vmoba_attn: temporal_topk, spatial_topk and st_topk must be at least 1");
    check(s.temporal_layers >= 0 && s.spatial_layers >= 0 && s.st_layers >= 0 &&
              s.temporal_layers + s.spatial_layers + s.st_layers > 0,
          "vmoba_attn: temporal_layer + spatial_layer + st_layer must be at least 1");
    return s;
  }

  // Leading steps and layers run dense attention.
  bool dense_at(int64_t step, int64_t layer) const {
    return step < first_full_step || layer < first_full_layer;
  }
  vmoba::ChunkKind kind_of_layer(int64_t layer) const {
    return vmoba::chunk_kind_for_layer(layer, first_full_layer, temporal_layers, spatial_layers,
                                       st_layers);
  }
  // The chunk shape (t, h, w) `kind` uses on `grid`, and the chunking it gives.
  std::array<int64_t, 3> chunk_shape(vmoba::ChunkKind kind,
                                     const std::array<int64_t, 3>& grid) const {
    return vmoba::chunk_shape(kind, grid, temporal_chunk, spatial_chunk, st_chunk);
  }
  vmoba::ChunkLayout layout(vmoba::ChunkKind kind, const std::array<int64_t, 3>& grid) const {
    return vmoba::make_chunk_layout(grid, chunk_shape(kind, grid));
  }
  vmoba::SelectOptions select_options(vmoba::ChunkKind kind) const {
    const int64_t topk = kind == vmoba::ChunkKind::Temporal  ? temporal_topk
                         : kind == vmoba::ChunkKind::Spatial ? spatial_topk
                                                             : st_topk;
    return {.mode = mode, .group = group, .threshold = threshold, .topk = topk};
  }
};

}  // namespace mmgen::attention::vmoba_attn
