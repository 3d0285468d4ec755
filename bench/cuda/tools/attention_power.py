#!/usr/bin/env python3
"""What limits the dense attention kernel's figure: its time beside cuDNN's with the GPU's SM
clock and board power sampled while each runs (nvidia-smi every 100 ms).

    python3 bench/cuda/tools/attention_power.py build-cuda/bench/cuda/libmmgen_attention.so [more.so]

Each library (the C API of bench/cuda/attention_c_api.cpp; several builds of the kernel may be
compared, each with its own soname) and torch SDPA's cuDNN kernel runs 200 calls at Wan2.1-1.3B's
self-attention shape with both guidance branches (2 x 12 heads x 32760 tokens x 128), two rounds
in turn. The clock and power printed are the medians of the samples after the first quarter.
On a power-capped GPU (an H200 draws its 700 W limit here) the kernel's rate is its tensor-pipe
utilisation times the clock the power allows, so fewer instructions per score can pay even
where the issue slots are not the limit.
"""
import ctypes
import math
import os
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, S, D = 2, 12, 32760, 128


def main():
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(D)
    runs = {}
    for path in sys.argv[1:]:
        library = ctypes.CDLL(os.path.abspath(path))
        library.mmgen_flash_attention.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 5 + [
            ctypes.c_float, ctypes.c_int, ctypes.c_void_p]

        def run(library=library):
            status = library.mmgen_flash_attention(
                q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), B, S, S, H, D, scale, 0,
                torch.cuda.current_stream().cuda_stream)
            assert status == 0
        runs[os.path.basename(path)] = run

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(qh, kh, vh, scale=scale)
    runs["torch SDPA cuDNN"] = cudnn

    calls = 200
    for round_index in range(2):
        for name, run in runs.items():
            for _ in range(20):
                run()
            torch.cuda.synchronize()
            sampler = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                 "--format=csv,noheader,nounits", "-lms", "100"], stdout=subprocess.PIPE, text=True)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                run()
            end.record()
            torch.cuda.synchronize()
            sampler.terminate()
            samples = [[float(x) for x in line.split(",")]
                       for line in sampler.communicate()[0].splitlines() if line.count(",") == 2]
            samples = samples[len(samples) // 4:]
            ms = start.elapsed_time(end) / calls
            print(f"round {round_index} {name:24s} {ms:7.3f} ms {4 * B * H * S * S * D / ms / 1e9:6.1f} "
                  f"TFLOP/s  SM clock {statistics.median(s[0] for s in samples):.0f} MHz  "
                  f"power {statistics.median(s[1] for s in samples):.0f} W  "
                  f"{max(s[2] for s in samples):.0f} C  ({len(samples)} samples)", flush=True)


if __name__ == "__main__":
    main()
