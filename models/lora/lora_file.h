// A LoRA adapter file read into the layers it changes, under the model's checkpoint names.
//
// The files people share name a layer in one of a few ways; each key is a layer's name, then
// what the tensor is:
// - diffusers / peft: transformer.blocks.0.attn1.to_q.lora_A.weight (lora_B.weight,
//   lora_B.bias);
// - a model family's original names (ComfyUI, lightx2v, musubi-tuner, ai-toolkit):
//   diffusion_model.blocks.0.self_attn.q.lora_down.weight (lora_up.weight, .alpha, .diff_b;
//   the lora_A / lora_B spellings too), mapped by the model (ModuleNames);
// - kohya's sd-scripts: lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight, the same names
//   flattened (lora_te* keys, the text encoders', are counted apart).
// peft's ".lora_A.default.weight" spelling is read as ".lora_A.weight".
// A layer's change is weight += s·(alpha / rank)·(up · down) and bias += s·bias_delta, s the
// user's scale; alpha / rank is 1 where the file has no alpha (diffusers' files fold it in).
// Full-weight `.diff` keys are left out, as diffusers leaves them out (norm diffs are zeros in
// the files that carry them). Keys for other components (text_encoder.*) are counted apart.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"

namespace mmgen::lora {

namespace fs = std::filesystem;

// A LoRA a request applies to a component: its file and the user's scale.
struct LoraUse {
  fs::path path;
  double scale = 1.0;
  std::string sha256;  // the file's, once attach_loras has checked it (pipeline/component_loras.h)
};

// How a component takes its LoRAs: merged into the weights at load (no cost per step), or as
// low-rank updates the products add as they run (core/low_rank.h: the base weights untouched,
// FP8 and GGUF ones included). Auto: runtime where a changed matrix is stored FP8 or as GGUF
// blocks, merge otherwise.
enum class LoraMode { Auto, Merge, Runtime };
// "auto", "merge", "runtime" (--lora-mode's values), and back (anything else: Auto).
const char* lora_mode_name(LoraMode mode);
LoraMode lora_mode_named(const std::string& name);

struct LoraLayer {
  std::string module;  // the layer's name in the model's checkpoint: "blocks.0.attn1.to_q"
  std::string key;     // the file's key for it (its down matrix, or bias delta), for messages
  Tensor down, up;     // [rank, in] and [out, rank], float32 on the host; undefined for a
                       // layer with only a bias delta
  float alpha_over_rank = 1.0f;
  Tensor bias_delta;  // [out] float32, or undefined
};

struct LoraFile {
  fs::path path;
  std::string format;  // "diffusers/peft", "original", "kohya (sd-scripts)" or a mix
  std::vector<LoraLayer> layers;
  int64_t full_weight_diffs = 0;  // `.diff` keys left out
  int64_t other_components = 0;   // keys of components other than the one read
};

// Where a layer of a file in a model family's original names (the key's part before
// ".lora_down..." once the file's prefix is taken off, "blocks.0.self_attn.q"; for kohya's files
// the same with every dot an underscore, "double_blocks_0_img_attn_qkv") lies in the model's
// checkpoint names: one module, or for a fused layer (FLUX's img_attn.qkv) the rows of its output
// that each module of the model takes, in order ({"attn.to_q", {{0, 3072}}}, ...). No rows: all.
struct LoraTarget {
  std::string module;
  std::vector<WeightStore::RowRange> rows;
};
// A family's names (empty: a name it does not know, read as the model's own name).
using ModuleNames = std::function<std::vector<LoraTarget>(const std::string& original)>;

// The components a LoRA file's keys are for ("transformer", "text_encoder", ...), by their
// prefixes, sorted.
std::vector<std::string> lora_components(const std::vector<std::string>& keys);

// Throws Error, one line, unless `path` names a regular .safetensors file (what --lora-path is
// checked for before any work, and read_lora_file before it reads).
void check_lora_path(const fs::path& path);

// Reads `path` (a .safetensors LoRA) for the `component` ("transformer"). Throws Error, one line
// naming the file and the key, for a file that is not a LoRA of a known layout, a tensor of the
// wrong rank or dtype, a down matrix without its up matrix (or the reverse), ranks that disagree,
// or an alpha that is not one positive number. Shapes against the model are checked when the
// LoRA is merged (lora_merge.h).
LoraFile read_lora_file(const fs::path& path, const std::string& component,
                        const ModuleNames& original_names);

// The same from an opened store and the file's safetensors metadata (what the reader and the
// fuzz target share). A diffusers file keeps its adapter's settings there
// ("lora_adapter_metadata": "<component>.lora_alpha", ".r", ".use_rslora", ...), as
// save_lora_weights writes them: a layer without an `.alpha` key is then scaled by
// lora_alpha / rank (by lora_alpha / sqrt(rank) with use_rslora), as peft scales it.
LoraFile read_lora_store(const WeightStore& store, const fs::path& path,
                         const std::string& component, const ModuleNames& original_names,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace mmgen::lora
