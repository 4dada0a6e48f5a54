#include "analysis/job.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <unordered_map>

#include "trace/error.h"

namespace braid::analysis {

bool Job::holds(int32_t rank) const {
  auto it = owner.find(rank);
  return it != owner.end() && it->second == here;
}

namespace {

// The job's names: one id per distinct text, 0 for none (as the store's ids).
class Pool {
 public:
  explicit Pool(std::vector<std::string>& strings) : s_(strings) {
    if (s_.empty()) s_.emplace_back();
  }
  StrId id(const std::string& text) {
    if (text.empty()) return 0;
    auto [it, fresh] = ids_.emplace(text, static_cast<StrId>(s_.size()));
    if (fresh) s_.push_back(text);
    return it->second;
  }

 private:
  std::vector<std::string>& s_;
  std::unordered_map<std::string, StrId> ids_;
};

// A file's run, its names moved to the job's ids.
void adopt(RunData& job, RunData&& file, const TraceReader& reader, Pool& pool) {
  std::unordered_map<StrId, StrId> seen;
  auto id = [&](StrId& s) {
    if (s == 0) return;
    auto it = seen.find(s);
    if (it == seen.end()) it = seen.emplace(s, pool.id(reader.str(s))).first;
    s = it->second;
  };
  for (auto& [r, t] : file.ranks) {
    for (Kernel& k : t.kernels) id(k.name);
    for (Memcpy& m : t.memcpys) id(m.name);
    for (SyncCall& c : t.syncs) id(c.call.name);
    for (Collective& c : t.collectives) {
      id(c.comm), id(c.dtype), id(c.algo), id(c.proto), id(c.name);
    }
    job.ranks.emplace(r, std::move(t));
  }
}

void put_info(WireOut& w, const RankInfo& i) {
  w.i64(i.rank).i64(i.world_size).str(i.host).i64(i.pid).i64(i.device).str(i.device_name);
  w.str(i.backend).str(i.nccl_version).str(i.source).i64(i.clock_offset).i64(i.offset_error);
}

RankInfo get_info(WireIn& in) {
  RankInfo i;
  i.rank = static_cast<int32_t>(in.i64());
  i.world_size = static_cast<int32_t>(in.i64());
  i.host = in.str();
  i.pid = in.i64();
  i.device = static_cast<int32_t>(in.i64());
  i.device_name = in.str();
  i.backend = in.str();
  i.nccl_version = in.str();
  i.source = in.str();
  i.clock_offset = in.i64();
  i.offset_error = in.i64();
  return i;
}

// What the other processes get of a rank: its info, steps, collectives, and the launch times
// that decide the collectives' steps (RankTrace::collective_step).
void put_rank(WireOut& w, const RankTrace& t, const RunData& run) {
  put_info(w, t.info);
  w.i64(static_cast<int64_t>(t.steps.size()));
  for (const Step& s : t.steps) w.i64(s.step).i64(s.start).i64(s.end);
  w.i64(static_cast<int64_t>(t.collectives.size()));
  std::vector<std::pair<int64_t, Ns>> launches;
  for (const Collective& c : t.collectives) {
    w.str(run.str(c.comm)).i64(c.seq).i64(static_cast<int64_t>(c.op)).str(run.str(c.dtype));
    w.i64(c.in_count).i64(c.out_count).i64(c.bytes).i64(c.peer_or_root).i64(c.stream);
    w.i64(c.start).i64(c.end).i64(c.enqueue).str(run.str(c.algo)).str(run.str(c.proto));
    w.i64(c.channels).i64(c.group_size).str(run.str(c.name)).i64(c.kernel_ref);
    if (const Ns at = t.launch_of(c.kernel_ref); at >= 0) launches.push_back({c.kernel_ref, at});
  }
  w.i64(t.launches.empty() ? 0 : 1).i64(static_cast<int64_t>(launches.size()));
  for (auto [corr, at] : launches) w.i64(corr).i64(at);
}

RankTrace get_rank(WireIn& in, Pool& pool) {
  RankTrace t;
  t.info = get_info(in);
  for (int64_t n = in.i64(); n > 0; --n) {
    Step s;
    s.rank = t.info.rank;
    s.step = in.i64();
    s.start = in.i64();
    s.end = in.i64();
    t.steps.push_back(s);
  }
  for (int64_t n = in.i64(); n > 0; --n) {
    Collective c;
    c.rank = t.info.rank;
    c.comm = pool.id(in.str());
    c.seq = in.i64();
    c.op = static_cast<CollOp>(in.i64());
    c.dtype = pool.id(in.str());
    c.in_count = in.i64();
    c.out_count = in.i64();
    c.bytes = in.i64();
    c.peer_or_root = static_cast<int32_t>(in.i64());
    c.stream = in.i64();
    c.start = in.i64();
    c.end = in.i64();
    c.enqueue = in.i64();
    c.algo = pool.id(in.str());
    c.proto = pool.id(in.str());
    c.channels = static_cast<int32_t>(in.i64());
    c.group_size = static_cast<int32_t>(in.i64());
    c.name = pool.id(in.str());
    c.kernel_ref = in.i64();
    t.collectives.push_back(c);
  }
  t.index_steps();
  // A rank whose trace has launch calls decides its collectives' steps by them: keep the index
  // non-empty (correlation 0 is never looked up) even when none of its collectives has one.
  if (in.i64() != 0) t.launches.add(0, -1);
  for (int64_t n = in.i64(); n > 0; --n) {
    const int64_t corr = in.i64();
    t.launches.add(corr, in.i64());
  }
  t.launches.finish();
  return t;
}

void put_comm(WireOut& w, const Communicator& c) {
  w.str(c.comm).i64(c.nranks).str(c.ranks).str(c.label).str(c.backend);
}

Communicator get_comm(WireIn& in) {
  Communicator c;
  c.comm = in.str();
  c.nranks = static_cast<int32_t>(in.i64());
  c.ranks = in.str();
  c.label = in.str();
  c.backend = in.str();
  return c;
}

}  // namespace

Job single_file_job(const TraceReader& reader, int64_t run) {
  Job job;
  job.run = load_run(reader, run);
  JobFile f{reader.path(), run, 0, job.run.rank_ids()};
  for (int32_t r : f.ranks) job.owner[r] = 0;
  job.files.push_back(std::move(f));
  return job;
}

Job load_job(const std::vector<std::string>& paths, int64_t run, Exchange& ex) {
  if (paths.empty()) throw JobError(ErrorCode::Usage, "no file to analyze");
  {
    std::map<std::string, size_t> seen;
    for (size_t i = 0; i < paths.size(); ++i) {
      std::error_code ec;
      std::string key = std::filesystem::weakly_canonical(paths[i], ec).string();
      if (ec) key = paths[i];
      if (!seen.emplace(key, i).second)
        throw JobError(ErrorCode::Usage, paths[i] + " is given twice (each file of the job once)");
    }
  }
  Job job;
  job.here = ex.index();
  Pool pool(job.run.strings);
  // This process's files, loaded in full; per file what the others need of it: its run, its
  // ranks, its communicators. The first failure ends the loading.
  WireOut files;
  int64_t loaded = 0;
  std::string failure;
  auto failure_code = ErrorCode::Internal;
  try {
    for (size_t i = static_cast<size_t>(ex.index()); i < paths.size();
         i += static_cast<size_t>(ex.size())) {
      TraceReader reader(paths[i]);
      const int64_t id = run >= 0 ? run : default_run(reader);
      RunData d = load_run(reader, id);
      if (d.ranks.empty())
        throw Error(ErrorCode::Empty, paths[i] + ": run " + std::to_string(id) + " has no ranks");
      files.i64(static_cast<int64_t>(i)).i64(id).i64(static_cast<int64_t>(d.ranks.size()));
      for (const auto& [r, t] : d.ranks) put_rank(files, t, d);
      files.i64(static_cast<int64_t>(d.comms.size()));
      for (const Communicator& c : d.comms) put_comm(files, c);
      adopt(job.run, std::move(d), reader, pool);
      ++loaded;
    }
  } catch (const Error& e) {
    failure = e.what();
    failure_code = e.code();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  WireOut mine;
  mine.i64(static_cast<int64_t>(failure_code)).str(failure).i64(failure.empty() ? loaded : 0);
  std::string bytes = mine.take() + (failure.empty() ? files.take() : std::string());
  std::vector<std::string> all = ex.allgather(std::move(bytes));
  // The first failure, in process order, is every process's.
  for (const std::string& b : all) {
    WireIn in(b);
    const auto code = static_cast<ErrorCode>(in.i64());
    if (std::string why = in.str(); !why.empty()) throw JobError(code, why);
  }

  job.files.resize(paths.size());
  std::vector<std::vector<Communicator>> comms_of(paths.size());
  for (int p = 0; p < static_cast<int>(all.size()); ++p) {
    WireIn in(all[p]);
    in.i64();
    in.str();
    for (int64_t n = in.i64(); n > 0; --n) {
      const auto i = static_cast<size_t>(in.i64());
      JobFile& f = job.files.at(i);
      f.path = paths[i];
      f.run = in.i64();
      f.owner = p;
      for (int64_t k = in.i64(); k > 0; --k) {
        RankTrace t = get_rank(in, pool);
        const int32_t r = t.info.rank;
        f.ranks.push_back(r);
        job.owner[r] = p;
        if (p != job.here) job.run.ranks.emplace(r, std::move(t));
      }
      for (int64_t k = in.i64(); k > 0; --k) comms_of[i].push_back(get_comm(in));
    }
  }
  // A rank in two files, named in the order the files were given.
  std::map<int32_t, size_t> file_of;
  for (size_t i = 0; i < job.files.size(); ++i)
    for (int32_t r : job.files[i].ranks)
      if (auto [it, fresh] = file_of.emplace(r, i); !fresh)
        throw JobError(ErrorCode::BadFormat, paths[i] + ": rank " + std::to_string(r) +
                                                 " is also in " + paths[it->second] +
                                                 " (each rank belongs in one file of the job)");
  // The communicators as the files list them, each once (the first file's description).
  std::set<std::string> seen;
  for (const auto& list : comms_of)
    for (const Communicator& c : list)
      if (seen.insert(c.comm).second) job.run.comms.push_back(c);
  return job;
}

}  // namespace braid::analysis
