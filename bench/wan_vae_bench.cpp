// Seconds per Wan VAE decode on the CPU, per latent frame and in total, for a VAE folder.
//
//   wan_vae_bench VAE_FOLDER [T,H,W]     (latent frames and size; default 3,60,104 = 9 frames
//   480x832)
//
// Without a real Wan2.1 VAE at hand, a folder with diffusers' default AutoencoderKLWan config and
// random weights gives the same timing (the cost depends on shapes only).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "models/vae/wan_vae_decoder.h"

int main(int argc, char** argv) {
  using namespace mmgen;
  if (argc < 2) {
    std::fprintf(stderr, "usage: wan_vae_bench VAE_FOLDER [T,H,W]\n");
    return 2;
  }
  try {
    Shape shape = {1, 16, 3, 60, 104};
    if (argc > 2 && std::sscanf(argv[2], "%ld,%ld,%ld", &shape[2], &shape[3], &shape[4]) != 3)
      fail("latent size '{}' is not T,H,W", argv[2]);
    const vae::WanVaeDecoder decoder = vae::WanVaeDecoder::open_folder(argv[1]);
    Tensor z = Tensor::empty(shape);
    float* p = z.data<float>();
    for (int64_t i = 0; i < z.numel(); ++i) p[i] = float(std::sin(0.37 * double(i)));
    auto seconds_since = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    };
    const auto start = std::chrono::steady_clock::now();
    auto last = start;
    const Tensor video = decoder.decode(z, [&](int done, int total) {
      std::printf("  latent frame %d/%d: %.2f s\n", done, total, seconds_since(last));
      last = std::chrono::steady_clock::now();
    });
    std::printf("decode %s -> %s in %.2f s\n", shape_string(shape).c_str(),
                shape_string(video.shape()).c_str(), seconds_since(start));
  } catch (const Error& e) {
    std::fprintf(stderr, "wan_vae_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
