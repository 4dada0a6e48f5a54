#include "trace/export/chrome.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trace/error.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

// Buffered writer on a file descriptor. No per-event allocation: strings are escaped straight
// into the buffer and numbers go through std::to_chars.
class Out {
 public:
  Out(int fd, std::string path) : fd_(fd), path_(std::move(path)), buf_(new char[kCap]) {}

  void put(char c) {
    if (n_ == kCap) flush();
    buf_[n_++] = c;
  }
  void put(std::string_view s) {
    if (s.size() > kCap - n_) {
      flush();
      if (s.size() > kCap) {
        write_all(s.data(), s.size());
        return;
      }
    }
    std::memcpy(buf_.get() + n_, s.data(), s.size());
    n_ += s.size();
  }
  void num(int64_t v) {
    reserve(24);
    n_ = static_cast<size_t>(std::to_chars(buf_.get() + n_, buf_.get() + kCap, v).ptr - buf_.get());
  }
  // Nanoseconds as exact microseconds with three decimals: 1234567 -> 1234.567, -5 -> -0.005.
  void us(int64_t ns) {
    reserve(32);
    char* p = buf_.get() + n_;
    uint64_t a = static_cast<uint64_t>(ns);
    if (ns < 0) {
      *p++ = '-';
      a = 0 - a;  // also right for INT64_MIN
    }
    p = std::to_chars(p, buf_.get() + kCap, a / 1000).ptr;
    uint64_t frac = a % 1000;
    p[0] = '.';
    p[1] = static_cast<char>('0' + frac / 100);
    p[2] = static_cast<char>('0' + frac / 10 % 10);
    p[3] = static_cast<char>('0' + frac % 10);
    n_ = static_cast<size_t>(p + 4 - buf_.get());
  }
  // A JSON string literal. Control characters are escaped, invalid UTF-8 bytes become U+FFFD.
  void str(std::string_view s) {
    put('"');
    const auto* b = reinterpret_cast<const unsigned char*>(s.data());
    size_t n = s.size(), i = 0;
    while (i < n) {
      // Fast path: a run of bytes that need nothing.
      size_t j = i;
      while (j < n && b[j] >= 0x20 && b[j] < 0x80 && b[j] != '"' && b[j] != '\\') ++j;
      if (j > i) put(std::string_view(s.data() + i, j - i));
      i = j;
      if (i >= n) break;
      unsigned char c = b[i];
      if (c < 0x80) {
        switch (c) {
          case '"':
            put("\\\"");
            break;
          case '\\':
            put("\\\\");
            break;
          case '\b':
            put("\\b");
            break;
          case '\f':
            put("\\f");
            break;
          case '\n':
            put("\\n");
            break;
          case '\r':
            put("\\r");
            break;
          case '\t':
            put("\\t");
            break;
          default: {
            static const char kHex[] = "0123456789abcdef";
            char e[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
            put(std::string_view(e, 6));
          }
        }
        ++i;
        continue;
      }
      size_t len = utf8_len(b + i, n - i);
      if (len == 0) {
        put("\\ufffd");
        ++i;
      } else {
        put(std::string_view(s.data() + i, len));
        i += len;
      }
    }
    put('"');
  }
  void flush() {
    write_all(buf_.get(), n_);
    n_ = 0;
  }

 private:
  static constexpr size_t kCap = 1 << 20;

  void reserve(size_t k) {
    if (kCap - n_ < k) flush();
  }
  void write_all(const char* p, size_t len) {
    while (len > 0) {
      ssize_t w = ::write(fd_, p, len);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw Error(ErrorCode::Io, path_ + ": write failed: " + std::strerror(errno));
      }
      p += w;
      len -= static_cast<size_t>(w);
    }
  }
  // Length of the well-formed UTF-8 sequence at p (no overlongs, surrogates or > U+10FFFF),
  // 0 if it is not one.
  static size_t utf8_len(const unsigned char* p, size_t avail) {
    unsigned char c = p[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return 0;
    }
    if (avail < len || p[1] < lo || p[1] > hi) return 0;
    for (size_t k = 2; k < len; ++k)
      if ((p[k] & 0xC0) != 0x80) return 0;
    return len;
  }

  int fd_;
  std::string path_;
  std::unique_ptr<char[]> buf_;
  size_t n_ = 0;
};

// The output file: created beside the target under a private name, renamed at the end, removed
// on any failure.
class TempFile {
 public:
  explicit TempFile(const std::string& target) : target_(target) {
    fs::path t(target);
    if (!t.has_filename())
      throw Error(ErrorCode::Usage, target + ": output path names a directory, not a file");
    fs::path dir = t.has_parent_path() ? t.parent_path() : fs::path(".");
    std::string base = "." + t.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-";
    for (int i = 0; i < 1000 && fd_ < 0; ++i) {
      path_ = (dir / (base + std::to_string(i))).string();
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && errno != EEXIST)
        throw Error(ErrorCode::Io, target + ": cannot create a temporary file in " + dir.string() +
                                       ": " + std::strerror(errno));
    }
    if (fd_ < 0) throw Error(ErrorCode::Io, target + ": cannot create a temporary file");
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  void commit() {
    if (::fsync(fd_) != 0)
      throw Error(ErrorCode::Io, target_ + ": fsync failed: " + std::strerror(errno));
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) throw Error(ErrorCode::Io, target_ + ": close failed: " + std::strerror(errno));
    if (::rename(path_.c_str(), target_.c_str()) != 0)
      throw Error(ErrorCode::Io,
                  target_ + ": cannot rename " + path_ + " over it: " + std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string target_, path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Thread ids. Chrome tids only need to be unique within a pid (= rank); GPU streams keep their
// number, CPU threads are moved to their own range, and a few braid tracks sit at the top.
// Ids outside these ranges (negative, huge) get a dense id counted down from the top.
constexpr int64_t kCpuBase = int64_t{1} << 30;
constexpr int64_t kStepsTid = (int64_t{1} << 31) - 1;
constexpr int64_t kHostCollTid = (int64_t{1} << 31) - 2;

enum class Space : uint8_t { Gpu, Cpu, Steps, HostColl };

struct Track {
  Space space;
  int64_t id;  // stream or thread id in the trace
};

class Exporter {
 public:
  Exporter(const TraceReader& reader, int64_t run, Out& out) : r_(reader), run_(run), out_(out) {}

  ChromeExportStats run() {
    for (const RankInfo& ri : r_.ranks(run_)) ranks_[ri.rank] = ri;
    for (const StreamInfo& si : r_.streams(run_))
      labels_[{si.rank, si.gpu ? Space::Gpu : Space::Cpu, si.stream}] = si.label;

    out_.put("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    // Every rank gets a process even when it has no events.
    for (const auto& [rank, ri] : ranks_) used_tids_[rank];
    // And every stream listed in the streams table a thread.
    for (const auto& [key, label] : labels_)
      tid(std::get<0>(key), {std::get<1>(key), std::get<2>(key)});

    r_.kernels(run_, [&](const Kernel& k) {
      begin_x(k.rank, tid(k.rank, {Space::Gpu, k.stream}), k.start, k.end, "kernel");
      name(k.name, "kernel");
      out_.put(",\"args\":{\"category\":");
      out_.str(to_string(k.category));
      out_.put(",\"correlation\":");
      out_.num(k.correlation);
      if (k.external_id != 0) {
        out_.put(",\"external_id\":");
        out_.num(k.external_id);
      }
      out_.put("}}");
      return true;
    });
    r_.memcpys(run_, [&](const Memcpy& m) {
      bool set = m.kind == MemKind::Memset;
      begin_x(m.rank, tid(m.rank, {Space::Gpu, m.stream}), m.start, m.end,
              set ? "gpu_memset" : "gpu_memcpy");
      if (m.name != 0 && !r_.str(m.name).empty()) {
        name(m.name, "");
      } else {
        out_.put(",\"name\":");
        out_.str(set ? std::string("Memset") : "Memcpy " + std::string(to_string(m.kind)));
      }
      out_.put(",\"args\":{\"bytes\":");
      out_.num(m.bytes);
      out_.put(",\"kind\":");
      out_.str(to_string(m.kind));
      out_.put(",\"correlation\":");
      out_.num(m.correlation);
      out_.put("}}");
      return true;
    });
    r_.api_calls(run_, [&](const ApiCall& a) {
      begin_x(a.rank, tid(a.rank, {Space::Cpu, a.tid}), a.start, a.end, api_cat(a.kind));
      name(a.name, "api call");
      out_.put(",\"args\":{\"correlation\":");
      out_.num(a.correlation);
      if (a.external_id != 0) {
        out_.put(",\"external_id\":");
        out_.num(a.external_id);
      }
      out_.put("}}");
      return true;
    });
    r_.ranges(run_, [&](const Range& g) {
      begin_x(g.rank, tid(g.rank, {g.on_gpu ? Space::Gpu : Space::Cpu, g.stream}), g.start, g.end,
              g.on_gpu ? "gpu_user_annotation" : "user_annotation");
      name(g.name, "range");
      out_.put(",\"args\":{");
      bool any = false;
      if (g.domain != 0) {
        out_.put("\"domain\":");
        out_.str(r_.str(g.domain));
        any = true;
      }
      if (g.payload != 0) {
        out_.put(any ? ",\"payload\":" : "\"payload\":");
        out_.str(r_.str(g.payload));
      }
      out_.put("}}");
      return true;
    });
    r_.collectives(run_, [&](const Collective& c) {
      Track t = c.stream >= 0 ? Track{Space::Gpu, c.stream} : Track{Space::HostColl, 0};
      begin_x(c.rank, tid(c.rank, t), c.start, c.end, "collective");
      out_.put(",\"name\":");
      out_.str(to_string(c.op));
      out_.put(",\"args\":{\"comm\":");
      out_.str(r_.str(c.comm));
      out_.put(",\"seq\":");
      out_.num(c.seq);
      out_.put(",\"op\":");
      out_.str(to_string(c.op));
      out_.put(",\"dtype\":");
      out_.str(r_.str(c.dtype));
      out_.put(",\"in_count\":");
      out_.num(c.in_count);
      out_.put(",\"out_count\":");
      out_.num(c.out_count);
      out_.put(",\"bytes\":");
      out_.num(c.bytes);
      out_.put(",\"group_size\":");
      out_.num(c.group_size);
      out_.put(",\"peer_or_root\":");
      out_.num(c.peer_or_root);
      out_.put(",\"algo\":");
      out_.str(r_.str(c.algo));
      out_.put(",\"proto\":");
      out_.str(r_.str(c.proto));
      out_.put(",\"channels\":");
      out_.num(c.channels);
      out_.put(",\"kernel\":");
      out_.str(r_.str(c.name));
      out_.put(",\"kernel_ref\":");
      out_.num(c.kernel_ref);
      if (c.enqueue >= 0) {
        out_.put(",\"enqueue_ts\":");
        out_.us(c.enqueue + offset(c.rank));
      }
      out_.put("}}");
      return true;
    });
    for (const Step& s : r_.steps(run_)) {
      begin_x(s.rank, tid(s.rank, {Space::Steps, 0}), s.start, s.end, "step");
      out_.put(",\"name\":\"step ");
      out_.num(s.step);
      out_.put("\",\"args\":{\"step\":");
      out_.num(s.step);
      out_.put("}}");
    }

    write_metadata();
    out_.put("\n]}\n");
    out_.flush();
    return stats_;
  }

 private:
  using TrackKey = std::tuple<int32_t, Space, int64_t>;

  static const char* api_cat(ApiKind k) {
    switch (k) {
      case ApiKind::CpuOp:
        return "cpu_op";
      case ApiKind::Runtime:
        return "cuda_runtime";
      case ApiKind::Driver:
        return "cuda_driver";
      case ApiKind::Python:
        return "python_function";
      default:
        return "cpu_other";
    }
  }

  Ns offset(int32_t rank) const {
    auto it = ranks_.find(rank);
    return it == ranks_.end() ? 0 : it->second.clock_offset;
  }

  int64_t tid(int32_t rank, Track t) {
    TrackKey key{rank, t.space, t.id};
    auto it = tids_.find(key);
    if (it != tids_.end()) return it->second;
    int64_t v;
    if (t.space == Space::Steps) {
      v = kStepsTid;
    } else if (t.space == Space::HostColl) {
      v = kHostCollTid;
    } else if (t.id >= 0 && t.id < kCpuBase) {
      v = t.space == Space::Gpu ? t.id : kCpuBase + t.id;
    } else {
      v = next_overflow_--;
    }
    tids_.emplace(key, v);
    used_tids_[rank].emplace(v, key);
    return v;
  }

  void begin_event() {
    if (stats_.events++ > 0) out_.put(",\n");
  }

  void begin_x(int32_t rank, int64_t tid, Ns start, Ns end, const char* cat) {
    Ns t0 = start + offset(rank);
    min_ts_ = std::min(min_ts_, t0);
    begin_event();
    out_.put("{\"ph\":\"X\",\"cat\":\"");
    out_.put(cat);
    out_.put("\",\"pid\":");
    out_.num(rank);
    out_.put(",\"tid\":");
    out_.num(tid);
    out_.put(",\"ts\":");
    out_.us(t0);
    out_.put(",\"dur\":");
    out_.us(std::max<Ns>(end - start, 0));
  }

  void name(StrId id, std::string_view fallback) {
    out_.put(",\"name\":");
    const std::string& s = r_.str(id);
    out_.str(s.empty() ? fallback : std::string_view(s));
  }

  void begin_meta(const char* what, int32_t pid, int64_t tid) {
    begin_event();
    out_.put("{\"ph\":\"M\",\"name\":\"");
    out_.put(what);
    out_.put("\",\"pid\":");
    out_.num(pid);
    out_.put(",\"tid\":");
    out_.num(tid);
    out_.put(",\"ts\":");
    out_.us(min_ts_ == std::numeric_limits<Ns>::max() ? 0 : min_ts_);
    out_.put(",\"args\":{");
  }

  // Process and thread names, written last: by then every track in use is known, and their
  // "ts" can be the trace's first timestamp (some viewers want one on every event).
  void write_metadata() {
    for (const auto& [rank, tracks] : used_tids_) {
      auto ri = ranks_.find(rank);
      std::string pname = "rank " + std::to_string(rank);
      if (ri != ranks_.end() && !ri->second.device_name.empty())
        pname += " (" + ri->second.device_name + ")";
      begin_meta("process_name", rank, 0);
      out_.put("\"name\":");
      out_.str(pname);
      out_.put("}}");
      begin_meta("process_sort_index", rank, 0);
      out_.put("\"sort_index\":");
      out_.num(rank);
      out_.put("}}");
      if (ri != ranks_.end() && !ri->second.host.empty()) {
        begin_meta("process_labels", rank, 0);
        out_.put("\"labels\":");
        out_.str(ri->second.host);
        out_.put("}}");
      }
      for (const auto& [tid, key] : tracks) {
        auto [krank, space, id] = key;
        std::string tname;
        auto lab = labels_.find(key);
        if (lab != labels_.end() && !lab->second.empty()) {
          tname = lab->second;
        } else if (space == Space::Gpu) {
          tname = "stream " + std::to_string(id);
        } else if (space == Space::Cpu) {
          tname = "thread " + std::to_string(id);
        } else if (space == Space::Steps) {
          tname = "steps";
        } else {
          tname = "collectives (host)";
        }
        begin_meta("thread_name", rank, tid);
        out_.put("\"name\":");
        out_.str(tname);
        out_.put("}}");
        // Steps first, then GPU streams, then CPU threads.
        begin_meta("thread_sort_index", rank, tid);
        out_.put("\"sort_index\":");
        out_.num(space == Space::Steps ? -1 : tid);
        out_.put("}}");
      }
    }
  }

  const TraceReader& r_;
  int64_t run_;
  Out& out_;
  ChromeExportStats stats_;
  std::map<int32_t, RankInfo> ranks_;
  std::map<TrackKey, std::string> labels_;
  std::map<TrackKey, int64_t> tids_;
  std::map<int32_t, std::map<int64_t, TrackKey>> used_tids_;  // rank -> tid -> track
  int64_t next_overflow_ = kHostCollTid - 1;
  Ns min_ts_ = std::numeric_limits<Ns>::max();
};

}  // namespace

ChromeExportStats export_chrome(const TraceReader& reader, const std::string& out_path,
                                const ChromeExportOptions& options) {
  std::vector<RunRow> runs = reader.runs();
  int64_t run = options.run;
  if (run == -1) {
    if (runs.empty()) throw Error(ErrorCode::Empty, reader.path() + ": has no runs to export");
    run = runs.front().run_id;
  } else if (std::none_of(runs.begin(), runs.end(),
                          [&](const RunRow& r) { return r.run_id == run; })) {
    std::string have;
    for (const RunRow& r : runs) have += (have.empty() ? "" : ", ") + std::to_string(r.run_id);
    throw Error(ErrorCode::Usage, reader.path() + ": no run " + std::to_string(run) +
                                      " (runs: " + (have.empty() ? "none" : have) + ")");
  }
  if (out_path.empty()) throw Error(ErrorCode::Usage, "chrome export: empty output path");

  TempFile tmp(out_path);  // removes itself unless committed
  Out out(tmp.fd(), tmp.path());
  ChromeExportStats stats = Exporter(reader, run, out).run();
  tmp.commit();
  return stats;
}

}  // namespace braid
