"""torch's side of the CPU VAE figures in docs/performance-history.md: the same work as mmgen's timing tests,
float32, medians after a warm-up, on THREADS threads (default 2).

  python3 bench/vae_cpu_torch.py conv                 3x3 convolutions at the FLUX VAE decoder's shapes
                                                      (mmgen: MMGEN_CONV_BENCH=1 conv_cpu_test)
  python3 bench/vae_cpu_torch.py kl FOLDER HxW        AutoencoderKL decode of random latents [1, 16, H, W]
                                                      (mmgen: MMGEN_KL_BENCH=HxW MMGEN_KL_BENCH_VAE=FOLDER
                                                      autoencoder_kl_test)
  python3 bench/vae_cpu_torch.py wan FOLDER T,H,W     AutoencoderKLWan decode of wan_vae_bench's latents
                                                      (mmgen: wan_vae_bench FOLDER T,H,W); FOLDER is made
                                                      with diffusers' default config and random weights
                                                      when it does not exist

torch and diffusers are the person running it's; nothing in the build or the tests needs them."""
import math, os, statistics, sys, time

import torch

torch.set_num_threads(int(os.environ.get("THREADS", "2")))


def median_seconds(run, repeats):
    with torch.no_grad():
        run()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


mode = sys.argv[1] if len(sys.argv) > 1 else "conv"
if mode == "conv":
    for cin, cout, side in [(512, 512, 64), (256, 256, 256), (128, 128, 256)]:
        x = torch.randn(1, cin, side, side)
        conv = torch.nn.Conv2d(cin, cout, 3, padding=1)
        seconds = median_seconds(lambda: conv(x), 5)
        flops = 2.0 * side * side * cin * cout * 9
        print(f"torch conv {cin}->{cout} {side}x{side}: {seconds * 1e3:.1f} ms, {flops / seconds / 1e9:.0f} GFLOP/s")
elif mode == "kl":
    from diffusers import AutoencoderKL

    height, width = (int(v) for v in sys.argv[3].split("x"))
    vae = AutoencoderKL.from_pretrained(sys.argv[2], torch_dtype=torch.float32).eval()
    z = torch.rand(1, vae.config.latent_channels, height, width) * 2
    print(f"torch AutoencoderKL decode [1, {vae.config.latent_channels}, {height}, {width}], "
          f"{torch.get_num_threads()} threads: median of 5 {median_seconds(lambda: vae.decode(z), 5):.3f} s")
elif mode == "wan":
    from diffusers import AutoencoderKLWan

    folder = sys.argv[2]
    frames, height, width = (int(v) for v in sys.argv[3].split(","))
    if not os.path.exists(os.path.join(folder, "config.json")):
        torch.manual_seed(0)
        AutoencoderKLWan().save_pretrained(folder)
    vae = AutoencoderKLWan.from_pretrained(folder, torch_dtype=torch.float32).eval()
    n = 16 * frames * height * width  # wan_vae_bench's latents: sin(0.37 i)
    z = torch.sin(0.37 * torch.arange(n, dtype=torch.float64)).float().reshape(1, 16, frames, height, width)
    print(f"diffusers AutoencoderKLWan decode [1, 16, {frames}, {height}, {width}], {torch.get_num_threads()} "
          f"threads: median of 3 {median_seconds(lambda: vae.decode(z), 3):.3f} s")
else:
    sys.exit(__doc__)
