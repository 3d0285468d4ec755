// Stand-ins for the OpenCV encoders in builds without OpenCV (the GPU machine has none): they say
// what to do instead of failing obscurely.
#ifndef MMGEN_HAVE_OPENCV
#include "core/error.h"
#include "pipeline/output.h"

namespace mmgen {

std::vector<uint8_t> encode_image(const Tensor&, const std::string& format) {
  fail("this mmgen was built without OpenCV and cannot write {}; use --output-format npy", format);
}

bool have_video_encoder() {
  return false;
}

void write_mp4(const std::vector<uint8_t>&, int64_t, int64_t, int64_t, double, const fs::path&) {
  fail("this mmgen was built without OpenCV and cannot write mp4; use --output-format npy");
}

}  // namespace mmgen
#endif
