// The kinds of attention a text encoder's layers can have, as the paged backends see them: plain
// heads of q, k, v; dual chunk attention (three query rotations, attention/paged/paged_layer.h);
// or multi-head latent attention (DeepSeek's MLA: one compressed KV latent row per token). Each
// paged backend runs one kind (its catalogue entry says which), and a layer of one kind runs only
// on the backends of that kind.
#pragma once

#include <string_view>

namespace mmgen::attention {

enum class ModelAttention { Plain, DualChunk, LatentMla };

inline std::string_view model_attention_name(ModelAttention kind) {
  switch (kind) {
    case ModelAttention::Plain:
      return "plain";
    case ModelAttention::DualChunk:
      return "dual chunk";
    case ModelAttention::LatentMla:
      return "MLA";
  }
  return "?";
}

}  // namespace mmgen::attention
