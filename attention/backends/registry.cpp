// The DiT backends this build can construct, by canonical catalogue name.
#include <string_view>
#include <vector>

#include "attention/backends/factories.h"
#include "core/error.h"

namespace mmgen::attention {

namespace {

struct Entry {
  std::string_view name;
  BackendFactory factory;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"torch_sdpa", torch_sdpa_factory()},
      {"fa", fa_factory()},
      {"sliding_tile_attn", sliding_tile_attn_factory()},
      {"video_sparse_attn", video_sparse_attn_factory()},
      {"vmoba_attn", vmoba_attn_factory()},
      {"sla_attn", sla_attn_factory()},
      {"sage_sla_attn", sage_sla_attn_factory()},
      {"sparse_video_gen_2_attn", sparse_video_gen_2_attn_factory()},
      {"sage_attn", sage_attn_factory()},
      {"sage_attn_3", sage_attn_3_factory()},
  };
  return entries;
}

}  // namespace

std::vector<std::string_view> cpu_dit_backends() {
  std::vector<std::string_view> names;
  for (const auto& entry : registry())
    if (entry.factory) names.push_back(entry.name);
  return names;
}

std::unique_ptr<AttentionBackend> make_dit_backend(std::string_view name,
                                                   const nlohmann::json& config) {
  for (const auto& entry : registry())
    if (entry.name == name) {
      check(bool(entry.factory), "attention backend {}: this build has no CPU kernel for it", name);
      return entry.factory(config);
    }
  fail("'{}' is not a DiT attention backend (see `mmgen backends`)", name);
}

}  // namespace mmgen::attention
