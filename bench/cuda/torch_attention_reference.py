#!/usr/bin/env python3
"""Checks and yardsticks for bench/cuda/flash_attention_cuda_bench, run on the GPU machine.

Reads what the bench dumped (q, k, v, the dense and block-sparse outputs, the block lists), then
1. checks mmgen's outputs on 1024 sampled query rows against a float32 reference computed with
   torch from the same bf16 inputs (the sparse one under the token mask its block lists define),
   and the whole dense output against torch SDPA's flash kernel;
2. times mmgen's dense kernel (through libmmgen_attention.so, on torch's tensors) interleaved with
   torch SDPA's flash and cuDNN kernels at the same shape: 5 rounds, each kernel timed by triton's
   do_bench (median) in every round, the median of the rounds reported, so clock drift on a
   shared GPU hits all three alike.
Prints a table and writes gpu_attention.json to the folder given as the second argument.
"""
import ctypes
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench


def load_bf16(path, shape):
    raw = torch.from_file(path, size=math.prod(shape), dtype=torch.int16)
    return raw.view(torch.bfloat16).reshape(shape).cuda()


def relative_error(actual, expected):
    actual, expected = actual.double(), expected.double()
    return ((actual - expected).norm() / expected.norm()).item()


def main():
    dump, out_dir = sys.argv[1], sys.argv[2]
    meta = json.load(open(os.path.join(dump, "meta.json")))
    B, H, S, D = meta["batch"], meta["heads"], meta["seq"], meta["head_dim"]
    BM, BN = meta["block_m"], meta["block_n"]
    shape = (B, S, H, D)
    q, k, v = (load_bf16(os.path.join(dump, n + ".bf16"), shape) for n in ("q", "k", "v"))
    out_dense = load_bf16(os.path.join(dump, "out_dense.bf16"), shape)
    out_sparse = load_bf16(os.path.join(dump, "out_sparse.bf16"), shape)
    offsets = torch.from_file(os.path.join(dump, "block_offsets.i32"),
                              size=B * H * math.ceil(S / BM) + 1, dtype=torch.int32)
    indices = torch.from_file(os.path.join(dump, "block_indices.i32"),
                              size=int(offsets[-1]), dtype=torch.int32)
    scale = 1.0 / math.sqrt(D)
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, S, D]

    generator = torch.Generator(device="cpu").manual_seed(0)
    rows = torch.randperm(S, generator=generator)[:1024].sort().values.cuda()
    scores = (qh[:, :, rows].float() @ kh.float().transpose(-1, -2)) * scale  # [B, H, R, S]
    reference_dense = torch.softmax(scores, -1) @ vh.float()
    error_dense_rows = relative_error(out_dense.transpose(1, 2)[:, :, rows], reference_dense)

    q_blocks = math.ceil(S / BM)
    k_blocks = math.ceil(S / BN)
    block_mask = torch.zeros(B * H * q_blocks, k_blocks, dtype=torch.bool)
    counts = (offsets[1:] - offsets[:-1]).long()
    owner = torch.repeat_interleave(torch.arange(B * H * q_blocks), counts)
    block_mask[owner, indices.long()] = True
    block_mask = block_mask.view(B, H, q_blocks, k_blocks).cuda()
    token_mask = block_mask[:, :, rows // BM].repeat_interleave(BN, dim=-1)[..., :S]
    masked = scores.masked_fill(~token_mask, float("-inf"))
    reference_sparse = torch.nan_to_num(torch.softmax(masked, -1)) @ vh.float()
    error_sparse_rows = relative_error(out_sparse.transpose(1, 2)[:, :, rows], reference_sparse)
    del scores, masked

    library = ctypes.CDLL(sys.argv[3])
    library.mmgen_flash_attention.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 5 + [
        ctypes.c_float, ctypes.c_int, ctypes.c_void_p]
    ours = torch.empty_like(q)

    def run_mmgen():
        status = library.mmgen_flash_attention(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), ours.data_ptr(), B, S, S, H, D, scale, 0,
            torch.cuda.current_stream().cuda_stream)
        assert status == 0

    run_mmgen()
    torch.cuda.synchronize()
    error_vs_dump = relative_error(ours, out_dense)  # same kernel, same inputs: must be ~0

    kernels = {"mmgen fa (this run, interleaved)": (None, run_mmgen)}
    for name, backend in (("torch SDPA flash", SDPBackend.FLASH_ATTENTION),
                          ("torch SDPA cuDNN", SDPBackend.CUDNN_ATTENTION)):
        def run(backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(qh, kh, vh, scale=scale)
        try:
            result = run()
            kernels[name] = (backend, run)
            if backend == SDPBackend.FLASH_ATTENTION:
                error_vs_flash = relative_error(out_dense.transpose(1, 2), result)
        except RuntimeError as error:  # a backend this torch build or GPU lacks
            print(f"{name}: not available ({str(error).splitlines()[0]})")
    rounds = {name: [] for name in kernels}
    for _ in range(5):
        for name, (_, run) in kernels.items():
            rounds[name].append(do_bench(run, warmup=100, rep=500, return_mode="median"))
    timings = {name: sorted(values)[len(values) // 2] for name, values in rounds.items()}

    # Wan's cross-attention shape: the same queries over the first 512 keys (text tokens).
    cross_keys = 512
    k_cross, v_cross = k[:, :cross_keys].contiguous(), v[:, :cross_keys].contiguous()
    kh_cross, vh_cross = kh[:, :, :cross_keys].contiguous(), vh[:, :, :cross_keys].contiguous()
    cross_out = torch.empty_like(q)

    def run_mmgen_cross():
        status = library.mmgen_flash_attention(
            q.data_ptr(), k_cross.data_ptr(), v_cross.data_ptr(), cross_out.data_ptr(), B, S,
            cross_keys, H, D, scale, 0, torch.cuda.current_stream().cuda_stream)
        assert status == 0

    def run_cudnn_cross():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(qh, kh_cross, vh_cross, scale=scale)
    cross_kernels = {"mmgen fa, 512 keys": run_mmgen_cross}
    try:
        run_cudnn_cross()
        cross_kernels["torch SDPA cuDNN, 512 keys"] = run_cudnn_cross
    except RuntimeError as error:
        print(f"cuDNN cross-attention: not available ({str(error).splitlines()[0]})")
    cross_rounds = {name: [] for name in cross_kernels}
    for _ in range(5):
        for name, run in cross_kernels.items():
            cross_rounds[name].append(do_bench(run, warmup=50, rep=200, return_mode="median"))

    flops = 4.0 * B * H * S * S * D
    print(f"\ncheck: dense vs float32 reference on 1024 rows: relative error {error_dense_rows:.2e}")
    print(f"check: dense vs torch SDPA flash (all rows):      relative error {error_vs_flash:.2e}")
    print(f"check: block-sparse vs masked float32 reference:  relative error {error_sparse_rows:.2e}")
    print(f"check: mmgen via the C entry point vs the bench's dump: relative error {error_vs_dump:.1e}")
    ok = (error_dense_rows < 1e-2 and error_vs_flash < 1e-2 and error_sparse_rows < 1e-2
          and error_vs_dump < 1e-6)
    print(f"{meta['device']}: B={B} H={H} S={S} D={D}")
    print(f"{'kernel (5 interleaved rounds)':34s} {'ms':>9s} {'TFLOP/s':>9s}")
    for name, ms in timings.items():
        spread = ", ".join(f"{flops / t * 1e-9:.0f}" for t in rounds[name])
        print(f"{name:34s} {ms:9.3f} {flops / ms * 1e-9:9.1f}   rounds: {spread}")
    cross_flops = 4.0 * B * H * S * cross_keys * D
    for name, values in cross_rounds.items():
        ms = sorted(values)[len(values) // 2]
        print(f"{name:34s} {ms:9.3f} {cross_flops / ms * 1e-9:9.1f}   (cross-attention shape)")
    print("mmgen bench (its own process, before the rounds above):")
    for r in meta["results"]:
        if r["head_dim"] == D:
            tf = r.get("tflops", r.get("tflops_kept"))
            print(f"{'mmgen ' + r['case']:34s} {r['ms']:9.3f} {tf:9.1f}"
                  + (f"  (kept blocks; density {r['density']:.3f}, {r['speedup_vs_dense']:.1f}x vs dense)"
                     if "speedup_vs_dense" in r else ""))
    json.dump({"errors": {"dense_rows": error_dense_rows, "dense_vs_flash": error_vs_flash,
                          "sparse_rows": error_sparse_rows},
               "interleaved_ms": timings, "rounds_ms": rounds, "mmgen": meta["results"],
               "device": meta["device"]},
              open(os.path.join(out_dir, "gpu_attention.json"), "w"), indent=2)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
