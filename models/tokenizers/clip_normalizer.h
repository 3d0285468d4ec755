// The normalizers CLIP's tokenizer adds to the ones of normalizers.h: NFC and Lowercase (as HF
// tokenizers applies them: canonical composition; each character's unconditional lowercase
// mapping, İ → i̇ included, Σ always → σ), and CLIP's whole sequence.
#pragma once

#include <memory>

#include "models/tokenizers/normalizers.h"

namespace mmgen::tokenizers {

std::unique_ptr<Normalizer> make_nfc_normalizer();
std::unique_ptr<Normalizer> make_lowercase_normalizer();

// transformers' CLIPTokenizer: Sequence[NFC, Replace(\s+ → " "), Lowercase].
std::unique_ptr<Normalizer> make_clip_normalizer();

}  // namespace mmgen::tokenizers
