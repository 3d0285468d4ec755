// The interface every DiT-family attention backend implements (one backend, one folder under
// attention/backends/), and the per-call context that carries what sparse backends need beyond
// q, k and v. Models never pick a backend: the selector decides (attention/selector.h), the
// pipeline builds the chosen backend once per layer, and the model calls it through this interface.
#pragma once

#include <any>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "attention/repeated_keys.h"
#include "core/tensor.h"

namespace mmgen::attention {

// Extra learned weights a backend may use for one layer (VSA: "to_gate_compress.weight"/".bias";
// SLA: "proj_l.weight"/".bias"), float32, keyed by the name after the layer prefix. Empty when the
// checkpoint has none; the backend then documents and logs what it does instead.
using LayerWeights = std::map<std::string, Tensor>;

// State a backend keeps for one layer across denoising steps (SVG2's k-means centroids). Owned by
// the caller, one per (component, layer); the backend puts what it wants in `value`.
struct LayerState {
  std::any value;
};

// Everything about one attention call besides q, k, v. Video tokens come first in (t, h, w) order
// after patchify. For self-attention, `text_length` further tokens (if any; 0 for Wan) follow them
// in the same sequence; for cross-attention it is the number of text keys.
struct AttentionContext {
  int64_t step_index = 0;  // denoising step, 0-based
  int64_t num_steps = 1;
  float timestep = 0;       // the scheduler's timestep value at this step (SVG2 uses it)
  int64_t layer_index = 0;  // block index, 0-based
  int64_t num_layers = 1;
  std::array<int64_t, 3> grid = {0, 0, 0};  // latent grid after patchify (T, H, W); 0s: not video
  int64_t text_length = 0;
  bool is_cross = false;
  const LayerWeights* weights = nullptr;  // may be null
  LayerState* state = nullptr;            // may be null (then a stateful backend recomputes)
  // Cross-attention: k and v hold a repeated tail (attention/repeated_keys.h). Set only for a
  // backend whose counts_repeated_keys() is true; the caller expands the keys for the others.
  const RepeatedTail* repeated_tail = nullptr;
  // Which of the layer's states this is (the guidance branch or the batch item): a GPU backend
  // that keeps its state itself (SVG2's centroids) keys it by layer and branch.
  int64_t branch = 0;
  // Self-attention: the block's attention input [B, S, D], for a backend with learned projections
  // of it (VSA's to_gate_compress, attention/backends/video_sparse_attn/vsa_gate.h); may be null.
  const Tensor* attention_input = nullptr;
};

// What a call did, for `mmgen attention` and the benchmarks.
struct AttentionStats {
  int64_t visited_blocks = 0;  // key blocks visited over all query blocks, batches and heads
  int64_t total_blocks = 0;    // what dense attention would visit in the same blocking
  double density() const {
    return total_blocks ? double(visited_blocks) / double(total_blocks) : 1.0;
  }
};

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual std::string_view name() const = 0;
  // Whether forward() attends to a context's repeated_tail itself (without its copies).
  virtual bool counts_repeated_keys() const { return false; }
  // Whether a batch element's output is what it would get alone (dense and stateless: nothing
  // kept between calls, nothing shared across the batch), so the two guidance branches may run as
  // one batch of two.
  virtual bool batch_elements_alone() const { return false; }
  // Whether, with these layer weights, forward() reads context.attention_input (VSA with a
  // trained gate): a sequence shard's attention input is not exchanged between ranks.
  virtual bool reads_attention_input(const LayerWeights& /*weights*/) const { return false; }
  // q [B, Sq, H, D], k and v [B, Sk, H, D]: float32 (any strides) for a CPU backend, contiguous
  // bf16 on the GPU for a GPU one (make_layer_backend builds one for the run's device); scale
  // multiplies q·k. Returns [B, Sq, H, D] in q's dtype and device. `stats` may be null.
  virtual Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                         const AttentionContext& context, AttentionStats* stats = nullptr) = 0;
};

class StaMaskStrategy;  // attention/backends/sliding_tile_attn/sta_mask.h
namespace sliding_tile_attn {
class StaSearch;  // attention/backends/sliding_tile_attn/sta_search.h
}

// What the attention plan (pipeline/attention_plan.h) loaded once for a run and hands to every
// layer's backend, so no backend reads a file again. Null members: not loaded; a backend that
// needs one then loads it from its settings itself (tests, `mmgen attention`).
struct BackendResources {
  std::shared_ptr<const StaMaskStrategy> sta_mask;  // sliding_tile_attn's mask-strategy file
  // sliding_tile_attn's STA_searching state, shared by every layer's backend of the run so one
  // file gets every layer's windows.
  std::shared_ptr<sliding_tile_attn::StaSearch> sta_search;
  // Lines for the log of both the dry run and the run: what the backends will do with what they
  // loaded (sliding_tile_attn: which windows run and where they come from).
  std::vector<std::string> notes;
};

// Builds a DiT-family backend by canonical name. `config` is validated against the backend's
// settings in the catalogue here (defaults filled in; an already validated object passes
// unchanged), so the backend's catalogue row is the only place its defaults live. Throws Error
// when this build has no CPU kernel for it.
std::unique_ptr<AttentionBackend> make_dit_backend(std::string_view name,
                                                   const nlohmann::json& config,
                                                   const BackendResources& resources = {});

}  // namespace mmgen::attention
