"""diffusers' WanPipeline on the CPU (torch float32) beside `mmgen generate --device cpu` on one request,
at each thread count given: the same model folder, prompt, size, steps, guidance and seed; each tool
pinned to the first N cores (taskset) with N threads (torch.set_num_threads / OMP_NUM_THREADS).
Prints, per thread count, the denoise and decode seconds of both (best of REPEATS runs each), their
ratio (mmgen / diffusers: below 1 is faster) and how far mmgen's picture is from diffusers'.
diffusers' denoise is the time from the call to the last step's callback (it includes the prompt
encoding, a few ms for wan-shapes); mmgen's is its log's denoise stage.
usage: python3 bench/wan_cpu_side_by_side.py MMGEN_BIN MODEL_DIR [THREADS...]
  environment: SIZE=128x128 STEPS=20 GUIDANCE=4 MAXSEQ=32 REPEATS=2 SEED=1 WARMUP=1 (0: no untimed
               diffusers run first; for the big requests)
               PROMPT="a red circle on a blue background" NEGATIVE=""
               MMGEN_ARGS="--cpu-matmul-precision bf16" (more mmgen options, split at spaces)
               TORCH_DTYPE=bfloat16 (diffusers' transformer and text encoder in bf16, the VAE in
               float32 as diffusers' Wan examples load it; default float32)
  (needs torch, diffusers, accelerate; never a test dependency)"""
import json, os, re, subprocess, sys, tempfile, time

import numpy as np
import torch
from diffusers import WanPipeline

mmgen, model = sys.argv[1], sys.argv[2]
threads = [int(t) for t in sys.argv[3:]] or [1, 2]
height, width = (int(v) for v in os.environ.get("SIZE", "128x128").split("x"))
steps = int(os.environ.get("STEPS", "20"))
guidance = float(os.environ.get("GUIDANCE", "4"))
maxseq = int(os.environ.get("MAXSEQ", "32"))
repeats = int(os.environ.get("REPEATS", "2"))
prompt = os.environ.get("PROMPT", "a red circle on a blue background")
negative = os.environ.get("NEGATIVE", "")
seed = int(os.environ.get("SEED", "1"))
warmup = os.environ.get("WARMUP", "1") != "0"
cores = os.sched_getaffinity(0)

mmgen_args = os.environ.get("MMGEN_ARGS", "").split()
torch_dtype = getattr(torch, os.environ.get("TORCH_DTYPE", "float32"))
if torch_dtype == torch.float32:
    pipe = WanPipeline.from_pretrained(model, torch_dtype=torch.float32)
else:
    from diffusers import AutoencoderKLWan
    vae = AutoencoderKLWan.from_pretrained(model, subfolder="vae", torch_dtype=torch.float32)
    pipe = WanPipeline.from_pretrained(model, vae=vae, torch_dtype=torch_dtype)
pipe.set_progress_bar_config(disable=True)
request = dict(prompt=prompt, negative_prompt=negative, height=height, width=width, num_frames=1,
               num_inference_steps=steps, guidance_scale=guidance, max_sequence_length=maxseq)


def diffusers_run():
    marks = []

    def mark(pipeline, i, t, kwargs):
        marks.append(time.perf_counter())
        return kwargs

    start = time.perf_counter()
    out = pipe(**request, generator=torch.Generator("cpu").manual_seed(seed), output_type="np",
               callback_on_step_end=mark)
    end = time.perf_counter()
    return dict(denoise=marks[-1] - start, decode=end - marks[-1]), out.frames[0]


rows = []
with tempfile.TemporaryDirectory() as folder:
    for n in threads:
        pinned = sorted(cores)[:n]
        os.sched_setaffinity(0, pinned)
        torch.set_num_threads(n)
        if warmup:
            diffusers_run()  # warm-up
        runs = [diffusers_run() for _ in range(repeats)]
        theirs = min((r[0] for r in runs), key=lambda r: r["denoise"])
        reference = runs[-1][1].astype(np.float32)
        ours = []
        for _ in range(repeats):
            command = [mmgen, "generate", "--device", "cpu", "--model-path", model, "--prompt", prompt,
                       "--negative-prompt", negative, "--height", str(height), "--width", str(width),
                       "--num-frames", "1", "--num-inference-steps", str(steps), "--guidance-scale",
                       str(guidance), "--max-sequence-length", str(maxseq), "--seed", str(seed),
                       "--output-format", "npy", "--output-path", folder, "--output-file-name",
                       "side.npy", "--overwrite"] + mmgen_args
            env = dict(os.environ, OMP_NUM_THREADS=str(n))
            log = subprocess.run(["taskset", "-c", ",".join(map(str, pinned))] + command, env=env,
                                 capture_output=True, text=True, check=True).stderr
            denoise = re.search(r"denoise: \d+ steps in ([\d.]+) s", log)
            decode = re.search(r"decode: ([\d.]+) s", log)
            ours.append(dict(denoise=float(denoise.group(1)), decode=float(decode.group(1))))
        best = min(ours, key=lambda r: r["denoise"])
        picture = np.load(os.path.join(folder, "side.npy")).astype(np.float32).reshape(reference.shape)
        error = float(np.linalg.norm(picture - reference) / np.linalg.norm(reference))
        rows.append(dict(threads=n, diffusers=theirs, mmgen=best,
                         denoise_ratio=best["denoise"] / theirs["denoise"],
                         decode_ratio=best["decode"] / theirs["decode"], relative_error=error))
        print("wan-cpu-side", json.dumps(rows[-1]), flush=True)

print(f"\n{height}x{width}, {steps} steps, guidance {guidance}, {model}")
print("| threads | diffusers denoise | mmgen denoise | mmgen / diffusers | diffusers decode | mmgen decode "
      "| mmgen / diffusers | relative error |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['threads']} | {r['diffusers']['denoise']:.3f} s | {r['mmgen']['denoise']:.2f} s | "
          f"{r['denoise_ratio']:.2f} | {r['diffusers']['decode']:.3f} s | {r['mmgen']['decode']:.2f} s | "
          f"{r['decode_ratio']:.2f} | {r['relative_error']:.1e} |")
