"""diffusers beside bench/lora_load_bench on the same machine: a Wan2.1-1.3B-sized
WanTransformer3DModel (random bf16 weights, on the CPU) loads the LoRA file lora_load_bench left
(load_lora_adapter: peft injects its layers and copies the matrices in) and fuses it into the
weights (fuse_lora), each timed once per repeat on a fresh model, median reported.

    python3 bench/lora_load_diffusers.py /tmp/mmgen_wan_1_3b_lora_r64.safetensors [repeats]
"""
import sys
import time

import torch
from diffusers import WanTransformer3DModel
from safetensors.torch import load_file

torch.set_grad_enabled(False)
path = sys.argv[1]
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
reads, loads, fuses = [], [], []
for _ in range(repeats):
    model = WanTransformer3DModel(num_attention_heads=12, attention_head_dim=128, ffn_dim=8960,
                                  num_layers=30, text_dim=4096, in_channels=16, out_channels=16)
    model = model.to(torch.bfloat16).eval()
    start = time.perf_counter()
    state = load_file(path)
    reads.append(time.perf_counter() - start)
    start = time.perf_counter()
    model.load_lora_adapter(state, prefix="transformer", adapter_name="a")
    loads.append(time.perf_counter() - start)
    start = time.perf_counter()
    model.fuse_lora(lora_scale=1.0)
    fuses.append(time.perf_counter() - start)
median = lambda values: sorted(values)[len(values) // 2]
print(f"diffusers {__import__('diffusers').__version__}, peft {__import__('peft').__version__}, torch "
      f"{torch.__version__}, {torch.get_num_threads()} threads: read {median(reads):.3f} s; "
      f"load_lora_adapter {median(loads):.3f} s; fuse_lora {median(fuses):.3f} s (median of {repeats})")
