#include "app/view/png_io.h"

#include <png.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "trace/error.h"
#include "trace/output_file.h"

namespace braid::view {

void write_png(const std::string& path, const Image& img) {
  png_image im;
  std::memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  im.width = static_cast<png_uint_32>(img.width);
  im.height = static_cast<png_uint_32>(img.height);
  im.format = PNG_FORMAT_RGBA;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&im, nullptr, &size, 0, img.rgba.data(), 0, nullptr))
    throw Error(ErrorCode::Internal, path + ": cannot encode PNG: " + im.message);
  std::vector<uint8_t> buf(size);
  if (!png_image_write_to_memory(&im, buf.data(), &size, 0, img.rgba.data(), 0, nullptr))
    throw Error(ErrorCode::Internal, path + ": cannot encode PNG: " + im.message);
  AtomicOutputFile out(path);
  const uint8_t* p = buf.data();
  size_t left = size;
  while (left > 0) {
    ssize_t n = ::write(out.fd(), p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::Io, path + ": write failed: " + std::strerror(errno));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  out.commit();
}

Image read_png(const std::string& path) {
  if (!std::filesystem::exists(path)) throw Error(ErrorCode::NotFound, path + ": no such file");
  png_image im;
  std::memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&im, path.c_str()))
    throw Error(ErrorCode::BadFormat, path + ": not a PNG: " + im.message);
  im.format = PNG_FORMAT_RGBA;
  Image img;
  img.width = static_cast<int>(im.width);
  img.height = static_cast<int>(im.height);
  img.rgba.resize(PNG_IMAGE_SIZE(im));
  if (!png_image_finish_read(&im, nullptr, img.rgba.data(), 0, nullptr)) {
    png_image_free(&im);
    throw Error(ErrorCode::BadFormat, path + ": cannot decode PNG: " + im.message);
  }
  return img;
}

}  // namespace braid::view
