// PNG files of RGBA images (rows top to bottom): written atomically for --screenshot, read
// back by the screenshot tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::view {

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgba;  // width * height * 4, top row first
  const uint8_t* at(int x, int y) const { return &rgba[(static_cast<size_t>(y) * width + x) * 4]; }
};

// Throws braid::Error (Io) naming the file; never leaves a partial file.
void write_png(const std::string& path, const Image& img);
// Throws braid::Error (NotFound, BadFormat) naming the file.
Image read_png(const std::string& path);

}  // namespace braid::view
