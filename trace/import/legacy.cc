// Legacy autograd-profiler JSON importer: what PyTorch writes without Kineto (Debian's
// python3-torch, older and CPU-only builds) from torch.autograd.profiler / torch.profiler's
// export_chrome_trace.
//
// The file is a bare JSON array of complete ("X") events with no `cat`, `pid` "CPU functions" on
// every rank, `tid` the host thread, `ts`/`dur` in µs relative to the rank's own profiler start,
// and nothing that names the rank: it comes from `--rank`, else the file name (`rank-3.json`,
// `trace_rank3.json`, `worker3.json`: the digits after "rank" or "worker", else the last number
// of the name), else the file's position. Every event becomes a CPU op of its thread;
// `ProfilerStep#N` a step and a range.
//
// Host collectives: the process group's call on the main thread (`c10d::allreduce_`,
// `c10d::broadcast_`, ...) is where the rank arrives; with gloo, the work runs on gloo's threads
// as `gloo:all_reduce` (etc.), in the order the calls were made. The k-th call of an operation
// is paired with the k-th gloo event of that operation, and one collective row (stream -1, host
// times) goes from the call's start to the later of the two ends. The analysis matches them
// across ranks by order (docs/analysis.md).
//
// The file is read whole (these traces hold host events only and stay small) and parsed with
// simdjson's DOM; times go through a double, exact for the integer and 3-decimal µs these files
// hold up to 2^53 ns.
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "trace/categories.h"
#include "trace/diagnostics.h"
#include "trace/error.h"
#include "trace/import/et.h"
#include "trace/import/importer.h"
#include "trace/input.h"

namespace braid {

std::optional<int32_t> rank_from_file_name(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto digits_at = [&](size_t i) -> std::optional<int32_t> {
    while (i < lower.size() && (lower[i] == '-' || lower[i] == '_' || lower[i] == '.')) ++i;
    size_t j = i;
    while (j < lower.size() && std::isdigit(static_cast<unsigned char>(lower[j])) && j - i < 9) ++j;
    if (j == i) return std::nullopt;
    return static_cast<int32_t>(std::stol(lower.substr(i, j - i)));
  };
  for (const char* key : {"rank", "worker"}) {
    std::optional<int32_t> found;
    for (size_t p = lower.find(key); p != std::string::npos; p = lower.find(key, p + 1))
      if (auto r = digits_at(p + std::char_traits<char>::length(key))) found = r;
    if (found) return found;
  }
  // The last run of digits in the name.
  size_t end = lower.find_last_of("0123456789");
  if (end == std::string::npos) return std::nullopt;
  size_t start = end;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(lower[start - 1]))) --start;
  if (end - start >= 9) return std::nullopt;
  return static_cast<int32_t>(std::stol(lower.substr(start, end - start + 1)));
}

namespace {

struct Event {
  std::string_view name;
  int64_t tid = 0;
  Ns start = 0, end = 0;
};

Ns us_to_ns(const std::string& path, size_t i, const char* key, simdjson::dom::element v) {
  int64_t n;
  if (v.get_int64().get(n) == simdjson::SUCCESS) {
    if (n > INT64_MAX / 1000 || n < INT64_MIN / 1000)
      throw Error(ErrorCode::BadFormat,
                  path + ": event " + std::to_string(i + 1) + ": \"" + key + "\" out of range");
    return n * 1000;
  }
  double d;
  if (v.get_double().get(d) != simdjson::SUCCESS || !std::isfinite(d) || std::fabs(d) > 9.0e12)
    throw Error(ErrorCode::BadFormat, path + ": event " + std::to_string(i + 1) + ": \"" + key +
                                          "\" is not a time in µs");
  return std::llround(d * 1000.0);
}

// The complete "X" events of a legacy profiler trace (a JSON array, or an object with
// traceEvents); `seen` counts every event, `skipped` those that are not complete. The names
// point into `parser`'s strings: it outlives the events.
std::vector<Event> read_legacy_events(const std::string& path, const std::string& text,
                                      simdjson::dom::parser& parser, int64_t& seen,
                                      int64_t& skipped) {
  simdjson::dom::element doc;
  if (auto err = parser.parse(text).get(doc))
    throw Error(ErrorCode::BadFormat,
                path + ": not valid JSON (" + simdjson::error_message(err) + ")");
  simdjson::dom::array events;
  if (doc.get_array().get(events) != simdjson::SUCCESS) {
    simdjson::dom::array inner;
    if (doc["traceEvents"].get_array().get(inner) != simdjson::SUCCESS)
      throw Error(ErrorCode::BadFormat,
                  path + ": a legacy profiler trace is a JSON array of events");
    events = inner;
  }

  std::vector<Event> evs;
  for (simdjson::dom::element e : events) {
    size_t i = static_cast<size_t>(seen++);
    std::string_view ph, name;
    if (e["ph"].get_string().get(ph) != simdjson::SUCCESS || ph != "X" ||
        e["name"].get_string().get(name) != simdjson::SUCCESS) {
      ++skipped;
      continue;
    }
    simdjson::dom::element ts, dur;
    if (e["ts"].get(ts) != simdjson::SUCCESS || e["dur"].get(dur) != simdjson::SUCCESS) {
      ++skipped;
      continue;
    }
    Event ev;
    ev.name = name;
    int64_t tid = 0;
    if (e["tid"].get_int64().get(tid) != simdjson::SUCCESS) tid = 0;
    ev.tid = tid;
    ev.start = us_to_ns(path, i, "ts", ts);
    ev.end = ev.start + std::max<Ns>(0, us_to_ns(path, i, "dur", dur));
    evs.push_back(ev);
  }
  return evs;
}

// Host collectives: the k-th call of each operation with the k-th gloo event of it, in start
// order; `unpaired` counts the calls of a gloo job left without one.
std::vector<Collective> pair_host_collectives(std::map<CollOp, std::deque<const Event*>>& calls,
                                              std::map<CollOp, std::deque<const Event*>>& works,
                                              bool gloo, int32_t rank, TraceWriter& w,
                                              int64_t& unpaired) {
  std::vector<Collective> colls;
  for (auto& [op, q] : calls) {
    auto& wq = works[op];
    for (const Event* c : q) {
      Collective col;
      col.rank = rank;
      col.op = op;
      col.stream = -1;
      col.start = c->start;
      col.end = c->end;
      col.enqueue = c->start;
      col.name = w.intern(c->name);
      if (!wq.empty()) {
        col.end = std::max(col.end, wq.front()->end);
        wq.pop_front();
      } else if (gloo) {
        ++unpaired;
      }
      colls.push_back(col);
    }
  }
  std::stable_sort(colls.begin(), colls.end(),
                   [](const Collective& a, const Collective& b) { return a.start < b.start; });
  return colls;
}

}  // namespace

void import_legacy(ImportContext& ctx, const std::string& path, size_t index) {
  const std::string text = read_whole_file(path);
  simdjson::dom::parser parser;
  int64_t seen = 0, skipped = 0;
  std::vector<Event> evs = read_legacy_events(path, text, parser, seen, skipped);
  int32_t rank;
  if (index < ctx.options.ranks.size())
    rank = ctx.options.ranks[index];
  else if (auto r = rank_from_file_name(path))
    rank = *r;
  else
    rank = ctx.default_rank(index);
  ctx.claim_rank(rank, path);

  TraceWriter& w = ctx.writer;
  const int64_t run = ctx.run;
  ctx.stats.events += seen;
  ctx.stats.bytes += text.size();
  if (evs.empty())
    throw Error(ErrorCode::Empty, path + ": 0 of " + std::to_string(seen) +
                                      " events recognized (a legacy profiler trace holds complete "
                                      "\"X\" events with a name, ts and dur)");

  std::set<int64_t> tids;
  for (const Event& e : evs) tids.insert(e.tid);
  bool gloo = false;
  std::map<CollOp, std::deque<const Event*>> calls, works;  // in start order
  std::vector<const Event*> order(evs.size());
  for (size_t i = 0; i < evs.size(); ++i) order[i] = &evs[i];
  std::stable_sort(order.begin(), order.end(),
                   [](const Event* a, const Event* b) { return a->start < b->start; });
  int64_t rows = 0;
  et::HostOps* host = ctx.host_ops ? &(*ctx.host_ops)[index] : nullptr;
  for (const Event* e : order) {
    ApiCall a;
    a.rank = rank;
    a.tid = e->tid;
    a.start = e->start;
    a.end = e->end;
    a.name = w.intern(e->name);
    a.kind = ApiKind::CpuOp;
    w.add(run, a);
    ++rows;
    if (host) host->ops.push_back({e->tid, e->start, e->end, a.name, -1, -1});
    if (e->name.rfind("ProfilerStep#", 0) == 0) {
      int64_t n = std::atoll(std::string(e->name.substr(13)).c_str());
      w.add_step(run, Step{rank, n, e->start, e->end});
      if (host) host->steps.push_back(Step{rank, n, e->start, e->end});
      Range r;
      r.rank = rank;
      r.stream = e->tid;
      r.on_gpu = false;
      r.start = e->start;
      r.end = e->end;
      r.name = a.name;
      w.add(run, r);
    }
    if (e->name.rfind("c10d::", 0) == 0) {
      CollOp op = coll_op_from_framework_name(e->name);
      if (op != CollOp::Unknown) calls[op].push_back(e);
    } else if (e->name.rfind("gloo:", 0) == 0) {
      gloo = true;
      CollOp op = coll_op_from_framework_name(e->name);
      if (op != CollOp::Unknown) works[op].push_back(e);
    }
  }
  for (int64_t tid : tids) {
    StreamInfo s;
    s.rank = rank;
    s.stream = tid;
    s.gpu = false;
    w.add_stream(run, s);
  }

  int64_t unpaired = 0;
  std::vector<Collective> colls = pair_host_collectives(calls, works, gloo, rank, w, unpaired);
  for (const Collective& c : colls) w.add(run, c);
  rows += static_cast<int64_t>(colls.size());

  if (host) {
    host->rank = rank;
    host->path = path;
  }
  RankInfo info;
  info.rank = rank;
  info.backend = gloo ? "gloo" : "";
  info.source = path;
  w.add_rank(run, info);
  ctx.diagnose(diag::Code::legacy_skipped_events, skipped,
               "events that are not complete \"X\" events with a name, ts and dur", rank);
  ctx.diagnose(diag::Code::legacy_collective_without_work, unpaired,
               "c10d calls without a gloo event of the same operation: they end with the call",
               rank);
  ctx.stats.rows += rows;
  if (ctx.options.progress) {
    std::error_code ec;
    uint64_t size = std::filesystem::file_size(path, ec);
    if (!ec) ctx.options.progress(size, size);
  }
}

}  // namespace braid
