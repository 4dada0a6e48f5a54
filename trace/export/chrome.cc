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
#include "trace/output_file.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

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
  Exporter(const TraceReader& reader, int64_t run, BufferedOut& out) : r_(reader), run_(run), out_(out) {}

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
      out_.put(",");
      ids_and_end(k.correlation, k.external_id);
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
      out_.put(",");
      ids_and_end(m.correlation, 0);
      return true;
    });
    r_.api_calls(run_, [&](const ApiCall& a) {
      begin_x(a.rank, tid(a.rank, {Space::Cpu, a.tid}), a.start, a.end, api_cat(a.kind));
      name(a.name, "api call");
      out_.put(",\"args\":{");
      ids_and_end(a.correlation, a.external_id);
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
      arg("seq", c.seq);
      arg("op", to_string(c.op));
      arg("dtype", r_.str(c.dtype));
      arg("in_count", c.in_count);
      arg("out_count", c.out_count);
      arg("bytes", c.bytes);
      arg("group_size", c.group_size);
      arg("peer_or_root", c.peer_or_root);
      arg("algo", r_.str(c.algo));
      arg("proto", r_.str(c.proto));
      arg("channels", c.channels);
      arg("kernel", r_.str(c.name));
      arg("kernel_ref", c.kernel_ref);
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

  // One more arg of an event: ,"key":value.
  void arg(std::string_view key, int64_t value) {
    arg_key(key);
    out_.num(value);
  }
  void arg(std::string_view key, std::string_view value) {
    arg_key(key);
    out_.str(value);
  }
  void arg_key(std::string_view key) {
    out_.put(",\"");
    out_.put(key);
    out_.put("\":");
  }

  // The last args of a CUDA record, its correlation ids, and the end of its args and event:
  // "correlation":N, then "external_id":M when known (not 0).
  void ids_and_end(int64_t correlation, int64_t external_id) {
    out_.put("\"correlation\":");
    out_.num(correlation);
    if (external_id != 0) {
      out_.put(",\"external_id\":");
      out_.num(external_id);
    }
    out_.put("}}");
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
  BufferedOut& out_;
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

  AtomicOutputFile tmp(out_path);  // removes itself unless committed
  BufferedOut out(tmp.fd(), tmp.path());
  ChromeExportStats stats = Exporter(reader, run, out).run();
  tmp.commit();
  return stats;
}

}  // namespace braid
