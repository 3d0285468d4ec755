#!/usr/bin/env python3
"""Torch SDPA yardsticks for the ragged extend cases of bench/cuda/paged_attention_cuda_bench.

Reads the cases the bench wrote (--json FILE: request lengths, heads, head size, causal or
encoder-only with a T5 bias, mmgen's times) and times torch on the same shapes in the same run:
  - padded: the ragged batch padded to its longest request, one SDPA call ([B, H, S, D]); causal
    cases with is_causal (flash and cuDNN kernels, GQA through enable_gqa), the encoder case with
    the T5 bias and the padding mask as one float attn_mask [B, H, S, S] (the memory-efficient
    kernel: the flash kernels take no additive mask), as SGLang's diffusion runtime runs T5;
  - per request: one SDPA call per request, no padding (the sum of the calls).
TFLOP/s count the useful work only (unpadded, causal pairs), as the bench does. Prints a table.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench


def time_ms(fn):
    return do_bench(fn, warmup=10, rep=50, return_mode="median")


def main():
    cases = json.load(open(sys.argv[1]))
    torch.manual_seed(0)
    for case in cases:
        lengths, hq, hkv, d = case["lengths"], case["q_heads"], case["kv_heads"], case["head_dim"]
        causal, flops = case["causal"], case["flops"]
        B, S = len(lengths), max(lengths)
        q = torch.randn(B, hq, S, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, hkv, S, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, hkv, S, d, device="cuda", dtype=torch.bfloat16)
        rows = []
        for backend, ms in case["mmgen"].items():
            rows.append((f"mmgen {backend}", ms["ms"]))
        if causal:
            for name, kernel in [("flash", SDPBackend.FLASH_ATTENTION),
                                 ("cuDNN", SDPBackend.CUDNN_ATTENTION)]:
                try:
                    with sdpa_kernel(kernel):
                        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                    enable_gqa=hkv != hq)
                        fn()
                        rows.append((f"torch SDPA {name}, padded", time_ms(fn)))
                except RuntimeError as error:
                    rows.append((f"torch SDPA {name}, padded: unavailable ({str(error)[:60]})", None))
            pieces = [(q[i:i + 1, :, :n], k[i:i + 1, :, :n], v[i:i + 1, :, :n])
                      for i, n in enumerate(lengths)]
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                def per_request():
                    for a, b, c in pieces:
                        F.scaled_dot_product_attention(a, b, c, is_causal=True,
                                                       enable_gqa=hkv != hq)
                rows.append(("torch SDPA flash, per request", time_ms(per_request)))
        else:
            offsets = torch.arange(S, device="cuda")
            rel = offsets[None, :] - offsets[:, None]
            table = torch.randn(hq, 2 * S - 1, device="cuda")
            bias = table[:, rel + S - 1]  # [H, S, S]
            mask = bias[None].repeat(B, 1, 1, 1)
            for i, n in enumerate(lengths):
                mask[i, :, :, n:] = float("-inf")
            mask = mask.to(torch.bfloat16)
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                fn = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)
                fn()
                rows.append(("torch SDPA efficient + bias mask, padded", time_ms(fn)))
                pieces = [(q[i:i + 1, :, :n], k[i:i + 1, :, :n], v[i:i + 1, :, :n],
                           bias[None, :, :n, :n].to(torch.bfloat16).contiguous())
                          for i, n in enumerate(lengths)]

                def per_request():
                    for a, b, c, m in pieces:
                        F.scaled_dot_product_attention(a, b, c, attn_mask=m, scale=1.0)
                rows.append(("torch SDPA efficient + bias mask, per request", time_ms(per_request)))
        print(f"{case['name']}: lengths {lengths}, {hq}/{hkv} heads x {d}")
        best_mmgen = min(ms for name, ms in rows if name.startswith("mmgen") and ms)
        for name, ms in rows:
            if ms is None:
                print(f"  {name}")
                continue
            print(f"  {name:<48} {ms:8.3f} ms  {flops / (ms * 1e-3) / 1e12:6.1f} TFLOP/s  "
                  f"({ms / best_mmgen:.2f}x mmgen's best)")


if __name__ == "__main__":
    main()
