#!/usr/bin/env python3
"""Reference for Qwen3 with dual chunk attention (tests/qwen3_test.cpp, DualChunk cases).

transformers has no dual chunk attention, so this is an independent float64 NumPy forward of the
qwen3-tiny fixture's text encoder (../shared/fixtures/qwen3-tiny), written from transformers'
Qwen3 (RMSNorm, q/k RMSNorm per head, rotate-half RoPE, GQA, SwiGLU) and SGLang's dual chunk
attention (DualChunkRotaryEmbedding in rotary_embedding.py, dual_chunk_flashattention_backend.py):
  - keys rotated at position % chunk_len, chunk_len = chunk_size - local_size;
  - a query at position p of chunk c = p // chunk_len sees keys j <= p through one of three
    rotations: intra (j >= c*L) at p % L, succ (the chunk before) at min(p % L + L, chunk_size),
    inter (earlier) at min(2L - 1, chunk_size); one softmax over all of them (SGLang merges the
    three partial softmaxes by their LSEs, the same thing);
  - with original_max_position_embeddings > 0 the logits are multiplied by
    max(1, 0.1 ln(len / original_max_position_embeddings) + 1).
First it checks its plain forward against transformers' hidden_states[-2] in the fixture (the
same code with the plain rotation), then writes reference.safetensors: `input_ids` (int64, the
fixture's first two prompts' ids one after another: many chunks) and `hidden_states_minus2`
(float32 [tokens, 64]) with chunk_size 10, local_size 3, original_max_position_embeddings 16.
Run: python3 tests/data/qwen3_dual_chunk/make.py [fixtures folder]
"""
import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

CHUNK_SIZE, LOCAL_SIZE, ORIGINAL_MAX = 10, 3, 16


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, positions, theta):
    """Rotate-half RoPE of x [T, H, D] at `positions` [T] (inverse frequencies in float32, as
    transformers computes them)."""
    d = x.shape[-1]
    inv = (1.0 / (theta ** (np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / d))).astype(
        np.float32)
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inv.astype(np.float64)[None, :]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def forward(w, cfg, ids, dual_chunk):
    eps, theta = cfg["rms_norm_eps"], cfg["rope_parameters"]["rope_theta"]
    hq, hkv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    T = len(ids)
    pos = np.arange(T)
    x = w["model.embed_tokens.weight"][ids].astype(np.float64)
    L = CHUNK_SIZE - LOCAL_SIZE
    scale = 1.0 / math.sqrt(d)
    if dual_chunk and ORIGINAL_MAX > 0:
        scale *= max(1.0, 0.1 * math.log(T / ORIGINAL_MAX) + 1.0)
    for layer in range(cfg["num_hidden_layers"] - 1):  # hidden_states[-2]
        p = lambda name: w[f"model.layers.{layer}.{name}"].astype(np.float64)
        h = rms_norm(x, p("input_layernorm.weight"), eps)
        q = (h @ p("self_attn.q_proj.weight").T).reshape(T, hq, d)
        k = (h @ p("self_attn.k_proj.weight").T).reshape(T, hkv, d)
        v = (h @ p("self_attn.v_proj.weight").T).reshape(T, hkv, d)
        q = rms_norm(q, p("self_attn.q_norm.weight"), eps)
        k = rms_norm(k, p("self_attn.k_norm.weight"), eps)
        if dual_chunk:
            k = rope(k, pos % L, theta)
            qs = [rope(q, pos % L, theta),
                  rope(q, np.minimum(pos % L + L, CHUNK_SIZE), theta),
                  rope(q, np.full(T, min(2 * L - 1, CHUNK_SIZE)), theta)]
        else:
            k = rope(k, pos, theta)
            qs = [rope(q, pos, theta)] * 3
        out = np.zeros((T, hq, d))
        for i in range(T):
            c0 = (i // L) * L
            region = np.where(pos[: i + 1] >= c0, 0, np.where(pos[: i + 1] >= c0 - L, 1, 2))
            for head in range(hq):
                kv = head // (hq // hkv)
                qv = np.stack([qs[r][i, head] for r in region])  # [i + 1, d]
                logits = (qv * k[: i + 1, kv]).sum(-1) * scale
                prob = np.exp(logits - logits.max())
                prob /= prob.sum()
                out[i, head] = prob @ v[: i + 1, kv]
        x = x + out.reshape(T, hq * d) @ p("self_attn.o_proj.weight").T
        h = rms_norm(x, p("post_attention_layernorm.weight"), eps)
        gate, up = h @ p("mlp.gate_proj.weight").T, h @ p("mlp.up_proj.weight").T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ p("mlp.down_proj.weight").T
    return x


def main():
    fixtures = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "../../../../shared/fixtures")
    folder = os.path.join(fixtures, "qwen3-tiny")
    cfg = json.load(open(os.path.join(folder, "model/text_encoder/config.json")))
    w = load_file(os.path.join(folder, "model/text_encoder/model.safetensors"))
    ref = load_file(os.path.join(folder, "reference/reference.safetensors"))
    prompts = json.load(open(os.path.join(folder, "reference/reference.json")))["prompts"]
    # The plain forward against transformers, prompt 0's real tokens.
    ids0 = prompts[0]["ids"]
    plain = forward(w, cfg, ids0, False)
    expected = ref["encoder.hidden_states_minus2"][0, : len(ids0)].astype(np.float64)
    error = np.linalg.norm(plain - expected) / np.linalg.norm(expected)
    print(f"plain forward vs transformers hidden_states[-2]: relative error {error:.2e}")
    assert error < 1e-5, "the NumPy forward does not reproduce transformers"
    ids = prompts[0]["ids"] + prompts[1]["ids"]
    hidden = forward(w, cfg, ids, True)
    plain_long = forward(w, cfg, ids, False)
    print(f"{len(ids)} tokens, chunks of {CHUNK_SIZE - LOCAL_SIZE}: dual chunk differs from plain by "
          f"{np.linalg.norm(hidden - plain_long) / np.linalg.norm(plain_long):.2e} (relative)")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference.safetensors")
    save_file({"input_ids": np.asarray(ids, dtype=np.int64),
               "hidden_states_minus2": hidden.astype(np.float32)}, out)
    print("wrote", out)


if __name__ == "__main__":
    main()
