// Helpers shared by the trace tests: temporary directories, importing into a fresh .braid, and
// counting events in a Kineto file independently of the importer (zlib + simdjson DOM).
#pragma once

#include <simdjson.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "trace/import/importer.h"
#include "trace/reader.h"
#include "trace/writer.h"

namespace braid::test {

inline std::string traces(const std::string& rel) { return std::string(BRAID_TRACES_DIR) + "/" + rel; }

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/braid-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

#ifdef BRAID_CLI
// Runs the `braid` executable (BRAID_CLI) as a user would, with no input, capturing its exit
// status and both outputs (through files in `tmp`).
struct CliResult {
  int code;
  std::string out, err;
};
inline CliResult run_braid(const TempDir& tmp, const std::string& args) {
  std::string cmd = std::string(BRAID_CLI) + " " + args + " >" + tmp.file("stdout") + " 2>" +
                    tmp.file("stderr") + " </dev/null";
  int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, slurp(tmp.file("stdout")),
          slurp(tmp.file("stderr"))};
}

// `mpirun -np N braid` as the tests start it (as root, more ranks than cores), and whether this
// machine has mpirun at all.
inline std::string mpirun(int np) {
  return "mpirun --oversubscribe --allow-run-as-root -np " + std::to_string(np) + " " + BRAID_CLI;
}
inline bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }
#endif

// Imports `files` into a new .braid at `out` and returns the run id.
inline int64_t import_files(const std::vector<std::string>& files, const std::string& out,
                            TraceFormat fmt = TraceFormat::Auto) {
  TraceWriter w(out, TraceWriter::Mode::Overwrite);
  ImportOptions opts;
  ImportStats stats;
  int64_t run = import_traces(w, files, fmt, opts, stats);
  w.commit();
  return run;
}

inline std::string gunzip_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  std::string out;
  if (!f) return out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

inline void write_file(const std::string& path, const std::string& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
}

// Counts by Chrome-trace category of the complete ("X") events of a Kineto file.
struct KinetoCounts {
  int64_t kernels = 0, nccl_kernels = 0, memcpys = 0, memsets = 0, api = 0, ranges = 0;
  std::set<int64_t> steps;
  std::map<std::string, int64_t> nccl_by_kernel_coll;  // "AllReduce", "SendRecv", ...
};

inline KinetoCounts count_kineto(const std::string& path) {
  std::string text = gunzip_file(path);
  simdjson::dom::parser p;
  simdjson::dom::element doc = p.parse(text);
  KinetoCounts c;
  for (auto e : doc["traceEvents"].get_array()) {
    std::string_view ph, cat, name;
    if (e["ph"].get_string().get(ph) || ph != "X") continue;
    if (e["cat"].get_string().get(cat)) cat = "";
    if (e["name"].get_string().get(name)) name = "";
    if (cat == "kernel") {
      ++c.kernels;
      if (name.rfind("nccl", 0) == 0) {
        ++c.nccl_kernels;
        auto rest = name.substr(name.find('_') + 1);
        c.nccl_by_kernel_coll[std::string(rest.substr(0, rest.find('_')))]++;
      }
    } else if (cat == "gpu_memcpy") {
      ++c.memcpys;
    } else if (cat == "gpu_memset") {
      ++c.memsets;
    } else if (cat == "cpu_op" || cat == "cuda_runtime" || cat == "cuda_driver" ||
               cat == "python_function") {
      ++c.api;
    } else if (cat == "user_annotation" || cat == "gpu_user_annotation") {
      ++c.ranges;
    }
    if (name.rfind("ProfilerStep#", 0) == 0 && cat != "gpu_user_annotation")
      c.steps.insert(std::atoll(std::string(name.substr(13)).c_str()));
  }
  return c;
}

}  // namespace braid::test
