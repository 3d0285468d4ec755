"""Where the denoising time goes, op by op, in diffusers (torch.profiler) and in mmgen
(MMGEN_OP_PROFILE=1) on the same request, model folder and thread count, pinned to the first N cores.
Prints torch's ops by self CPU time and mmgen's profile table; compare the products (aten::addmm /
aten::linear against `linear`), attention (scaled_dot_product_attention against `attention: *`)
and the passes around them.
usage: python3 bench/wan_cpu_op_profile.py MMGEN_BIN MODEL_DIR THREADS [diffusers|mmgen|both]
  environment as bench/wan_cpu_side_by_side.py (SIZE, STEPS, GUIDANCE, MAXSEQ, SEED, PROMPT,
  NEGATIVE); TOP=25 torch rows
  (needs torch and diffusers for the diffusers half; never a test dependency)"""
import os, subprocess, sys, tempfile

mmgen, model, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
which = sys.argv[4] if len(sys.argv) > 4 else "both"
height, width = (int(v) for v in os.environ.get("SIZE", "128x128").split("x"))
steps = int(os.environ.get("STEPS", "20"))
guidance = float(os.environ.get("GUIDANCE", "4"))
maxseq = int(os.environ.get("MAXSEQ", "32"))
prompt = os.environ.get("PROMPT", "a red circle on a blue background")
negative = os.environ.get("NEGATIVE", "")
seed = int(os.environ.get("SEED", "1"))
pinned = sorted(os.sched_getaffinity(0))[:threads]
os.sched_setaffinity(0, pinned)

if which in ("diffusers", "both"):
    import torch
    from diffusers import WanPipeline
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(threads)
    pipe = WanPipeline.from_pretrained(model, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    embeds = pipe.encode_prompt(prompt=prompt, negative_prompt=negative,
                                do_classifier_free_guidance=guidance > 1,
                                max_sequence_length=maxseq)
    request = dict(prompt_embeds=embeds[0], negative_prompt_embeds=embeds[1], height=height,
                   width=width, num_frames=1, num_inference_steps=steps, guidance_scale=guidance,
                   output_type="latent")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        pipe(**request, generator=torch.Generator("cpu").manual_seed(seed))
    print(f"diffusers denoise, {threads} threads, {steps} steps (torch.profiler, self CPU time):")
    print(prof.key_averages().table(sort_by="self_cpu_time_total",
                                    row_limit=int(os.environ.get("TOP", "25"))))

if which in ("mmgen", "both"):
    with tempfile.TemporaryDirectory() as folder:
        command = ["taskset", "-c", ",".join(map(str, pinned)), mmgen, "generate", "--device", "cpu",
                   "--model-path", model, "--prompt", prompt, "--negative-prompt", negative,
                   "--height", str(height), "--width", str(width), "--num-frames", "1",
                   "--num-inference-steps", str(steps), "--guidance-scale", str(guidance),
                   "--max-sequence-length", str(maxseq), "--seed", str(seed), "--output-format",
                   "npy", "--output-path", folder]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MMGEN_OP_PROFILE="1")
        log = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stderr
        print(f"mmgen, {threads} threads, {steps} steps (MMGEN_OP_PROFILE, the whole run):")
        print("\n".join(l for l in log.splitlines() if "info denoise" in l or "info decode" in l
                        or not l.startswith("[")))
