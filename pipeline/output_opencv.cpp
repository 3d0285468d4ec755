// The OpenCV encoders behind pipeline/output.h (left out of builds with -DMMGEN_OPENCV=OFF, where
// output_no_opencv.cpp answers instead).
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/videoio.hpp>

#include "core/error.h"
#include "pipeline/output.h"

namespace mmgen {

std::vector<uint8_t> encode_image(const Tensor& frame_u8_hwc, const std::string& format) {
  const int height = int(frame_u8_hwc.size(0)), width = int(frame_u8_hwc.size(1));
  cv::Mat rgb(height, width, CV_8UC3, const_cast<std::byte*>(frame_u8_hwc.raw()));
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  std::vector<uint8_t> bytes;
  std::vector<int> params;
  if (format == "jpg") params = {cv::IMWRITE_JPEG_QUALITY, 95};
  if (format == "webp") params = {cv::IMWRITE_WEBP_QUALITY, 95};
  check(cv::imencode("." + format, bgr, bytes, params), "OpenCV could not encode a {} image",
        format);
  return bytes;
}

bool have_video_encoder() {
  return true;
}

void write_mp4(const std::vector<uint8_t>& rgb, int64_t frames, int64_t height, int64_t width,
               double fps, const fs::path& path) {
  const cv::Size size{static_cast<int>(width), static_cast<int>(height)};
  cv::VideoWriter writer;
  // H.264 plays everywhere; MPEG-4 part 2 is the fallback when the FFmpeg build lacks an H.264
  // encoder.
  for (const char* codec : {"avc1", "mp4v"}) {
    writer.open(path.string(), cv::CAP_FFMPEG,
                cv::VideoWriter::fourcc(codec[0], codec[1], codec[2], codec[3]), fps, size);
    if (writer.isOpened()) break;
  }
  check(writer.isOpened(),
        "cannot open an MP4 writer for {} (OpenCV without FFmpeg?); use --output-format npy",
        path.string());
  const size_t frame_bytes = size_t(height * width * 3);
  for (int64_t f = 0; f < frames; ++f) {
    cv::Mat frame(size, CV_8UC3, const_cast<uint8_t*>(rgb.data() + size_t(f) * frame_bytes));
    cv::Mat bgr;
    cv::cvtColor(frame, bgr, cv::COLOR_RGB2BGR);
    writer.write(bgr);
  }
  writer.release();
}

}  // namespace mmgen
