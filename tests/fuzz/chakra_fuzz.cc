// Fuzz target: the Chakra execution-trace importer (fuzz_driver.h): protobuf `.et`, the
// "workload_graph" JSON and tar archives of either. An input's first byte picks the file it
// becomes ('E' .et, 'J' .json, 'T' .tar, anything else .et), the rest is the file. Seeds come
// from the real archives in shared/data/traces/chakra: the opening messages of chakra.0.et, the
// small JSON trace, and tar archives of each.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_driver.h"

namespace {

std::string materialize(const std::string& input, const std::string& dir) {
  if (input.empty()) return "";
  const char* ext = input[0] == 'J' ? ".json" : input[0] == 'T' ? ".tar" : ".et";
  std::string path = dir + "/chakra.0" + ext;
  braid::fuzz::write_file(path, input.substr(1));
  return path;
}

// Regular members of an uncompressed ustar archive: (name, contents).
std::vector<std::pair<std::string, std::string>> untar(const std::string& tar) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t at = 0; at + 512 <= tar.size();) {
    const char* h = tar.data() + at;
    if (h[0] == 0) break;
    std::string name(h, strnlen(h, 100));
    size_t size = std::strtoull(std::string(h + 124, 12).c_str(), nullptr, 8);
    if (h[156] == '0' || h[156] == 0) out.emplace_back(name, tar.substr(at + 512, size));
    at += 512 + (size + 511) / 512 * 512;
  }
  return out;
}

// A one-member ustar archive.
std::string tar_of(const std::string& name, const std::string& data) {
  std::string h(512, '\0');
  name.copy(h.data(), std::min<size_t>(name.size(), 99));
  std::snprintf(h.data() + 100, 8, "%07o", 0644);
  std::snprintf(h.data() + 108, 8, "%07o", 0);
  std::snprintf(h.data() + 116, 8, "%07o", 0);
  std::snprintf(h.data() + 124, 12, "%011llo", static_cast<unsigned long long>(data.size()));
  std::snprintf(h.data() + 136, 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(h.data() + 257,
              "ustar\0"
              "00",
              8);
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  h[155] = ' ';
  std::string body = data + std::string((512 - data.size() % 512) % 512, '\0');
  return h + body + std::string(1024, '\0');
}

// The first `n` length-delimited messages of an ET stream (a varint length before each).
std::string first_messages(const std::string& et, int n) {
  size_t at = 0;
  for (int i = 0; i < n && at < et.size(); ++i) {
    uint64_t len = 0;
    int shift = 0;
    while (at < et.size()) {
      auto b = static_cast<unsigned char>(et[at++]);
      len |= static_cast<uint64_t>(b & 0x7f) << shift;
      shift += 7;
      if (!(b & 0x80) || shift > 63) break;
    }
    at = std::min(et.size(), at + static_cast<size_t>(len));
  }
  return et.substr(0, at);
}

std::vector<std::string> seeds() {
  const std::string dir = std::string(BRAID_TRACES_DIR) + "/chakra/tests/data/";
  std::vector<std::string> s;
  for (auto& [name, data] : untar(braid::fuzz::gunzip_file(dir + "feeder_tests_trace.tar.gz"))) {
    std::string et = first_messages(data, 120);
    s.push_back("E" + et);
    s.push_back("T" + tar_of("chakra.0.et", et));
  }
  for (auto& [name, data] : untar(braid::fuzz::gunzip_file(dir + "json_trace.tar.gz"))) {
    if (name.find("small_chakra") == std::string::npos) continue;
    s.push_back("J" + data);
    s.push_back("T" + tar_of("small_chakra.0.json", data));
  }
  return s;
}

// clang-format off: the dictionary reads best packed.
const braid::fuzz::Target kTarget{"chakra", braid::TraceFormat::Chakra, materialize, seeds, {
    "{", "}", "[", "]", ",", ":", "\"", "1e308", "1e30", "-1", "null", "4102444800000001",
    "18446744073709551615", "\"NodeType\":", "\"runtime\":", "\"start_time_micros\":",
    "\"workload_graph\":", std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10),
    std::string("\x0a\x00", 2), "ustar"}};
// clang-format on

}  // namespace

BRAID_FUZZ_TARGET(kTarget)
