#include "pipeline/output.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"
#include "core/npy.h"
#include "pipeline/mp4_check.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

Tensor gradient_frames(int64_t frames, int64_t height, int64_t width) {
  Tensor t = Tensor::empty({frames, height, width, 3});
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(i % 97) / 96.0f;
  return t;
}

std::vector<uint8_t> slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

TEST(Output, ConversionRoundsForImagesAndTruncatesForVideo) {
  Tensor t = Tensor::from_vector({1, 1, 1, 3}, std::vector<float>{0.999f, 0.5f, 1.5f});
  EXPECT_EQ(frames_to_u8(t, true), (std::vector<uint8_t>{255, 128, 255}));
  EXPECT_EQ(frames_to_u8(t, false), (std::vector<uint8_t>{254, 127, 255}));
}

TEST(Output, PngCarriesTheSettingsAndDecodesBack) {
  fs::path dir = testing::scratch_dir("png");
  nlohmann::json settings = {{"prompt", "ein Fuchs im Schnee ❄"}, {"seed", 42}};
  auto written = write_frames(gradient_frames(1, 16, 24), "png", dir / "x.png", settings, 16);
  ASSERT_EQ(written.size(), 1u);
  std::vector<uint8_t> bytes = slurp(dir / "x.png");
  EXPECT_EQ(nlohmann::json::parse(png_text(bytes, "parameters")), settings);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()),
            1);  // no temporary left
}

TEST(Output, Mp4AndItsJsonSidecar) {
  fs::path dir = testing::scratch_dir("mp4");
  auto written = write_frames(gradient_frames(5, 32, 48), "mp4", dir / "v.mp4", {{"seed", 1}}, 16);
  ASSERT_EQ(written.size(), 2u);
  EXPECT_GT(fs::file_size(dir / "v.mp4"), 100u);
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "v.mp4.json"))["seed"], 1);
}

TEST(Output, AnMp4CutShortIsToldApartFromAWholeOne) {
  fs::path dir = testing::scratch_dir("mp4-cut");
  write_frames(gradient_frames(5, 32, 48), "mp4", dir / "v.mp4", {}, 16);
  EXPECT_TRUE(mp4_is_complete(dir / "v.mp4"));
  const std::vector<uint8_t> bytes = slurp(dir / "v.mp4");
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t(8), size_t(0)}) {
    std::ofstream(dir / "cut.mp4", std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(keep));
    EXPECT_FALSE(mp4_is_complete(dir / "cut.mp4")) << keep << " of " << bytes.size() << " bytes";
  }
  EXPECT_FALSE(mp4_is_complete(dir / "missing.mp4"));
}

TEST(Output, NpyIsExact) {
  fs::path dir = testing::scratch_dir("npy-out");
  Tensor frames = gradient_frames(2, 4, 6);
  write_frames(frames, "npy", dir / "f.npy", {}, 16);
  EXPECT_EQ(testing::max_abs_diff(read_npy(dir / "f.npy"), frames), 0.0);
}

TEST(Output, BatchIndexMakesFileNamesDistinct) {
  Request request;
  request.output_path = "out";
  request.output_format = "npy";
  request.output_file_name = "clip";
  EXPECT_EQ(output_file_path(request), fs::path("out/clip.npy"));
  EXPECT_EQ(output_file_path(request, 0), fs::path("out/clip_0.npy"));
  request.output_file_name = "clip.npy";
  EXPECT_EQ(output_file_path(request, 1), fs::path("out/clip_1.npy"));
  request.output_file_name.reset();
  request.prompt = "a fox";
  EXPECT_TRUE(output_file_path(request, 3).filename().string().ends_with("_3.npy"));
  EXPECT_TRUE(output_file_path(request, 3).filename().string().starts_with("a_fox_"));
}

TEST(Output, GeneratedNamesArePromptTimestampAndAStableHash) {
  Request request;
  request.output_path = "out";
  request.output_format = "mp4";
  request.prompt = "A fox / in *snow*: \"quiet\" morning?";
  request.settings = {{"prompt", request.prompt}, {"seed", 3}};
  const std::string name = output_file_path(request).filename().string();
  // {sanitised prompt}_{YYYYmmdd-HHMMSS}_{8 hex digits}.{ext}
  const std::regex pattern(
      R"(A_fox___in__snow____quiet__morning_[0-9]{8}-[0-9]{6}_[0-9a-f]{8}\.mp4)");
  EXPECT_TRUE(std::regex_match(name, pattern)) << name;
  // The hash depends on the settings only: the same settings, the same hash, on every machine.
  // FNV-1a 64 of {"prompt":...,"seed":3}, top 32 bits, worked out independently below.
  uint64_t fnv = 0xcbf29ce484222325ull;
  for (unsigned char c : request.settings.dump()) fnv = (fnv ^ c) * 0x100000001b3ull;
  EXPECT_TRUE(name.ends_with(fmt::format("_{:08x}.mp4", uint32_t(fnv >> 32)))) << name;
  request.settings["seed"] = 4;
  EXPECT_FALSE(output_file_path(request).filename().string().ends_with(
      fmt::format("_{:08x}.mp4", uint32_t(fnv >> 32))));
  // Long prompts keep their first 100 characters; an empty one is "output".
  request.prompt = std::string(300, 'x');
  EXPECT_TRUE(
      output_file_path(request).filename().string().starts_with(std::string(100, 'x') + "_"));
  request.prompt = "";
  EXPECT_TRUE(output_file_path(request).filename().string().starts_with("output_"));
}

TEST(Output, ExistingFilesAreNeverReplacedWithoutOverwrite) {
  const fs::path dir = testing::scratch_dir("no-overwrite");
  Request request;
  request.output_path = dir;
  request.output_format = "npy";
  request.output_file_name = "clip";
  std::ofstream(dir / "clip.npy") << "earlier work";
  const std::string message = testing::error_message([&] { output_file_path(request); });
  EXPECT_NE(message.find("clip.npy already exists; pass --overwrite"), std::string::npos)
      << message;
  request.overwrite = true;
  EXPECT_EQ(output_file_path(request), dir / "clip.npy");
  // A generated name that is taken gets a counter instead.
  request.overwrite = false;
  request.output_file_name.reset();
  request.prompt = "a fox";
  // Retried if the clock's second turns between the two calls (the names then differ anyway).
  for (int attempt = 0; attempt < 5; ++attempt) {
    const fs::path first = output_file_path(request);
    std::ofstream(first) << "taken";
    const fs::path second = output_file_path(request);
    if (second.filename().string().substr(0, 21) != first.filename().string().substr(0, 21))
      continue;
    EXPECT_EQ(second.filename().string(), first.stem().string() + "_1.npy");
    std::ofstream(second) << "taken too";
    EXPECT_EQ(output_file_path(request).filename().string(), first.stem().string() + "_2.npy");
    return;
  }
  FAIL() << "the clock kept turning";
}

TEST(Output, UnwritableFolderIsAClearError) {
  fs::path dir = testing::scratch_dir("blocked");
  std::ofstream(dir / "file") << "x";
  EXPECT_THROW(write_frames(gradient_frames(1, 16, 16), "png", dir / "file" / "x.png", {}, 16),
               Error);
}

}  // namespace
}  // namespace mmgen
