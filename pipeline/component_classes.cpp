#include "pipeline/component_classes.h"

#include "pipeline/schedulers/scheduler.h"

namespace mmgen {

namespace {

constexpr const char* kJointSequenceRefusal =
    "the sparse backends are written for Wan's video token grid, not a joint text + image "
    "sequence (FLUX, Qwen-Image)";

std::vector<ComponentClass> make_table() {
  std::vector<ComponentClass> table = {
      {"WanTransformer3DModel",
       ComponentKind::Transformer,
       "diffusers",
       "dit::WanTransformer",
       {},
       "wan"},
      {"AutoencoderKLWan", ComponentKind::Vae, "diffusers", "vae::WanVaeDecoder"},
      // The sparse backends are written for Wan's video token grid (frames x height x width
      // tiles, no caption tokens in the sequence); on these joint sequences none of them is
      // wired, so the selector refuses them rather than run something untested.
      // Z-Image's transformer is single-stream: the caption tokens join the self-attention.
      {"ZImageTransformer2DModel",
       ComponentKind::Transformer,
       "diffusers",
       "dit::ZImageTransformer",
       {false,
        "the sparse backends are written for Wan's video token grid, not Z-Image's single-stream "
        "image + caption sequence"}},
      // FLUX's and Qwen-Image's blocks attend over [text, image] jointly.
      {"FluxTransformer2DModel",
       ComponentKind::Transformer,
       "diffusers",
       "dit::FluxTransformer",
       {false, kJointSequenceRefusal}},
      {"QwenImageTransformer2DModel",
       ComponentKind::Transformer,
       "diffusers",
       "dit::QwenImageTransformer",
       {false, kJointSequenceRefusal}},
      {"AutoencoderKL", ComponentKind::Vae, "diffusers", "vae::AutoencoderKLDecoder"},
      // Wan's causal 3D VAE code, for one frame (models/vae/wan_vae_config.h says where it
      // differs).
      {"AutoencoderKLQwenImage", ComponentKind::Vae, "diffusers", "vae::WanVaeDecoder"},
      // Its language model only (text prompts never reach the vision tower).
      {"Qwen2_5_VLForConditionalGeneration", ComponentKind::TextEncoder, "transformers",
       "text_encoders::Qwen3TextModel"},
      {"CLIPTextModel", ComponentKind::TextEncoder, "transformers", "text_encoders::ClipTextModel"},
      {"UMT5EncoderModel", ComponentKind::TextEncoder, "transformers",
       "text_encoders::UMT5Encoder"},
      {"T5EncoderModel", ComponentKind::TextEncoder, "transformers", "text_encoders::UMT5Encoder"},
      {"Qwen3Model", ComponentKind::TextEncoder, "transformers", "text_encoders::Qwen3TextModel"},
      {"Qwen3ForCausalLM", ComponentKind::TextEncoder, "transformers",
       "text_encoders::Qwen3TextModel"},
      // The tokenizer is read from tokenizer.json whatever the class (the slow classes' folders
      // hold one too when saved by a recent transformers), so these differ only in the vocabulary
      // their model expects; a pipeline names the ones that fit its text encoder.
      // CLIP's tokenizer is read from vocab.json + merges.txt when its folder has no
      // tokenizer.json (the FLUX.1 repos ship it so).
      {"CLIPTokenizer", ComponentKind::Tokenizer, "transformers", "tokenizers::Tokenizer"},
      {"CLIPTokenizerFast", ComponentKind::Tokenizer, "transformers", "tokenizers::Tokenizer"},
      {"T5Tokenizer", ComponentKind::Tokenizer, "transformers", "tokenizers::Tokenizer"},
      {"T5TokenizerFast", ComponentKind::Tokenizer, "transformers", "tokenizers::Tokenizer"},
      {"Qwen2Tokenizer", ComponentKind::Tokenizer, "transformers", "tokenizers::Tokenizer"},
      {"Qwen2TokenizerFast", ComponentKind::Tokenizer, "transformers", "tokenizers::Tokenizer"},
      // transformers 5's name for any tokenizer saved as tokenizer.json alone.
      {"TokenizersBackend", ComponentKind::Tokenizer, "transformers", "tokenizers::Tokenizer"},
  };
  // The schedulers are whatever the scheduler factory builds, so the two lists cannot drift.
  for (const std::string& name : schedulers::supported_scheduler_classes())
    table.push_back({name, ComponentKind::Scheduler, "diffusers", "schedulers::make_scheduler"});
  return table;
}

}  // namespace

const std::vector<ComponentClass>& component_classes() {
  static const std::vector<ComponentClass> table = make_table();
  return table;
}

const ComponentClass* find_component_class(const std::string& name) {
  for (const ComponentClass& entry : component_classes())
    if (entry.name == name) return &entry;
  return nullptr;
}

std::vector<std::string> component_class_names(ComponentKind kind) {
  std::vector<std::string> names;
  for (const ComponentClass& entry : component_classes())
    if (entry.kind == kind) names.push_back(entry.name);
  return names;
}

std::string kind_name(ComponentKind kind, bool plural) {
  const char* name = "component";
  switch (kind) {
    case ComponentKind::Scheduler:
      name = "scheduler";
      break;
    case ComponentKind::Tokenizer:
      name = "tokenizer";
      break;
    case ComponentKind::TextEncoder:
      name = "text encoder";
      break;
    case ComponentKind::Transformer:
      name = "transformer";
      break;
    case ComponentKind::Vae:
      name = "VAE";
      break;
  }
  return plural ? std::string(name) + "s" : std::string(name);
}

}  // namespace mmgen
