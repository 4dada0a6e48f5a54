#include "trace/writer.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>

#include "trace/error.h"
#include "trace/schema.h"
#include "trace/sqlite_util.h"
#include "trace/temp_cleanup.h"

namespace fs = std::filesystem;

namespace braid {
namespace {

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---- row binding, one function per table; the column order is the table's ----
int bind_row(sql::Stmt& s, int i, int64_t run, const Kernel& k) {
  s.bind(i++, run); s.bind(i++, k.rank); s.bind(i++, k.stream); s.bind(i++, k.start);
  s.bind(i++, k.end); s.bind(i++, static_cast<int64_t>(k.name));
  s.bind(i++, static_cast<int>(k.category)); s.bind(i++, k.correlation);
  s.bind(i++, k.external_id);
  return i;
}
int bind_row(sql::Stmt& s, int i, int64_t run, const Memcpy& m) {
  s.bind(i++, run); s.bind(i++, m.rank); s.bind(i++, m.stream); s.bind(i++, m.start);
  s.bind(i++, m.end); s.bind(i++, to_string(m.kind)); s.bind(i++, m.bytes);
  s.bind(i++, static_cast<int64_t>(m.name)); s.bind(i++, m.correlation);
  return i;
}
int bind_row(sql::Stmt& s, int i, int64_t run, const ApiCall& a) {
  s.bind(i++, run); s.bind(i++, a.rank); s.bind(i++, a.tid); s.bind(i++, a.start);
  s.bind(i++, a.end); s.bind(i++, static_cast<int64_t>(a.name)); s.bind(i++, to_string(a.kind));
  s.bind(i++, a.correlation); s.bind(i++, a.external_id);
  return i;
}
int bind_row(sql::Stmt& s, int i, int64_t run, const Range& r) {
  s.bind(i++, run); s.bind(i++, r.rank); s.bind(i++, r.stream); s.bind(i++, r.on_gpu ? 1 : 0);
  s.bind(i++, r.start); s.bind(i++, r.end); s.bind(i++, static_cast<int64_t>(r.name));
  s.bind(i++, static_cast<int64_t>(r.domain)); s.bind(i++, static_cast<int64_t>(r.payload));
  return i;
}
int bind_row(sql::Stmt& s, int i, int64_t run, const Collective& c) {
  s.bind(i++, run); s.bind(i++, c.rank); s.bind(i++, static_cast<int64_t>(c.comm));
  s.bind(i++, c.seq); s.bind(i++, to_string(c.op)); s.bind(i++, static_cast<int64_t>(c.dtype));
  s.bind(i++, c.in_count); s.bind(i++, c.out_count); s.bind(i++, c.bytes);
  s.bind(i++, c.peer_or_root); s.bind(i++, c.stream); s.bind(i++, c.start); s.bind(i++, c.end);
  s.bind(i++, c.enqueue); s.bind(i++, static_cast<int64_t>(c.algo));
  s.bind(i++, static_cast<int64_t>(c.proto)); s.bind(i++, c.channels); s.bind(i++, c.group_size);
  s.bind(i++, static_cast<int64_t>(c.name)); s.bind(i++, c.kernel_ref);
  return i;
}

template <typename T> struct Table;
template <> struct Table<Kernel> { static constexpr const char* name = "kernels"; static constexpr int cols = 9; };
template <> struct Table<Memcpy> { static constexpr const char* name = "memcpys"; static constexpr int cols = 9; };
template <> struct Table<ApiCall> { static constexpr const char* name = "api_calls"; static constexpr int cols = 9; };
template <> struct Table<Range> { static constexpr const char* name = "nvtx_ranges"; static constexpr int cols = 9; };
template <> struct Table<Collective> { static constexpr const char* name = "collectives"; static constexpr int cols = 20; };

std::string insert_sql(const char* table, int cols, int rows) {
  std::string row = "(";
  for (int c = 0; c < cols; ++c) row += c ? ",?" : "?";
  row += ")";
  std::string s = std::string("INSERT INTO ") + table + " VALUES ";
  for (int r = 0; r < rows; ++r) {
    if (r) s += ',';
    s += row;
  }
  return s;
}

// Inserts rows with a statement of kMulti rows at a time, then single rows for the tail. The
// statements are prepared once per writer thread (cached per database handle and table).
template <typename T>
void insert_rows(sqlite3* db, int64_t run, const std::vector<T>& rows) {
  constexpr int kMulti = Table<T>::cols > 10 ? 32 : 64;
  static thread_local std::map<sqlite3*, std::pair<sql::Stmt, sql::Stmt>> cache;
  auto it = cache.find(db);
  if (it == cache.end()) {
    it = cache
             .emplace(db, std::make_pair(
                              sql::Stmt(db, insert_sql(Table<T>::name, Table<T>::cols, kMulti)),
                              sql::Stmt(db, insert_sql(Table<T>::name, Table<T>::cols, 1))))
             .first;
  }
  auto& [multi, single] = it->second;
  size_t i = 0;
  for (; i + kMulti <= rows.size(); i += kMulti) {
    int p = 1;
    for (int r = 0; r < kMulti; ++r) p = bind_row(multi, p, run, rows[i + r]);
    multi.step();
    sqlite3_reset(multi.get());
  }
  for (; i < rows.size(); ++i) {
    bind_row(single, 1, run, rows[i]);
    single.step();
    sqlite3_reset(single.get());
  }
}

void fsync_path(const std::string& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

// Rows of the small tables, kept in memory and written at commit (a later add replaces).
struct TraceWriter::Small {
  struct RunRow {
    RunKind kind;
    std::string source, backend, label;
    int64_t schedule_id;
  };
  std::map<int64_t, RunRow> runs;
  std::map<std::pair<int64_t, int32_t>, RankInfo> ranks;
  std::map<std::tuple<int64_t, int32_t, int64_t, bool>, std::string> streams;
  std::map<std::pair<int64_t, std::string>, Communicator> comms;
  std::map<std::tuple<int64_t, int32_t, std::string>, Diagnostic> diags;
  std::map<std::tuple<int64_t, int32_t, int64_t>, Step> steps;
  std::map<std::string, std::string> meta;
};

TraceWriter::TraceWriter(std::string path, Mode mode)
    : path_(std::move(path)), mode_(mode), small_(std::make_unique<Small>()) {
  std::error_code ec;
  bool exists = fs::exists(path_, ec);
  if (mode_ == Mode::Create && exists)
    throw Error(ErrorCode::Io, path_ + ": already exists (use --force to replace it)");
  fs::path target(path_);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw Error(ErrorCode::NotFound, path_ + ": directory " + dir.string() + " does not exist");
  tmp_ = (dir / ("." + target.filename().string() + ".tmp-" + std::to_string(getpid()))).string();
  fs::remove(tmp_, ec);

  if (mode_ == Mode::Append && exists) {
    // Validate first, so a foreign or newer file is refused before anything is copied.
    sqlite3* probe = nullptr;
    if (sqlite3_open_v2(path_.c_str(), &probe, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      sqlite3_close(probe);
      throw Error(ErrorCode::Io, path_ + ": cannot open");
    }
    try {
      schema::check(probe, path_);
      // Fold a WAL left by a reader into the main file before copying it.
      sqlite3_close(probe);
      probe = nullptr;
      fs::copy_file(path_, tmp_, fs::copy_options::overwrite_existing, ec);
      if (ec) throw Error(ErrorCode::Io, path_ + ": cannot copy to " + tmp_ + ": " + ec.message());
      for (const char* sfx : {"-wal"}) {
        if (fs::exists(path_ + sfx, ec)) fs::copy_file(path_ + sfx, tmp_ + sfx, fs::copy_options::overwrite_existing, ec);
      }
    } catch (...) {
      if (probe) sqlite3_close(probe);
      throw;
    }
  }
  register_temp_for_cleanup(tmp_);
  if (sqlite3_open_v2(tmp_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                          SQLITE_OPEN_NOMUTEX,  // one thread at a time uses it
                      nullptr) !=
      SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error(ErrorCode::Io, tmp_ + ": cannot create: " + msg);
  }
  try {
    // The temp file is private until the rename: no journal, no fsync per transaction.
    sql::exec(db_, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;"
                   "PRAGMA temp_store=MEMORY; PRAGMA locking_mode=EXCLUSIVE");
    if (mode_ == Mode::Append && exists) {
      schema::migrate(db_, path_);
      next_run_ = sql::scalar(db_, "SELECT COALESCE(MAX(run_id), 0) + 1 FROM runs", 1);
      sql::Stmt s(db_, "SELECT id, text FROM strings");
      while (s.step()) {
        StrId id = static_cast<StrId>(s.i64(0));
        arena_.push_back(s.text(1));
        ids_.emplace(arena_.back(), id);
        next_string_ = std::max<StrId>(next_string_, id + 1);
      }
    } else {
      schema::create_tables(db_);
      // Indexes from the start: the writer thread maintains them while the importer parses,
      // which measured faster end to end than one CREATE INDEX after the load (BENCHMARKS.md).
      schema::create_indexes(db_);
    }
    sql::exec(db_, "BEGIN");
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    fs::remove(tmp_, ec);
    unregister_temp_for_cleanup();
    throw;
  }
  thread_ = std::thread([this] { worker(); });
}

TraceWriter::~TraceWriter() {
  try {
    abort();
  } catch (...) {
  }
}

int64_t TraceWriter::begin_run(RunKind kind, std::string_view source, std::string_view backend,
                               std::string_view label, int64_t schedule_id) {
  int64_t id = next_run_++;
  small_->runs[id] = {kind, std::string(source), std::string(backend), std::string(label),
                      schedule_id};
  return id;
}

StrId TraceWriter::intern(std::string_view s) {
  if (s.empty()) return 0;
  auto it = ids_.find(s);
  if (it != ids_.end()) return it->second;
  arena_.emplace_back(s);
  StrId id = next_string_++;
  ids_.emplace(arena_.back(), id);
  new_strings_.emplace_back(id, arena_.back());
  if (new_strings_.size() >= kBatchRows) ship_strings();
  return id;
}

void TraceWriter::add_rank(int64_t run, const RankInfo& r) { small_->ranks[{run, r.rank}] = r; }
void TraceWriter::add_stream(int64_t run, const StreamInfo& s) {
  auto& label = small_->streams[{run, s.rank, s.stream, s.gpu}];
  if (!s.label.empty() || label.empty()) label = s.label;
}
void TraceWriter::add_communicator(int64_t run, const Communicator& c) {
  small_->comms[{run, c.comm}] = c;
}
void TraceWriter::add_diagnostic(int64_t run, const Diagnostic& d) {
  auto key = std::make_tuple(run, d.rank, d.code);
  auto it = small_->diags.find(key);
  if (it == small_->diags.end()) {
    small_->diags.emplace(key, d);
  } else {
    it->second.count += d.count;
    if (it->second.detail.empty()) it->second.detail = d.detail;
  }
}
void TraceWriter::add_step(int64_t run, const Step& s) {
  small_->steps[{run, s.rank, s.step}] = s;
}
void TraceWriter::set_meta(std::string key, std::string value) {
  small_->meta[std::move(key)] = std::move(value);
}

template <typename T>
void TraceWriter::ship(Buffer<T>& b) {
  if (b.rows.empty()) return;
  ship_strings();  // rows may name strings interned since the last batch
  rows_ += static_cast<int64_t>(b.rows.size());
  auto rows = std::make_shared<std::vector<T>>(std::move(b.rows));
  b.rows.clear();
  b.rows.reserve(kBatchRows);
  int64_t run = b.run;
  enqueue([run, rows](sqlite3* db) { insert_rows(db, run, *rows); });
}

void TraceWriter::ship_strings() {
  if (new_strings_.empty()) return;
  auto batch = std::make_shared<std::vector<std::pair<StrId, std::string_view>>>(
      std::move(new_strings_));
  new_strings_.clear();
  enqueue([batch](sqlite3* db) {
    sql::Stmt s(db, "INSERT INTO strings(id, text) VALUES (?, ?)");
    for (auto& [id, text] : *batch) {
      s.bind(1, static_cast<int64_t>(id));
      s.bind(2, text);
      s.step();
      sqlite3_reset(s.get());
    }
  });
}

void TraceWriter::enqueue(std::function<void(sqlite3*)> job) {
  std::unique_lock lk(mu_);
  if (!error_.empty()) {
    std::string e = error_;
    lk.unlock();
    throw Error(ErrorCode::Store, tmp_ + ": " + e);
  }
  // Bounded queue: the producer waits instead of buffering the whole trace.
  cv_.wait(lk, [&] { return queue_.size() < 8 || !error_.empty(); });
  queue_.push_back(std::move(job));
  cv_.notify_all();
}

void TraceWriter::submit(std::function<void(sqlite3*)> job) {
  ship(kernels_);
  ship(memcpys_);
  ship(apis_);
  ship(ranges_);
  ship(colls_);
  ship_strings();
  enqueue(std::move(job));
}

void TraceWriter::worker() {
  for (;;) {
    std::function<void(sqlite3*)> job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return !queue_.empty() || stop_; });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      cv_.notify_all();
    }
    std::string err;
    try {
      if (error_.empty()) job(db_);
    } catch (const std::exception& e) {
      err = e.what();
    }
    std::lock_guard lk(mu_);
    busy_ = false;
    if (!err.empty() && error_.empty()) error_ = err;
    cv_.notify_all();
  }
}

void TraceWriter::flush() {
  submit([](sqlite3*) {});
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return (queue_.empty() && !busy_) || !error_.empty(); });
  if (!error_.empty()) throw Error(ErrorCode::Store, tmp_ + ": " + error_);
}

void TraceWriter::stop_worker() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

void TraceWriter::commit() {
  if (done_) throw Error(ErrorCode::Internal, "commit after commit/abort");
  flush();
  stop_worker();
  try {
    auto& s = *small_;
    {
      sql::Stmt q(db_,
                  "INSERT INTO runs(run_id, kind, schedule_id, backend, source, label, created_at)"
                  " VALUES (?,?,?,?,?,?,?)");
      std::string now = now_iso8601();
      for (auto& [id, r] : s.runs) {
        q.bind(1, id);
        q.bind(2, to_string(r.kind));
        if (r.schedule_id >= 0) q.bind(3, r.schedule_id); else q.bind_null(3);
        q.bind(4, r.backend);
        q.bind(5, r.source);
        q.bind(6, r.label);
        q.bind(7, now);
        q.run();
      }
    }
    {
      sql::Stmt q(db_,
                  "INSERT OR REPLACE INTO ranks(run_id, rank, world_size, host, pid, device,"
                  " device_name, backend, nccl_version, source, clock_offset_ns, offset_error_ns)"
                  " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)");
      for (auto& [key, r] : s.ranks) {
        q.bind(1, key.first);
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
      for (auto& [key, label] : s.streams) {
        q.bind(1, std::get<0>(key));
        q.bind(2, std::get<1>(key));
        q.bind(3, std::get<2>(key));
        q.bind(4, std::get<3>(key) ? 1 : 0);
        q.bind(5, label);
        q.run();
      }
    }
    {
      sql::Stmt q(db_, "INSERT OR REPLACE INTO communicators(run_id, comm, nranks, ranks, label,"
                       " backend) VALUES (?,?,?,?,?,?)");
      for (auto& [key, c] : s.comms) {
        q.bind(1, key.first);
        q.bind(2, c.comm);
        if (c.nranks >= 0) q.bind(3, c.nranks); else q.bind_null(3);
        q.bind(4, c.ranks);
        q.bind(5, c.label);
        q.bind(6, c.backend);
        q.run();
      }
    }
    {
      sql::Stmt q(db_, "INSERT INTO diagnostics(run_id, rank, severity, code, count, detail)"
                       " VALUES (?,?,?,?,?,?)");
      for (auto& [key, d] : s.diags) {
        q.bind(1, std::get<0>(key));
        q.bind(2, d.rank);
        q.bind(3, to_string(d.severity));
        q.bind(4, d.code);
        q.bind(5, d.count);
        q.bind(6, d.detail);
        q.run();
      }
    }
    {
      sql::Stmt q(db_, "INSERT OR REPLACE INTO steps(run_id, rank, step, start_ns, end_ns)"
                       " VALUES (?,?,?,?,?)");
      for (auto& [key, st] : s.steps) {
        q.bind(1, std::get<0>(key));
        q.bind(2, st.rank);
        q.bind(3, st.step);
        q.bind(4, st.start);
        q.bind(5, st.end);
        q.run();
      }
    }
    {
      sql::Stmt q(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)");
      for (auto& [k, v] : s.meta) {
        q.bind(1, k);
        q.bind(2, v);
        q.run();
      }
    }
    schema::create_indexes(db_);
    sql::exec(db_, "COMMIT");
    sql::exec(db_, "PRAGMA locking_mode=NORMAL");
    // Readers (GUI, analyses) and later appends use WAL; the mode is stored in the file.
    sql::exec(db_, "PRAGMA journal_mode=WAL");
    sql::exec(db_, "PRAGMA wal_checkpoint(TRUNCATE)");
  } catch (...) {
    abort();
    throw;
  }
  if (sqlite3_close(db_) != SQLITE_OK) {
    db_ = nullptr;
    abort();
    throw Error(ErrorCode::Store, tmp_ + ": close failed");
  }
  db_ = nullptr;
  std::error_code ec;
  fs::remove(tmp_ + "-wal", ec);
  fs::remove(tmp_ + "-shm", ec);
  fsync_path(tmp_);
  // A stale WAL of the old target must not be applied to the new file.
  fs::remove(path_ + "-wal", ec);
  fs::remove(path_ + "-shm", ec);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    std::string msg = std::strerror(errno);
    abort();
    throw Error(ErrorCode::Io, path_ + ": cannot rename " + tmp_ + " over it: " + msg);
  }
  fs::path dir = fs::path(path_).has_parent_path() ? fs::path(path_).parent_path() : ".";
  fsync_path(dir.string());
  unregister_temp_for_cleanup();
  done_ = true;
}

void TraceWriter::abort() {
  if (done_) return;
  done_ = true;
  {
    std::lock_guard lk(mu_);
    queue_.clear();
  }
  stop_worker();
  if (db_) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
  }
  std::error_code ec;
  for (const char* sfx : {"", "-wal", "-shm", "-journal"}) fs::remove(tmp_ + sfx, ec);
  unregister_temp_for_cleanup();
}

}  // namespace braid
