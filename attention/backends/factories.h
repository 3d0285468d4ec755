// One factory per DiT-family backend, each defined in its own file under attention/backends/.
// A factory that returns an empty function means this build has no CPU kernel for that backend
// yet; the registry (registry.cpp) and the catalogue's kernel table follow from these.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "attention/backend.h"

namespace mmgen::attention {

using BackendFactory =
    std::function<std::unique_ptr<AttentionBackend>(const nlohmann::json& config)>;

BackendFactory torch_sdpa_factory();
BackendFactory fa_factory();
BackendFactory sliding_tile_attn_factory();
BackendFactory video_sparse_attn_factory();
BackendFactory vmoba_attn_factory();
BackendFactory sla_attn_factory();
BackendFactory sage_sla_attn_factory();
BackendFactory sparse_video_gen_2_attn_factory();
BackendFactory sage_attn_factory();
BackendFactory sage_attn_3_factory();

}  // namespace mmgen::attention
