"""torch's CPU linear at the shapes bench/linear_bench.cpp times, same thread count: float32, and
bfloat16 (input, weight and bias in bf16, as a model loaded with torch_dtype=torch.bfloat16 runs;
beside mmgen's --cpu-matmul-precision bf16).

    OMP_NUM_THREADS=N python3 bench/linear_torch.py [repeats]
"""
import os
import sys
import time

import torch

SHAPES = [
    ("1.3B q/k/v/o (1560 tokens)", 1560, 1536, 1536),
    ("1.3B ffn up", 1560, 1536, 8960),
    ("1.3B ffn down", 1560, 8960, 1536),
    ("1.3B cross k/v (512 text)", 512, 1536, 1536),
    ("1.3B text embed", 512, 4096, 1536),
    ("1.3B time proj (1 row)", 1, 1536, 9216),
    ("wan-shapes q/k/v/o", 64, 128, 128),
    ("wan-shapes ffn up", 64, 128, 512),
    ("wan-shapes ffn down", 64, 512, 128),
]


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, median of {repeats}")
    for what, m, k, n in SHAPES:
        a = torch.rand(m, k) * 2 - 1
        w = torch.rand(n, k) * 2 - 1
        b = torch.rand(n)
        figures = []
        for dtype in (torch.float32, torch.bfloat16):
            x, y, z = a.to(dtype), w.to(dtype), b.to(dtype)
            with torch.no_grad():
                torch.nn.functional.linear(x, y, z)
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    torch.nn.functional.linear(x, y, z)
                    times.append(time.perf_counter() - start)
            t = sorted(times)[len(times) // 2]
            figures.append(f"{t:10.6f} {2 * m * k * n / t / 1e9:8.1f} GFLOP/s")
        print(f"{what:30s} f32 {figures[0]}   bf16 {figures[1]}")


if __name__ == "__main__":
    main()
