// The Unicode normalizers of tokenizer.json's NFC and Lowercase types (CLIP's and Qwen2's
// tokenizers use them), as HF tokenizers applies them: canonical composition; each character's
// unconditional lowercase mapping, İ → i̇ included, Σ always → σ.
#pragma once

#include <memory>

#include "text/normalizers.h"

namespace mmgen::tokenizers {

std::unique_ptr<Normalizer> make_nfc_normalizer();
std::unique_ptr<Normalizer> make_lowercase_normalizer();

}  // namespace mmgen::tokenizers
