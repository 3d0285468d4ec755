#include "models/text_encoders/prompt_embedding.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace mmgen::text_encoders {

Tensor zero_fill_after_length(const Tensor& hidden, const Tensor& attention_mask) {
  check(hidden.dim() == 3 && attention_mask.dim() == 2 &&
            attention_mask.size(0) == hidden.size(0) && attention_mask.size(1) == hidden.size(1),
        "zero_fill_after_length: hidden {} and attention_mask {} should be [B, S, D] and [B, S]",
        shape_string(hidden.shape()), shape_string(attention_mask.shape()));
  Tensor result = hidden.dtype() == DType::F32 ? hidden.clone() : hidden.to(DType::F32);
  const Tensor mask = attention_mask.to(DType::F32);
  const int64_t batch = hidden.size(0), length = hidden.size(1), width = hidden.size(2);
  const float* m = mask.data<float>();
  float* out = result.data<float>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t kept = std::count_if(m + b * length, m + (b + 1) * length,
                                       [](float value) { return value > 0.0f; });
    std::memset(out + (b * length + kept) * width, 0,
                size_t((length - kept) * width) * sizeof(float));
  }
  return result;
}

Tensor encode_wan_prompt_embeddings(const UMT5Encoder& encoder, const Tensor& input_ids,
                                    const Tensor& attention_mask) {
  check(attention_mask.defined(), "Wan prompt embeddings need the tokenizer's attention mask");
  return zero_fill_after_length(encoder.forward(input_ids, attention_mask), attention_mask);
}

}  // namespace mmgen::text_encoders
