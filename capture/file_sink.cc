#include "capture/file_sink.h"

#include <unistd.h>

#include <filesystem>

#include "trace/error.h"
#include "trace/schema.h"

namespace fs = std::filesystem;

namespace braid::capture {

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
    schema::create_capture_tables(db_);
    rows::SmallTables(db_).run(kRun, RunKind::Captured, -1, opts.backend, opts.source,
                               opts.label, rows::now_iso8601());
    sql::exec(db_, "COMMIT");  // from here on the file is a valid (empty) capture
    ins_string_ = rows::StringInserter(db_);
    std::apply([&](auto&... ins) { ((ins = std::remove_reference_t<decltype(ins)>(db_)), ...); },
               inserters_);
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
  StrId id = strings_.intern(s);
  // Written at once, in the open transaction, so a checkpoint commits a row with its strings.
  if (strings_.has_new()) {
    for (auto& [sid, text] : strings_.take_new()) {
      ins_string_.add(sid, text);
      ++pending_;
    }
  }
  return id;
}

// One row at a time, inside the open transaction: checkpoint() only has to commit.
void FileSink::replace_window(Ns old_start, const CaptureWindow& w) {
  sql::Stmt del(db_, "DELETE FROM capture_windows WHERE run_id = ? AND rank = ? AND start_ns = ?");
  del.bind(1, kRun);
  del.bind(2, static_cast<int64_t>(w.rank));
  del.bind(3, old_start);
  del.step();
  add(w);
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
  rows::renumber_rank(db_, kRun, from, to);
  renumber_keys(streams_, from, to);
  renumber_keys(diags_, from, to);
  renumber_keys(ranks_, from, to);
  small_dirty_ = true;
}

void FileSink::write_small_tables() {
  if (!small_dirty_) return;
  small_dirty_ = false;
  rows::SmallTables out(db_);
  for (auto& [rank, r] : ranks_) out.rank(kRun, r);
  for (auto& [k, label] : streams_)
    out.stream(kRun, {std::get<0>(k), std::get<1>(k), std::get<2>(k), label});
  for (auto& [id, c] : comms_) out.communicator(kRun, c);
  // diagnostics has no key: the current totals replace the rows of this run.
  out.clear_diagnostics(kRun);
  for (auto& [k, d] : diags_) out.diagnostic(kRun, d);
  for (auto& [k, v] : meta_) out.meta(k, v);
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
  ins_string_.reset();
  std::apply([](auto&... ins) { (ins.reset(), ...); }, inserters_);
  sqlite3_close_v2(db_);
  db_ = nullptr;
  std::error_code ec;
  fs::remove(path_ + "-shm", ec);
  if (fs::file_size(path_ + "-wal", ec) == 0) fs::remove(path_ + "-wal", ec);
}

}  // namespace braid::capture
