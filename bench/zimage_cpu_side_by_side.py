"""diffusers' ZImageTransformer2DModel on the CPU beside bench/zimage_transformer_bench, same shapes:
Z-Image-Turbo's block sizes (dim 3840, 30 heads of 128, SwiGLU 10240, cap_feat_dim 2560) with a few
layers (all 30 only multiply the time), a 512x512 image (1024 tokens) and a 128-token caption, float32
(diffusers' CPU default), random weights. Prints seconds per forward (min of repeats) per thread count.
usage: python3 bench/zimage_cpu_side_by_side.py MMGEN_BENCH [THREADS...]   (needs torch, diffusers)"""
import os, subprocess, sys, time
import torch
from diffusers import ZImageTransformer2DModel

bench = sys.argv[1]
threads = [int(t) for t in sys.argv[2:]] or [1, 2]
layers, refiners, size, caption = 2, 1, 512, 128
torch.manual_seed(0)
model = ZImageTransformer2DModel(n_layers=layers, n_refiner_layers=refiners).eval()
x = [torch.randn(16, 1, size // 8, size // 8)]
cap = [torch.randn(caption, 2560)]
t = torch.tensor([0.5])
for n in threads:
    torch.set_num_threads(n)
    seconds = []
    with torch.inference_mode():
        for _ in range(3):
            start = time.perf_counter()
            model(x, t, cap, return_dict=False)
            seconds.append(time.perf_counter() - start)
    env = dict(os.environ, OMP_NUM_THREADS=str(n))
    out = subprocess.run([bench, "--layers", str(layers), "--refiners", str(refiners), "--size",
                          str(size), "--caption", str(caption), "--repeats", "3"],
                         env=env, capture_output=True, text=True, check=True).stdout
    ours = float([l for l in out.splitlines() if l.startswith("min ")][0].split()[1])
    print(f"threads {n}: diffusers {min(seconds):.2f} s, mmgen {ours:.2f} s per forward "
          f"(mmgen/diffusers {ours / min(seconds):.2f})", flush=True)
