"""diffusers beside bench/cuda/wan_lora_cuda_bench: a Wan2.1-1.3B-sized WanTransformer3DModel
(random bf16 weights) on the GPU at 480x832x81 with 512 text tokens, forward without a LoRA, with
the same LoRA file loaded through peft (unfused: its low-rank products in every forward) and after
fuse_lora (merged). Median seconds of repeats after a warm-up, as the C++ bench times them
(host to host: the latents go up and the prediction comes back).

    python3 bench/cuda/diffusers_wan_lora.py /tmp/mmgen_wan_1_3b_lora.safetensors [repeats]
"""
import sys
import time

import torch
from diffusers import WanTransformer3DModel
from safetensors.torch import load_file

torch.set_grad_enabled(False)
lora_path = sys.argv[1]
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
model = WanTransformer3DModel(num_attention_heads=12, attention_head_dim=128, ffn_dim=8960,
                              num_layers=30, text_dim=4096, in_channels=16, out_channels=16)
model = model.to("cuda", torch.bfloat16).eval()
generator = torch.Generator().manual_seed(101)
latents = torch.randn(1, 16, 21, 60, 104, generator=generator) * 1.7
text = torch.randn(1, 512, 4096, generator=generator) * 0.3


def forward(t):
    out = model(hidden_states=latents.to("cuda", torch.bfloat16), timestep=torch.tensor([t], device="cuda"),
                encoder_hidden_states=text.to("cuda", torch.bfloat16), return_dict=False)[0]
    return out.float().cpu()


def timed(label):
    forward(999.0)
    seconds = []
    for i in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        forward(999.0 - 10.0 * i)
        seconds.append(time.perf_counter() - start)
    seconds.sort()
    median = seconds[len(seconds) // 2]
    print(f"diffusers {label:<24} forward: median {median:.4f} s, min {seconds[0]:.4f} s, "
          f"max {seconds[-1]:.4f} s over {repeats} repeats", flush=True)
    return median


print("torch", torch.__version__, "diffusers", __import__("diffusers").__version__, "peft",
      __import__("peft").__version__, torch.cuda.get_device_name())
none = timed("no LoRA")
start = time.perf_counter()
model.load_lora_adapter(load_file(lora_path), prefix="transformer", adapter_name="a")
torch.cuda.synchronize()
print(f"diffusers load_lora_adapter: {time.perf_counter() - start:.3f} s")
unfused = timed("LoRA unfused")
start = time.perf_counter()
model.fuse_lora(lora_scale=1.0)
torch.cuda.synchronize()
print(f"diffusers fuse_lora: {time.perf_counter() - start:.3f} s")
fused = timed("LoRA fused")
print(f"diffusers unfused / none {unfused / none:.3f}; fused / none {fused / none:.3f}")
