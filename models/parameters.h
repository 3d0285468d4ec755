// The module registry: a model's weight structures name their tensors once, and placement on a
// device, the bytes a device holds, a tensor's shape check, the one rule for moving a model and
// (next) loading and LoRA patching are written once over that list instead of once per structure.
//
// A structure lists its tensors with `void parameters(const ParameterVisitor& visit)`, each under
// its checkpoint name below the structure's prefix ("attn.to_q.weight"), with the role that says
// how it is placed and the shape its config implies. Nested structures list theirs through
// nested(visit, "attn.to_q."), as torch's named_parameters() and stable-diffusion.cpp's blocks do.
// A structure is first made *shaped* for its config (its tensors undefined, the dimensions and
// optional parts its config gives set); checking a checkpoint against it (expect_checkpoint) and
// loading it (loaded) then read the list alone. Tensors are handles (copying one shares its
// bytes), so the functions below take a structure by value and return a new one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "core/tensor.h"

namespace mmgen::models {

// How a tensor is kept where the model runs.
enum class Role {
  Product,  // a product's matrix: the compute dtype (or FP8 rows, or a GGUF file's blocks) there
  Compute,  // read there in the compute dtype (a bias that joins a product's output)
  Float32,  // read there in float32 (norms, biases the float32 residual stream adds)
  Host,     // stays on the host (read by host code: modulation tables, pad tokens)
  // Stays on the host as a product reads it (an embedding table whose rows the host gathers:
  // a GGUF file's blocks stay blocks).
  Table,
};

// What placement makes of a structure's tensors.
struct PlacementRule {
  Device device = Device::CPU;
  DType compute = DType::F32;
  // Products' matrices as e4m3 rows with one scale per output channel (GPU only); a checkpoint's
  // own e4m3 rows go up as they are.
  bool fp8_products = false;
  // A GGUF matrix goes to the GPU as its quantized blocks (the product expands them as it reads)
  // instead of being expanded to the compute dtype once.
  bool keep_quantized_blocks = false;
};

struct Parameter {
  std::string_view name;
  Tensor& tensor;
  Role role;
  // The values' shape the structure's config implies (a GGUF file's blocks count as the values
  // they hold): what a checkpoint is checked against and a random one is made of.
  Shape shape = {};
  // Products of one group (nonzero) in one structure share one shape and are placed one after
  // another in one allocation (ops::stack_weights), for ops::linear_each.
  int group = 0;
};

using ParameterVisitor = std::function<void(const Parameter&)>;
using ParameterList = std::function<void(const ParameterVisitor&)>;

// `visit` with `prefix` put before every name (valid while `visit` is).
ParameterVisitor nested(const ParameterVisitor& visit, std::string prefix);

// One tensor as `rule` places a tensor of `role`; an undefined tensor stays undefined.
Tensor place_parameter(const Tensor& tensor, Role role, const PlacementRule& rule);

// Every parameter `list` visits placed by `rule`, each group stacked into one allocation (with
// FP8 products, whose rows carry their own scales, each on its own).
void place_parameters(const ParameterList& list, const PlacementRule& rule);

template <class Weights>
Weights placed(Weights weights, const PlacementRule& rule) {
  place_parameters([&](const ParameterVisitor& visit) { weights.parameters(visit); }, rule);
  return weights;
}

// The bytes of the parameters that lie on `device` (a placed structure's: what it holds there).
template <class Weights>
size_t parameter_bytes(Weights weights, Device device) {
  size_t total = 0;
  weights.parameters([&](const Parameter& p) {
    if (p.tensor.defined() && p.tensor.device() == device) total += p.tensor.nbytes();
  });
  return total;
}

// What placing `list` by `rule` would hold on the device, from the listed shapes alone (a memory
// estimate before anything is read): products in the compute dtype (or e4m3 rows with a float32
// scale per row), Float32 tensors in float32, Host and Table nothing. A GGUF file's blocks kept
// as blocks (rule.keep_quantized_blocks) are not estimated: Error.
uint64_t shaped_bytes(const ParameterList& list, const PlacementRule& rule);

template <class Weights>
uint64_t shaped_resident_bytes(Weights shaped, const PlacementRule& rule) {
  return shaped_bytes([&](const ParameterVisitor& visit) { shaped.parameters(visit); }, rule);
}

// `weights` placed by `rule`, what it then holds on the device added to `bytes`.
template <class Weights>
Weights placed_counted(Weights weights, const PlacementRule& rule, size_t& bytes) {
  Weights result = placed(std::move(weights), rule);
  bytes += parameter_bytes(result, rule.device);
  return result;
}

// The names `weights` lists, in order (undefined tensors included).
template <class Weights>
std::vector<std::string> parameter_names(Weights weights) {
  std::vector<std::string> names;
  weights.parameters([&](const Parameter& p) { names.emplace_back(p.name); });
  return names;
}

// The one rule for moving a model between devices, which every model follows. `state` is what the
// model holds where it runs (its device, compute dtype, weights there and their bytes).
// `to_host(state)` returns it on the CPU as loaded, releasing what the old device held (two copies
// never share a device; it does not fail); `place(host)` builds the state on `target` from that,
// apart, and it becomes the model's only when complete. When placing throws (out of GPU memory,
// --max-gpu-memory) the model is left on the CPU as loaded and the error goes on: nothing is ever
// half-placed.
template <class State, class ToHost, class Place>
void move_model(State& state, Device target, ToHost&& to_host, Place&& place) {
  state = to_host(std::move(state));
  if (target == Device::CPU) return;
  State placed = place(static_cast<const State&>(state));
  state = std::move(placed);
}

// `host` placed by `rule` (models::placed), with the State's device, compute dtype and bytes set:
// the placed state of a model that holds its weights in one structure (the text encoders).
template <class State>
State placed_state(const State& host, const PlacementRule& rule) {
  State placed = models::placed(host, rule);
  placed.device = rule.device;
  placed.compute = rule.compute;
  placed.bytes = parameter_bytes(placed, rule.device);
  return placed;
}

// move_model for a model whose CPU state is empty (it reads its checkpoint as it runs, as the
// DiTs do): on the GPU `fill(next, rule)` adds the resident weights to `next`, whose device and
// compute dtype are set (products read bf16 there).
template <class State, class Fill>
void move_resident(State& state, Device device, DType compute, Fill&& fill) {
  const auto to_host = [](State&&) { return State{}; };
  move_model(state, device, to_host, [&](const State&) {
    check(compute == DType::BF16, "GPU transformer: the products read bf16, not {}",
          dtype_name(compute));
    State next;
    next.device = device;
    next.compute = compute;
    fill(next, PlacementRule{device, compute});
    return next;
  });
}

// move_model for a model whose modules keep the host weights they place from (the VAE decoders):
// the host state is the model placed on the CPU, and a placed one a copy of it (sharing the host
// weights) placed by `model.place_modules(device, args...)`.
template <class Model, class... Args>
void move_modules(Model& model, Device device, const Args&... args) {
  const auto on = [&](Model placed, Device where) {
    placed.place_modules(where, args...);
    return placed;
  };
  move_model(
      model, device, [&](Model&& self) { return on(std::move(self), Device::CPU); },
      [&](const Model& host) { return on(host, device); });
}

// What a checkpoint is read as, for the errors' words: {"transformer", "Wan text-to-video"}
// gives "transformer weights in FILE: ... (or is not a Wan text-to-video transformer)".
struct CheckpointKind {
  std::string_view component;
  std::string_view model;
};

// Throws Error, one line naming the tensor and the file, unless `name` is in `store`, holds
// floating-point values (f32, bf16, f16 or f8_e4m3, or a GGUF file's blocks) and has `shape`.
void expect_tensor(const WeightStore& store, const std::string& name, const Shape& shape,
                   CheckpointKind kind);

// Throws Error, one line naming the tensor and the file, unless every parameter `list` visits is
// in `store` under `prefix` + its name, holds floating-point values (f32, bf16, f16 or f8_e4m3,
// or a GGUF file's blocks) and has its shape. Run before anything is loaded.
void expect_parameters(const ParameterList& list, const WeightStore& store,
                       const std::string& prefix, CheckpointKind kind);

// How a loaded structure holds the tensors that are neither a product's matrix nor a table.
enum class Values {
  Float32,   // converted to float32 (a DiT on the CPU computes straight from what it loads)
  AsStored,  // mapped as stored (the text encoders; placing them converts)
};

// Every parameter `list` visits read from `store` under `prefix` + its name: a product's matrix
// and a table as a product reads them (WeightStore::get_for_product: bf16, f16, float32, a GGUF
// file's blocks or FP8 rows, never widened whole; the CPU product converts as it packs), the rest
// as `values` says. Check first (expect_parameters).
void load_parameters(const ParameterList& list, const WeightStore& store, const std::string& prefix,
                     Values values);

template <class Weights>
void expect_checkpoint(Weights shaped, const WeightStore& store, const std::string& prefix,
                       CheckpointKind kind) {
  expect_parameters([&](const ParameterVisitor& visit) { shaped.parameters(visit); }, store, prefix,
                    kind);
}

template <class Weights>
Weights loaded(Weights shaped, const WeightStore& store, const std::string& prefix = "",
               Values values = Values::Float32) {
  load_parameters([&](const ParameterVisitor& visit) { shaped.parameters(visit); }, store, prefix,
                  values);
  return shaped;
}

}  // namespace mmgen::models
