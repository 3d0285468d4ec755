#!/usr/bin/env python3
"""Torch SDPA yardsticks for the extend, dual chunk and MLA cases of
bench/cuda/paged_attention_cuda_bench.

Reads the cases the bench wrote (--json FILE: request lengths, heads, head size, causal or
encoder-only with a T5 bias, mmgen's times) and times torch on the same shapes in the same run:
  - padded: the ragged batch padded to its longest request, one SDPA call ([B, H, S, D]); causal
    cases with is_causal (flash and cuDNN kernels, GQA through enable_gqa), the encoder case with
    the T5 bias and the padding mask as one float attn_mask [B, H, S, S] (the memory-efficient
    kernel: the flash kernels take no additive mask), as SGLang's diffusion runtime runs T5;
  - per request: one SDPA call per request, no padding (the sum of the calls).
The dual chunk case runs as plain causal attention in torch (torch has no dual chunk attention; the
pairs are the same). The MLA cases time absorbed decode (mla_case).
TFLOP/s count the useful work only (unpadded, causal pairs), as the bench does. Prints a table,
then times a UMT5-XXL-sized encoder in torch eager bf16 on the bench's prompt batches (padded).
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
        if case.get("latent"):
            mla_case(case)
            continue
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


def mla_case(case):
    """Absorbed MLA decode in torch on the same shapes: one query per request and head, the
    latent rows [B, 1, S, 576] as K and their first 512 columns as V (the GQA form: one KV head),
    through SDPA (torch picks the kernel) and as the explicit product SGLang's torch_native MLA
    path computes."""
    B, S, H, d, dv = case["batch"], case["context"], case["q_heads"], case["head_dim"], case["v_dim"]
    q = torch.randn(B, H, 1, d, device="cuda", dtype=torch.bfloat16)
    latent = torch.randn(B, 1, S, d, device="cuda", dtype=torch.bfloat16)
    v = latent[..., :dv]
    scale = 192 ** -0.5
    rows = [(f"mmgen {name}", r["ms"]) for name, r in case["mmgen"].items()]
    fn = lambda: F.scaled_dot_product_attention(q, latent, v, scale=scale, enable_gqa=True)
    fn()
    rows.append(("torch SDPA (GQA form)", time_ms(fn)))

    def product():
        scores = (q.squeeze(2) @ latent.squeeze(1).transpose(1, 2)).float() * scale  # [B, H, S]
        return torch.softmax(scores, -1).to(torch.bfloat16) @ v.squeeze(1)
    rows.append(("torch matmul + softmax", time_ms(product)))
    print(f"{case['name']}: {B} x {S} tokens, {H} heads, latent {dv} + rope {d - dv}")
    best_mmgen = min(ms for name, ms in rows if name.startswith("mmgen"))
    for name, ms in rows:
        print(f"  {name:<48} {ms:8.3f} ms  {case['bytes'] / (ms * 1e-3) / 1e9:7.1f} GB/s  "
              f"({ms / best_mmgen:.2f}x mmgen's best)")


def t5_encoder_yardstick():
    """A UMT5-XXL-sized encoder in torch eager bf16 (random weights; the structure
    transformers runs: RMSNorm, q/k/v/o, T5 bias + padding as an additive mask, gated-GELU FFN),
    on padded batches: the two 512-token prompts and the 8 ragged prompts padded to 512."""
    d, heads, dk, ff, layers = 4096, 64, 64, 10240, 24
    g = torch.Generator(device="cuda").manual_seed(0)

    def weight(out, inp):
        return (torch.randn(out, inp, device="cuda", generator=g) * inp ** -0.5).to(torch.bfloat16)

    ws = [(weight(3 * heads * dk, d), weight(d, heads * dk), weight(2 * ff, d), weight(d, ff))
          for _ in range(layers)]

    def rms(x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)

    def encode(x, mask):
        B, S, _ = x.shape
        for qkv_w, o_w, wi_w, wo_w in ws:
            q, k, v = (rms(x) @ qkv_w.T).view(B, S, 3, heads, dk).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)
            x = x + a.transpose(1, 2).reshape(B, S, heads * dk) @ o_w.T
            gate, up = (rms(x) @ wi_w.T).chunk(2, dim=-1)
            x = x + (F.gelu(gate, approximate="tanh") * up) @ wo_w.T
        return rms(x)

    print("UMT5-XXL-sized encoder in torch eager bf16 (padded batches, SDPA with the bias mask)")
    for label, lengths in [("2 x 512 (prompt + negative, padded)", [512, 512]),
                           ("8 ragged prompts padded to 512", [512, 120, 37, 300, 512, 80, 226, 400])]:
        B, S = len(lengths), 512
        x = torch.randn(B, S, d, device="cuda", dtype=torch.bfloat16)
        mask = torch.randn(1, heads, S, S, device="cuda").repeat(B, 1, 1, 1)
        for i, n in enumerate(lengths):
            mask[i, :, :, n:] = float("-inf")
        mask = mask.to(torch.bfloat16)
        with torch.no_grad():
            ms = time_ms(lambda: encode(x, mask))
        print(f"  {label:<40} {B * S:5d} tokens: {ms:8.2f} ms")


if __name__ == "__main__":
    main()
    t5_encoder_yardstick()
