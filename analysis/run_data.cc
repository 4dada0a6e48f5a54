#include "analysis/run_data.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "trace/error.h"

namespace braid::analysis {

std::string_view to_string(SyncKind k) {
  switch (k) {
    case SyncKind::EventRecord: return "event_record";
    case SyncKind::StreamWaitEvent: return "stream_wait_event";
    case SyncKind::StreamSynchronize: return "stream_synchronize";
    case SyncKind::EventSynchronize: return "event_synchronize";
    case SyncKind::DeviceSynchronize: return "device_synchronize";
  }
  return "event_record";
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// cudaEventRecord, cudaEventRecordWithFlags, cuEventRecord_v2, cudaStreamWaitEvent_v3020, ...
std::optional<SyncKind> sync_kind_of(std::string_view name) {
  std::string n = lower(name);
  if (n.rfind("cuda", 0) != 0 && n.rfind("cu", 0) != 0) return std::nullopt;
  if (n.find("streamwaitevent") != std::string::npos) return SyncKind::StreamWaitEvent;
  if (n.find("eventrecord") != std::string::npos) return SyncKind::EventRecord;
  if (n.find("streamsynchronize") != std::string::npos) return SyncKind::StreamSynchronize;
  if (n.find("eventsynchronize") != std::string::npos) return SyncKind::EventSynchronize;
  if (n.find("devicesynchronize") != std::string::npos ||
      n.find("ctxsynchronize") != std::string::npos)
    return SyncKind::DeviceSynchronize;
  return std::nullopt;
}

// A launch or synchronization call of `t`'s rank, added as load_run adds it.
void add_call(const SyncNames& names, const ApiCall& a, RankTrace& t) {
  if (a.kind != ApiKind::Runtime && a.kind != ApiKind::Driver) return;
  if (a.correlation != 0) t.launches.add(a.correlation, a.start);
  auto it = names.find(a.name);
  if (it != names.end()) t.syncs.push_back({it->second, a});
}

// Rank `r` of `d`, made when it has none.
RankTrace& rank_in(RunData& d, int32_t r) {
  RankTrace& t = d.ranks[r];
  t.info.rank = r;
  return t;
}

}  // namespace

RunData run_frame(const TraceReader& reader, int64_t run) {
  RunData d;
  d.run_id = run;
  d.reader = &reader;
  for (RankInfo& r : reader.ranks(run)) d.ranks[r.rank].info = std::move(r);
  for (StreamInfo& s : reader.streams(run))
    if (s.gpu) rank_in(d, s.rank).streams.push_back(std::move(s));
  return d;
}

namespace {

// The collectives in start order, as the analyses take them.
void sort_collectives(RankTrace& t) {
  auto less = [](const Collective& a, const Collective& b) { return a.start < b.start; };
  if (!std::is_sorted(t.collectives.begin(), t.collectives.end(), less))
    std::stable_sort(t.collectives.begin(), t.collectives.end(), less);
}

// A rank's GPU work by stream and start, its calls by start, the launch index sorted, and what
// the rows' growth reserved beyond them given back.
void finish_events(RankTrace& t) {
  t.launches.finish();
  auto by_stream = [](const auto& a, const auto& b) {
    return a.stream != b.stream ? a.stream < b.stream : a.start < b.start;
  };
  // The reader gives kernels and copies in this order already (its window index): a stable sort
  // would still merge every run of them (a fifth of the GUI's load of a large run).
  auto sort = [](auto& v, auto less) {
    if (!std::is_sorted(v.begin(), v.end(), less)) std::stable_sort(v.begin(), v.end(), less);
  };
  sort(t.kernels, by_stream);
  sort(t.memcpys, by_stream);
  sort(t.syncs, [](const SyncCall& a, const SyncCall& b) { return a.call.start < b.call.start; });
  t.kernels.shrink_to_fit();
  t.memcpys.shrink_to_fit();
  t.collectives.shrink_to_fit();
  t.syncs.shrink_to_fit();
}

}  // namespace

SyncNames sync_names(const std::vector<std::string>& strings) {
  SyncNames out;
  for (size_t id = 0; id < strings.size(); ++id)
    if (auto k = sync_kind_of(strings[id])) out.emplace(static_cast<int64_t>(id), *k);
  return out;
}

void fill_collectives(const TraceReader& reader, int64_t run, RankTrace& t) {
  t.collectives = reader.collectives(run, t.info.rank);  // in start order
}

SyncNames sync_names(const TraceReader& reader, int64_t run) {
  SyncNames out;
  for (const auto& [id, name] : reader.api_call_names(run))
    if (auto k = sync_kind_of(name)) out.emplace(id, *k);
  return out;
}

void LaunchIndex::finish() {
  std::stable_sort(v_.begin(), v_.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  v_.erase(std::unique(v_.begin(), v_.end(),
                       [](const auto& a, const auto& b) { return a.first == b.first; }),
           v_.end());
  v_.shrink_to_fit();
}

Ns LaunchIndex::find(int64_t correlation) const {
  auto it = std::lower_bound(v_.begin(), v_.end(), correlation,
                             [](const auto& e, int64_t c) { return e.first < c; });
  return it != v_.end() && it->first == correlation ? it->second : -1;
}

Ns RankTrace::launch_of(int64_t correlation) const {
  if (correlation == 0) return -1;
  return launches.find(correlation);
}

void RankTrace::index_steps() {
  steps_ordered = true;
  for (size_t i = 0; i < steps.size(); ++i)
    steps_ordered = steps_ordered && steps[i].start <= steps[i].end &&
                    (i == 0 || steps[i - 1].end <= steps[i].start);
}

int64_t RankTrace::step_at(Ns host_time) const {
  if (host_time < 0) return -1;
  if (steps_ordered) {  // the one window that can hold it: the last starting at or before it
    auto it = std::upper_bound(steps.begin(), steps.end(), host_time,
                               [](Ns t, const Step& s) { return t < s.start; });
    if (it == steps.begin()) return -1;
    --it;
    return host_time < it->end ? it->step : -1;
  }
  for (const Step& s : steps)
    if (host_time >= s.start && host_time < s.end) return s.step;
  return -1;
}

int64_t RankTrace::work_step(int64_t correlation, Ns start) const {
  if (correlation != 0 && !launches.empty()) return step_at(launch_of(correlation));
  return step_at(start);
}

int64_t RankTrace::kernel_step(const Kernel& k) const { return work_step(k.correlation, k.start); }

int64_t RankTrace::memcpy_step(const Memcpy& m) const { return work_step(m.correlation, m.start); }

int64_t RankTrace::collective_step(const Collective& c) const {
  if (c.enqueue >= 0) return step_at(c.enqueue);
  if (c.stream < 0) return step_at(c.start);  // host collective: host times
  return work_step(c.kernel_ref, c.start);
}

const std::string& RunData::str(StrId id) const {
  static const std::string kEmpty;
  if (reader) return reader->str(id);
  return id < strings.size() ? strings[id] : kEmpty;
}

std::vector<int32_t> RunData::rank_ids() const {
  std::vector<int32_t> out;
  for (const auto& [r, _] : ranks) out.push_back(r);
  return out;
}

const RankTrace* RunData::rank(int32_t r) const {
  auto it = ranks.find(r);
  return it == ranks.end() ? nullptr : &it->second;
}

int64_t load_bytes(const TraceReader& reader, int64_t run) {
  const TraceReader::Counts c = reader.counts(run);
  // An entry of the launch index, with the slack of the vector's growth.
  constexpr int64_t kLaunchNode = 24;
  const int64_t rows = c.kernels * static_cast<int64_t>(sizeof(Kernel)) +
                       (c.memcpys + c.memsets) * static_cast<int64_t>(sizeof(Memcpy)) +
                       c.collectives * static_cast<int64_t>(sizeof(Collective)) +
                       c.steps * static_cast<int64_t>(sizeof(Step)) + c.api_calls * kLaunchNode;
  return 2 * rows;
}

int64_t memory_left() {
  int64_t left = INT64_MAX;
  if (const char* e = std::getenv("BRAID_MEMORY_LIMIT_MB"); e && *e)
    left = std::min(left, std::max<int64_t>(0, std::atoll(e)) << 20);
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    long long kb = 0;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
        left = std::min<int64_t>(left, kb * 1024LL);
    std::fclose(f);
  }
  rlimit lim{};
  if (getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    long long pages = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%lld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    const int64_t mapped = pages * sysconf(_SC_PAGESIZE);
    left = std::min(left, std::max<int64_t>(0, static_cast<int64_t>(lim.rlim_cur) - mapped));
  }
  return left;
}

RunData load_run(const TraceReader& reader, int64_t run, const LoadTick& tick) {
  bool exists = false;
  for (const RunRow& r : reader.runs()) exists = exists || r.run_id == run;
  if (!exists) throw Error(ErrorCode::NotFound, reader.path() + ": no run " + std::to_string(run));
  if (const int64_t need = load_bytes(reader, run), left = memory_left(); need > left) {
    const TraceReader::Counts c = reader.counts(run);
    auto mib = [](int64_t b) { return std::to_string((b + (1 << 20) - 1) >> 20) + " MiB"; };
    throw Error(
        ErrorCode::Unsupported,
        reader.path() + ": run " + std::to_string(run) + " has " + std::to_string(c.kernels) +
            " kernels, " + std::to_string(c.memcpys + c.memsets) + " copies, " +
            std::to_string(c.collectives) + " collectives and " + std::to_string(c.api_calls) +
            " API calls; analyzing them needs about " + mib(need) + ", more than the " + mib(left) +
            " this process may still use (free memory, ulimit -v, "
            "BRAID_MEMORY_LIMIT_MB)");
  }
  RunData d = run_frame(reader, run);
  int64_t rows = 0;
  bool stopped = false;
  // True while the load goes on; counts the row and asks `tick` every 4096 rows.
  auto more = [&] {
    if (tick && (++rows & 4095) == 0 && !tick(rows)) stopped = true;
    return !stopped;
  };
  auto check = [&] {
    if (stopped)
      throw Error(ErrorCode::Internal,
                  reader.path() + ": loading run " + std::to_string(run) + " cancelled");
  };
  auto rank_of = [&](int32_t r) -> RankTrace& { return rank_in(d, r); };
  reader.kernels(run, [&](const Kernel& k) {
    rank_of(k.rank).kernels.push_back(k);
    return more();
  });
  check();
  reader.memcpys(run, [&](const Memcpy& m) {
    rank_of(m.rank).memcpys.push_back(m);
    return more();
  });
  check();
  reader.collectives(run, [&](const Collective& c) {
    rank_of(c.rank).collectives.push_back(c);
    return more();
  });
  check();
  for (const Step& s : reader.steps(run)) rank_of(s.rank).steps.push_back(s);
  d.comms = reader.communicators(run);

  // Only the synchronization calls: their names are found first, then only those rows read.
  const auto names = sync_names(reader, run);
  reader.runtime_calls(run, [&](const ApiCall& a) {
    add_call(names, a, rank_of(a.rank));
    return more();
  });
  check();
  for (auto& [_, t] : d.ranks) {
    t.index_steps();
    sort_collectives(t);
    finish_events(t);
  }
  return d;
}

RunData load_skeleton(const TraceReader& reader, int64_t run, const LoadTick& tick) {
  RunData d = run_frame(reader, run);
  int64_t rows = 0;
  auto more = [&] { return !tick || (++rows & 4095) != 0 || tick(rows); };
  auto rank_of = [&](int32_t r) -> RankTrace& { return rank_in(d, r); };
  bool go = true;
  // A rank's collectives at a time, each vector at its size (the whole run's query sorts every
  // collective of the run first, in a temporary B-tree that spills to disk at this size).
  for (int32_t r : reader.collective_ranks(run)) {
    if (!go) break;
    RankTrace& t = rank_of(r);
    t.collectives = reader.collectives(run, r);
    rows += static_cast<int64_t>(t.collectives.size());
    go = !tick || tick(rows);
  }
  for (const Step& s : reader.steps(run)) rank_of(s.rank).steps.push_back(s);
  d.comms = reader.communicators(run);
  // The launches of the collectives' kernels, each rank's first call of an id as load_run keeps.
  std::map<int32_t, std::vector<int64_t>> refs;
  for (auto& [r, t] : d.ranks) {
    t.index_steps();
    sort_collectives(t);
    std::vector<int64_t>& v = refs[r];
    for (const Collective& c : t.collectives)
      if (c.kernel_ref != 0) v.push_back(c.kernel_ref);
    std::sort(v.begin(), v.end());
  }
  // Only a collective with no enqueue time whose kernel's launch decides its step needs them.
  bool needed = false;
  for (const auto& [r, t] : d.ranks)
    for (const Collective& c : t.collectives)
      needed = needed || (c.enqueue < 0 && c.stream >= 0 && c.kernel_ref != 0);
  if (go && needed)
    reader.runtime_calls(run, [&](const ApiCall& a) {
      if (a.correlation != 0) {
        RankTrace& t = rank_of(a.rank);
        // Correlation 0 is never looked up: it says the rank's trace has launch calls.
        if (t.launches.empty()) t.launches.add(0, -1);
        const std::vector<int64_t>& v = refs[a.rank];
        if (std::binary_search(v.begin(), v.end(), a.correlation))
          t.launches.add(a.correlation, a.start);
      }
      return go = more();
    });
  if (!go)
    throw Error(ErrorCode::Internal,
                reader.path() + ": loading run " + std::to_string(run) + " cancelled");
  for (auto& [_, t] : d.ranks) t.launches.finish();
  return d;
}

void fill_rank(const TraceReader& reader, int64_t run, const SyncNames& names, RankTrace& t,
               RankShape* shape) {
  strip_rank(t);
  const int32_t r = t.info.rank;
  RankShape seen;
  auto stream = [&](int64_t s) {
    if (seen.streams.empty() || seen.streams.back() != s) seen.streams.push_back(s);
  };
  t.kernels = reader.kernels(run, r);
  t.memcpys = reader.memcpys(run, r);
  for (const Kernel& k : t.kernels) stream(k.stream);
  for (const Memcpy& m : t.memcpys) stream(m.stream);
  t.launches.clear();
  for (const ApiCall& a : reader.runtime_calls(run, r)) {
    add_call(names, a, t);
    if (a.correlation != 0) {
      if (seen.threads.empty() || seen.threads.back() != a.tid) seen.threads.push_back(a.tid);
      seen.longest_launch = std::max(seen.longest_launch, a.end - a.start);
    }
  }
  finish_events(t);
  if (shape) {
    // Kernels and copies came stream by stream, one after the other: each list sorted, once.
    std::sort(seen.streams.begin(), seen.streams.end());
    seen.streams.erase(std::unique(seen.streams.begin(), seen.streams.end()), seen.streams.end());
    *shape = std::move(seen);
  }
}

void fill_window(const TraceReader& reader, int64_t run, const SyncNames& names,
                 const RankWindow& w, RankTrace& t) {
  strip_rank(t);
  const int32_t r = t.info.rank;
  for (const RankWindow::Stream& s : w.streams) {
    reader.kernels(run, r, s.id, s.t0, w.t1, [&](const Kernel& k) {
      t.kernels.push_back(k);
      return true;
    });
    reader.memcpys(run, r, s.id, s.t0, w.t1, [&](const Memcpy& m) {
      t.memcpys.push_back(m);
      return true;
    });
  }
  // The skeleton's launches are in already (with, for a rank that has launch calls, the mark of
  // id 0 that strip_rank keeps): of an id both have, the skeleton's (the whole rank's first
  // call) is kept.
  for (int64_t tid : w.threads)
    reader.runtime_calls(run, r, tid, w.host0, w.host1, [&](const ApiCall& a) {
      add_call(names, a, t);
      return true;
    });
  finish_events(t);
}

void strip_rank(RankTrace& t) {
  std::vector<Kernel>().swap(t.kernels);
  std::vector<Memcpy>().swap(t.memcpys);
  std::vector<SyncCall>().swap(t.syncs);
  // Back to the skeleton's launches: its collectives' (the first call of each id) and, when the
  // rank has launch calls, the mark of id 0.
  LaunchIndex kept;
  if (!t.launches.empty()) kept.add(0, -1);
  for (const Collective& c : t.collectives)
    if (const Ns at = t.launch_of(c.kernel_ref); at >= 0) kept.add(c.kernel_ref, at);
  kept.finish();
  t.launches = std::move(kept);
}

int64_t default_run(const TraceReader& reader) {
  auto runs = reader.runs();
  if (runs.empty()) throw Error(ErrorCode::Empty, reader.path() + ": the file holds no run");
  if (runs.size() == 1) return runs[0].run_id;
  for (const RunRow& r : runs)
    if (r.kind == RunKind::Captured || r.kind == RunKind::Imported) return r.run_id;
  return runs[0].run_id;
}

}  // namespace braid::analysis
