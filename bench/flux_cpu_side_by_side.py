"""FLUX on the CPU, mmgen beside diffusers on the same machine, request and weights: a FLUX-shaped
folder with random float32 weights (the real head size 128, the real FLUX VAE, 2 double- and
4 single-stream blocks of width 1024, CLIP-L-shaped and 2-layer T5 encoders of width 1024), one
256x256 image, 4 steps, guidance 3.5, 128 T5 tokens, both with THREADS threads. Prints each side's
denoise s/step and decode time (the median of REPEATS runs after a warm-up), their ratio, and the
largest pixel difference between the two images.
usage: python3 bench/flux_cpu_side_by_side.py MMGEN_BIN [WORK_DIR]   (torch, diffusers,
transformers; THREADS=2 REPEATS=3 by default)"""
import json, os, re, shutil, statistics, subprocess, sys, time

import numpy as np
import torch
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

mmgen, work = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "/tmp/flux-cpu")
threads, repeats = int(os.environ.get("THREADS", "2")), int(os.environ.get("REPEATS", "3"))
here = os.path.dirname(os.path.abspath(__file__))
tiny = os.path.join(here, "..", "tests", "fixtures", "flux-tiny", "model")
model = os.path.join(work, "model")
torch.set_num_threads(threads)
torch.manual_seed(0)
if not os.path.exists(os.path.join(model, "model_index.json")):
    os.makedirs(model, exist_ok=True)
    FluxTransformer2DModel(num_layers=2, num_single_layers=4, attention_head_dim=128, num_attention_heads=8,
                           joint_attention_dim=1024, pooled_projection_dim=768, guidance_embeds=True,
                           axes_dims_rope=(16, 56, 56)).save_pretrained(os.path.join(model, "transformer"))
    AutoencoderKL(in_channels=3, out_channels=3, latent_channels=16, block_out_channels=(128, 256, 512, 512),
                  down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                  layers_per_block=2, scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                  use_post_quant_conv=False).save_pretrained(os.path.join(model, "vae"))
    CLIPTextModel(CLIPTextConfig(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                 num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu",
                                 projection_dim=768, eos_token_id=2)).save_pretrained(
        os.path.join(model, "text_encoder"))
    T5EncoderModel(T5Config(vocab_size=32128, d_model=1024, d_kv=64, d_ff=2816, num_heads=16, num_layers=2,
                            feed_forward_proj="gated-gelu", tie_word_embeddings=False)).save_pretrained(
        os.path.join(model, "text_encoder_2"))
    FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                    base_image_seq_len=256, max_image_seq_len=4096).save_pretrained(
        os.path.join(model, "scheduler"))
    for name in ("tokenizer", "tokenizer_2", "model_index.json"):
        src = os.path.join(tiny, name)
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(model, name))

prompt, size, steps, length = "a red fox running through snow", 256, 4, 128
pipe = FluxPipeline.from_pretrained(model, torch_dtype=torch.float32)
pipe.set_progress_bar_config(disable=True)
def diffusers_run():
    marks = []
    def mark(p, i, t, k):
        marks.append(time.perf_counter()); return k
    start = time.perf_counter()
    image = pipe(prompt, height=size, width=size, num_inference_steps=steps, guidance_scale=3.5,
                 max_sequence_length=length, generator=torch.Generator("cpu").manual_seed(42),
                 output_type="np", callback_on_step_end=mark).images[0]
    end = time.perf_counter()
    return image, (marks[-1] - marks[0]) / (len(marks) - 1), end - marks[-1]
diffusers_run()
runs = [diffusers_run() for _ in range(repeats)]
theirs = runs[0][0]
their_step = statistics.median(r[1] for r in runs)
their_decode = statistics.median(r[2] for r in runs)

ours_step, ours_decode = [], []
for i in range(repeats + 1):
    out = os.path.join(work, "out")
    log = subprocess.run([mmgen, "generate", "--device", "cpu", "--threads", str(threads), "--model-path", model,
                          "--prompt", prompt, "--height", str(size), "--width", str(size), "--num-inference-steps",
                          str(steps), "--guidance-scale", "3.5", "--max-sequence-length", str(length), "--seed", "42",
                          "--output-format", "npy", "--output-file-name", "image", "--output-path", out, "--overwrite"],
                         capture_output=True, text=True, check=True).stderr
    if i == 0:
        continue  # warm-up (page cache)
    ours_step.append(float(re.search(r"denoise: \d+ steps in [0-9.]+ s, ([0-9.]+) s/step", log).group(1)))
    ours_decode.append(float(re.search(r"decode: ([0-9.]+) s", log).group(1)))
ours = np.load(os.path.join(work, "out", "image.npy")).reshape(theirs.shape)
result = {"threads": threads, "mmgen_s_per_step": statistics.median(ours_step),
          "diffusers_s_per_step": their_step, "mmgen_decode_s": statistics.median(ours_decode),
          "diffusers_decode_s": their_decode, "max_abs_diff": float(np.abs(ours - theirs).max())}
result["step_ratio"] = result["diffusers_s_per_step"] / result["mmgen_s_per_step"]
result["decode_ratio"] = result["diffusers_decode_s"] / result["mmgen_decode_s"]
print(json.dumps(result))
