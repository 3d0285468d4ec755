// Whether an MP4 file was written to the end. OpenCV's VideoWriter reports no write errors (a full
// disk, a file-size limit), and a video cut short loses its index ('moov' box, written last), so
// the writer checks the file's top-level boxes before the video is renamed into place.
#pragma once

#include <filesystem>

namespace mmgen {

// True when the top-level boxes of `path` chain exactly to the end of the file and include
// 'ftyp', 'mdat' and 'moov'.
bool mp4_is_complete(const std::filesystem::path& path);

}  // namespace mmgen
