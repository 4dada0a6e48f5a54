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
#include <tuple>

#include "trace/diagnostics.h"
#include "trace/error.h"
#include "trace/schema.h"
#include "trace/sqlite_util.h"
#include "trace/temp_cleanup.h"

namespace fs = std::filesystem;

namespace braid {
namespace {

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

struct TraceWriter::Inserters {
  std::tuple<std::unique_ptr<rows::Inserter<Kernel>>, std::unique_ptr<rows::Inserter<Memcpy>>,
             std::unique_ptr<rows::Inserter<ApiCall>>, std::unique_ptr<rows::Inserter<Range>>,
             std::unique_ptr<rows::Inserter<Collective>>, std::unique_ptr<rows::Inserter<Step>>,
             std::unique_ptr<rows::Inserter<NcclCallRow>>,
             std::unique_ptr<rows::Inserter<ProxyOpRow>>,
             std::unique_ptr<rows::Inserter<CaptureWindow>>, std::unique_ptr<rows::Inserter<EtOp>>,
             std::unique_ptr<rows::Inserter<EtTensor>>>
      t;
  template <typename T>
  rows::Inserter<T>& get(sqlite3* db) {
    auto& p = std::get<std::unique_ptr<rows::Inserter<T>>>(t);
    if (!p) p = std::make_unique<rows::Inserter<T>>(db);
    return *p;
  }
};

TraceWriter::TraceWriter(std::string path, Mode mode)
    : path_(std::move(path)),
      mode_(mode),
      small_(std::make_unique<Small>()),
      ins_(std::make_unique<Inserters>()) {
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
      strings_.load(db_);
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
  StrId id = strings_.intern(s);
  if (strings_.new_count() >= kBatchRows) ship_strings();
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
  if (!valid_span(s.start, s.end)) return bad_time(run, s.rank, s.start, s.end);
  small_->steps[{run, s.rank, s.step}] = s;
}
void TraceWriter::bad_time(int64_t run, int32_t rank, Ns start, Ns end) {
  Diagnostic d;
  d.rank = rank;
  diag::set_code(d, diag::Code::store_bad_time);
  d.count = 1;
  d.detail = "records whose times are not a time (over 130 years from the clock's origin, or "
             "ending before they start) were not stored; first: start " +
             std::to_string(start) + " ns, end " + std::to_string(end) + " ns";
  add_diagnostic(run, d);
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
  Inserters* ins = ins_.get();
  enqueue([ins, run, rows](sqlite3* db) { ins->get<T>(db).add(run, *rows); });
}

void TraceWriter::ship_strings() {
  if (!strings_.has_new()) return;
  // The views point into strings_, which outlives the writer thread.
  auto batch = std::make_shared<std::vector<std::pair<StrId, std::string_view>>>(
      strings_.take_new());
  enqueue([batch](sqlite3* db) { rows::StringTable::write(db, *batch); });
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
  ship(calls_);
  ship(proxy_);
  ship(windows_);
  ship(et_ops_);
  ship(et_tensors_);
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
    rows::SmallTables out(db_);
    const std::string now = rows::now_iso8601();
    for (auto& [id, r] : s.runs)
      out.run(id, r.kind, r.schedule_id, r.backend, r.source, r.label, now);
    for (auto& [key, r] : s.ranks) out.rank(key.first, r);
    for (auto& [key, label] : s.streams)
      out.stream(std::get<0>(key), {std::get<1>(key), std::get<2>(key), std::get<3>(key), label});
    for (auto& [key, c] : s.comms) out.communicator(key.first, c);
    for (auto& [key, d] : s.diags) out.diagnostic(std::get<0>(key), d);
    {
      auto& steps = ins_->get<Step>(db_);  // the writer thread has stopped: this thread's now
      for (auto& [key, st] : s.steps) steps.add(std::get<0>(key), st);
    }
    for (auto& [k, v] : s.meta) out.meta(k, v);
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
  ins_.reset();  // prepared statements go before the connection
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
  ins_.reset();
  if (db_) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
  }
  std::error_code ec;
  for (const char* sfx : {"", "-wal", "-shm", "-journal"}) fs::remove(tmp_ + sfx, ec);
  unregister_temp_for_cleanup();
}

}  // namespace braid
