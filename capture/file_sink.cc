#include "capture/file_sink.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>

#include "trace/error.h"
#include "trace/schema.h"

namespace fs = std::filesystem;

namespace braid::capture {
namespace {

// Capture-only tables, next to the schema's own (docs/schema.md, "Tables written by capture").
const char* kCaptureTables = R"SQL(
CREATE TABLE IF NOT EXISTS nccl_calls(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, comm_id INTEGER NOT NULL, seq INTEGER NOT NULL,
  call_id INTEGER NOT NULL, group_id INTEGER NOT NULL, op TEXT NOT NULL, redop_id INTEGER NOT NULL,
  sendbuff INTEGER NOT NULL, recvbuff INTEGER NOT NULL, count INTEGER NOT NULL,
  dtype_id INTEGER NOT NULL, peer_or_root INTEGER NOT NULL, stream_handle INTEGER NOT NULL,
  tid INTEGER NOT NULL, enqueue_ns INTEGER NOT NULL, return_ns INTEGER NOT NULL,
  result INTEGER NOT NULL, comm_rank INTEGER NOT NULL, comm_size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS nccl_proxy_ops(
  run_id INTEGER NOT NULL, rank INTEGER NOT NULL, comm_id INTEGER NOT NULL, seq INTEGER NOT NULL,
  call_id INTEGER NOT NULL, channel INTEGER NOT NULL, peer INTEGER NOT NULL,
  is_send INTEGER NOT NULL, steps INTEGER NOT NULL, chunk_size INTEGER NOT NULL,
  tid INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS nccl_calls_match ON nccl_calls(run_id, comm_id, seq);
)SQL";

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string placeholders(int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) s += i ? ",?" : "?";
  return s + ")";
}

int64_t sid(StrId id) { return static_cast<int64_t>(id); }

}  // namespace

FileSink::FileSink(std::string path, const FileSinkOptions& opts) : path_(std::move(path)) {
  fs::path target(path_);
  std::error_code ec;
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw Error(ErrorCode::NotFound, path_ + ": directory " + dir.string() + " does not exist");
  for (const char* sfx : {"", "-wal", "-shm", "-journal"}) fs::remove(path_ + sfx, ec);
  if (sqlite3_open_v2(path_.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error(ErrorCode::Io, path_ + ": cannot create: " + msg);
  }
  try {
    // WAL + synchronous=NORMAL: a committed transaction survives the death of the process
    // (only an OS crash may lose the last ones), and a commit costs no fsync.
    sql::exec(db_, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
    sql::exec(db_, "BEGIN");
    schema::create_tables(db_);
    schema::create_indexes(db_);
    sql::exec(db_, kCaptureTables);
    sql::Stmt run(db_, "INSERT INTO runs(run_id, kind, schedule_id, backend, source, label,"
                       " created_at) VALUES (?,?,NULL,?,?,?,?)");
    run.bind(1, kRun);
    run.bind(2, to_string(RunKind::Captured));
    run.bind(3, opts.backend);
    run.bind(4, opts.source);
    run.bind(5, opts.label);
    run.bind(6, now_iso8601());
    run.run();
    sql::exec(db_, "COMMIT");  // from here on the file is a valid (empty) capture
    ins_string_ = sql::Stmt(db_, "INSERT INTO strings(id, text) VALUES (?, ?)");
    ins_kernel_ = sql::Stmt(db_, "INSERT INTO kernels VALUES " + placeholders(9));
    ins_memcpy_ = sql::Stmt(db_, "INSERT INTO memcpys VALUES " + placeholders(9));
    ins_api_ = sql::Stmt(db_, "INSERT INTO api_calls VALUES " + placeholders(9));
    ins_range_ = sql::Stmt(db_, "INSERT INTO nvtx_ranges VALUES " + placeholders(9));
    ins_coll_ = sql::Stmt(db_, "INSERT INTO collectives VALUES " + placeholders(20));
    ins_step_ = sql::Stmt(db_, "INSERT OR REPLACE INTO steps VALUES " + placeholders(5));
    ins_call_ = sql::Stmt(db_, "INSERT INTO nccl_calls VALUES " + placeholders(20));
    ins_proxy_ = sql::Stmt(db_, "INSERT INTO nccl_proxy_ops VALUES " + placeholders(13));
    sql::exec(db_, "BEGIN");
  } catch (...) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw;
  }
}

FileSink::~FileSink() {
  try {
    close();
  } catch (...) {
  }
}

StrId FileSink::intern(std::string_view s) {
  if (s.empty()) return 0;
  auto it = strings_.find(std::string(s));
  if (it != strings_.end()) return it->second;
  StrId id = next_string_++;
  strings_.emplace(std::string(s), id);
  ins_string_.bind(1, sid(id));
  ins_string_.bind(2, s);
  ins_string_.run();
  ++pending_;
  return id;
}

void FileSink::add(const Kernel& k) {
  auto& s = ins_kernel_;
  s.bind(1, kRun); s.bind(2, k.rank); s.bind(3, k.stream); s.bind(4, k.start); s.bind(5, k.end);
  s.bind(6, sid(k.name)); s.bind(7, static_cast<int>(k.category)); s.bind(8, k.correlation);
  s.bind(9, k.external_id);
  s.run();
  ++pending_;
}

void FileSink::add(const Memcpy& m) {
  auto& s = ins_memcpy_;
  s.bind(1, kRun); s.bind(2, m.rank); s.bind(3, m.stream); s.bind(4, m.start); s.bind(5, m.end);
  s.bind(6, to_string(m.kind)); s.bind(7, m.bytes); s.bind(8, sid(m.name));
  s.bind(9, m.correlation);
  s.run();
  ++pending_;
}

void FileSink::add(const ApiCall& a) {
  auto& s = ins_api_;
  s.bind(1, kRun); s.bind(2, a.rank); s.bind(3, a.tid); s.bind(4, a.start); s.bind(5, a.end);
  s.bind(6, sid(a.name)); s.bind(7, to_string(a.kind)); s.bind(8, a.correlation);
  s.bind(9, a.external_id);
  s.run();
  ++pending_;
}

void FileSink::add(const Range& r) {
  auto& s = ins_range_;
  s.bind(1, kRun); s.bind(2, r.rank); s.bind(3, r.stream); s.bind(4, r.on_gpu ? 1 : 0);
  s.bind(5, r.start); s.bind(6, r.end); s.bind(7, sid(r.name)); s.bind(8, sid(r.domain));
  s.bind(9, sid(r.payload));
  s.run();
  ++pending_;
}

void FileSink::add(const Collective& c) {
  auto& s = ins_coll_;
  s.bind(1, kRun); s.bind(2, c.rank); s.bind(3, sid(c.comm)); s.bind(4, c.seq);
  s.bind(5, to_string(c.op)); s.bind(6, sid(c.dtype)); s.bind(7, c.in_count);
  s.bind(8, c.out_count); s.bind(9, c.bytes); s.bind(10, c.peer_or_root); s.bind(11, c.stream);
  s.bind(12, c.start); s.bind(13, c.end); s.bind(14, c.enqueue); s.bind(15, sid(c.algo));
  s.bind(16, sid(c.proto)); s.bind(17, c.channels); s.bind(18, c.group_size);
  s.bind(19, sid(c.name)); s.bind(20, c.kernel_ref);
  s.run();
  ++pending_;
}

void FileSink::add(const Step& st) {
  auto& s = ins_step_;
  s.bind(1, kRun); s.bind(2, st.rank); s.bind(3, st.step); s.bind(4, st.start); s.bind(5, st.end);
  s.run();
  ++pending_;
}

void FileSink::add(const NcclCallRow& c) {
  auto& s = ins_call_;
  s.bind(1, kRun); s.bind(2, c.rank); s.bind(3, sid(c.comm)); s.bind(4, c.seq);
  s.bind(5, c.call_id); s.bind(6, c.group_id); s.bind(7, to_string(c.op));
  s.bind(8, sid(c.redop)); s.bind(9, static_cast<int64_t>(c.sendbuff));
  s.bind(10, static_cast<int64_t>(c.recvbuff)); s.bind(11, c.count); s.bind(12, sid(c.dtype));
  s.bind(13, c.peer_or_root); s.bind(14, static_cast<int64_t>(c.stream_handle));
  s.bind(15, c.tid); s.bind(16, c.enqueue); s.bind(17, c.ret); s.bind(18, c.result);
  s.bind(19, c.comm_rank); s.bind(20, c.comm_size);
  s.run();
  ++pending_;
}

void FileSink::add(const ProxyOpRow& p) {
  auto& s = ins_proxy_;
  s.bind(1, kRun); s.bind(2, p.rank); s.bind(3, sid(p.comm)); s.bind(4, p.seq);
  s.bind(5, p.call_id); s.bind(6, p.channel); s.bind(7, p.peer); s.bind(8, p.is_send ? 1 : 0);
  s.bind(9, p.steps); s.bind(10, p.chunk_size); s.bind(11, p.tid); s.bind(12, p.start);
  s.bind(13, p.end);
  s.run();
  ++pending_;
}

void FileSink::set_rank_info(const RankInfo& r) {
  ranks_[r.rank] = r;
  small_dirty_ = true;
}
void FileSink::add_stream(const StreamInfo& s) {
  auto [it, inserted] = streams_.try_emplace({s.rank, s.stream, s.gpu}, s.label);
  if (!inserted && !s.label.empty() && it->second != s.label) it->second = s.label;
  else if (!inserted) return;
  small_dirty_ = true;
}
void FileSink::add_communicator(const Communicator& c) {
  comms_[c.comm] = c;
  small_dirty_ = true;
}
void FileSink::set_diagnostic(const Diagnostic& d) {
  diags_[{d.rank, d.code}] = d;
  small_dirty_ = true;
}
void FileSink::set_meta(std::string_view key, std::string_view value) {
  meta_[std::string(key)] = std::string(value);
  small_dirty_ = true;
}

void FileSink::renumber_rank(int32_t from, int32_t to) {
  if (from == to) return;
  for (const char* t : {"kernels", "memcpys", "api_calls", "nvtx_ranges", "steps", "collectives",
                        "nccl_calls", "nccl_proxy_ops", "streams", "ranks", "diagnostics"}) {
    sql::Stmt s(db_, std::string("UPDATE ") + t + " SET rank=? WHERE run_id=? AND rank=?");
    s.bind(1, to);
    s.bind(2, kRun);
    s.bind(3, from);
    s.run();
  }
  auto move_keys = [&](auto& m, auto rank_of, auto rekey) {
    std::decay_t<decltype(m)> out;
    for (auto& [k, v] : m) out.emplace(rank_of(k) == from ? rekey(k) : k, v);
    m.swap(out);
  };
  move_keys(streams_, [](auto& k) { return std::get<0>(k); },
            [&](auto& k) { return std::make_tuple(to, std::get<1>(k), std::get<2>(k)); });
  move_keys(diags_, [](auto& k) { return k.first; },
            [&](auto& k) { return std::make_pair(to, k.second); });
  for (auto& [k, d] : diags_) if (d.rank == from) d.rank = to;
  if (auto it = ranks_.find(from); it != ranks_.end()) {
    RankInfo r = it->second;
    ranks_.erase(it);
    r.rank = to;
    ranks_[to] = r;
  }
  small_dirty_ = true;
}

void FileSink::write_small_tables() {
  if (!small_dirty_) return;
  small_dirty_ = false;
  {
    sql::Stmt q(db_, "INSERT OR REPLACE INTO ranks(run_id, rank, world_size, host, pid, device,"
                     " device_name, backend, nccl_version, source, clock_offset_ns,"
                     " offset_error_ns) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)");
    for (auto& [rank, r] : ranks_) {
      q.bind(1, kRun);
      q.bind(2, r.rank);
      if (r.world_size >= 0) q.bind(3, r.world_size); else q.bind_null(3);
      q.bind(4, r.host);
      if (r.pid >= 0) q.bind(5, r.pid); else q.bind_null(5);
      if (r.device >= 0) q.bind(6, r.device); else q.bind_null(6);
      q.bind(7, r.device_name);
      q.bind(8, r.backend);
      q.bind(9, r.nccl_version);
      q.bind(10, r.source);
      q.bind(11, r.clock_offset);
      if (r.offset_error >= 0) q.bind(12, r.offset_error); else q.bind_null(12);
      q.run();
    }
  }
  {
    sql::Stmt q(db_, "INSERT OR REPLACE INTO streams(run_id, rank, stream, gpu, label)"
                     " VALUES (?,?,?,?,?)");
    for (auto& [k, label] : streams_) {
      q.bind(1, kRun);
      q.bind(2, std::get<0>(k));
      q.bind(3, std::get<1>(k));
      q.bind(4, std::get<2>(k) ? 1 : 0);
      q.bind(5, label);
      q.run();
    }
  }
  {
    sql::Stmt q(db_, "INSERT OR REPLACE INTO communicators(run_id, comm, nranks, ranks, label,"
                     " backend) VALUES (?,?,?,?,?,?)");
    for (auto& [id, c] : comms_) {
      q.bind(1, kRun);
      q.bind(2, c.comm);
      if (c.nranks >= 0) q.bind(3, c.nranks); else q.bind_null(3);
      q.bind(4, c.ranks);
      q.bind(5, c.label);
      q.bind(6, c.backend);
      q.run();
    }
  }
  {
    // diagnostics has no key: the current totals replace the rows of this run.
    sql::Stmt del(db_, "DELETE FROM diagnostics WHERE run_id=?");
    del.bind(1, kRun);
    del.run();
    sql::Stmt q(db_, "INSERT INTO diagnostics(run_id, rank, severity, code, count, detail)"
                     " VALUES (?,?,?,?,?,?)");
    for (auto& [k, d] : diags_) {
      q.bind(1, kRun);
      q.bind(2, d.rank);
      q.bind(3, to_string(d.severity));
      q.bind(4, d.code);
      q.bind(5, d.count);
      q.bind(6, d.detail);
      q.run();
    }
  }
  {
    sql::Stmt q(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)");
    for (auto& [k, v] : meta_) {
      q.bind(1, k);
      q.bind(2, v);
      q.run();
    }
  }
}

void FileSink::checkpoint() {
  if (closed_) return;
  write_small_tables();
  sql::exec(db_, "COMMIT");
  committed_ += pending_;
  pending_ = 0;
  sql::exec(db_, "BEGIN");
}

void FileSink::close() {
  if (closed_ || !db_) return;
  write_small_tables();
  sql::exec(db_, "COMMIT");
  committed_ += pending_;
  pending_ = 0;
  closed_ = true;
  // Fold the WAL into the file, so the finished capture is one file (still in WAL mode, as
  // TraceWriter leaves its files).
  sqlite3_exec(db_, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
  // Prepared statements must go before the connection.
  for (auto* s : {&ins_string_, &ins_kernel_, &ins_memcpy_, &ins_api_, &ins_range_, &ins_coll_,
                  &ins_step_, &ins_call_, &ins_proxy_})
    *s = sql::Stmt();
  sqlite3_close_v2(db_);
  db_ = nullptr;
  std::error_code ec;
  fs::remove(path_ + "-shm", ec);
  if (fs::file_size(path_ + "-wal", ec) == 0) fs::remove(path_ + "-wal", ec);
}

}  // namespace braid::capture
