// The CPU ports of the paged-attention backend designs, one file each. Built through
// make_paged_backend (paged_backend.h); flex_attention's callbacks are declared here.
#pragma once

#include <functional>
#include <memory>

#include "attention/paged/paged_backend.h"

namespace mmgen::attention::paged {

std::unique_ptr<PagedAttentionBackend> make_torch_native_backend();
std::unique_ptr<PagedAttentionBackend> make_triton_backend(int64_t max_kv_splits);
std::unique_ptr<PagedAttentionBackend> make_flashinfer_backend(bool use_ragged);
std::unique_ptr<PagedAttentionBackend> make_fa3_backend();
std::unique_ptr<PagedAttentionBackend> make_flex_attention_backend();
std::unique_ptr<PagedAttentionBackend> make_dual_chunk_backend();
std::unique_ptr<PagedAttentionBackend> make_flashinfer_mla_backend();
std::unique_ptr<PagedAttentionBackend> make_flashmla_backend();

// flex_attention's callbacks (torch.nn.attention.flex_attention), per score element:
// score_mod(score, b, h, q_idx, kv_idx) returns the modified score (q_idx, kv_idx: positions in
// the request; the score arrives already scaled by layer.scaling); mask_mod(b, h, q_idx, kv_idx)
// says whether the query sees the key. b is the request index in the batch.
using ScoreMod =
    std::function<float(float score, int64_t b, int64_t h, int64_t q_idx, int64_t kv_idx)>;
using MaskMod = std::function<bool(int64_t b, int64_t h, int64_t q_idx, int64_t kv_idx)>;

// Without mods of its own, flex_attention derives them from the layer: the score_mod adds
// layer.bias (T5's relative position bias), the mask_mod is causal / sliding window / padding.
// Mods set here replace those (for every layer) until cleared with empty functions.
void set_flex_mods(PagedAttentionBackend& flex_backend, ScoreMod score_mod, MaskMod mask_mod);

}  // namespace mmgen::attention::paged
