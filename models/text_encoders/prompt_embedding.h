// Wan's prompt embedding (`WanPipeline._get_t5_prompt_embeds`): the encoder runs on the padded
// batch with its attention mask, then each row keeps its real tokens and is zero-filled back to
// the padded length, so the transformer's unmasked cross-attention sees zeros, not pad states.
#pragma once

#include "core/tensor.h"
#include "models/text_encoders/umt5_encoder.h"

namespace mmgen::text_encoders {

// hidden [B, S, D] float32, attention_mask [B, S] (0 = padding). For each row b with
// len_b = count of nonzero mask entries, keeps hidden[b, :len_b] and sets hidden[b, len_b:] to
// zero ("cut, then zero-pad", as diffusers does: it counts the mask, it does not follow it).
Tensor zero_fill_after_length(const Tensor& hidden, const Tensor& attention_mask);

// input_ids / attention_mask [B, max_sequence_length], already tokenized and padded.
// Returns [B, max_sequence_length, d_model].
Tensor encode_wan_prompt_embeddings(const UMT5Encoder& encoder, const Tensor& input_ids,
                                    const Tensor& attention_mask);

}  // namespace mmgen::text_encoders
