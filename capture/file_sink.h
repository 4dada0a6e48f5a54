// A Sink that writes one `.braid` file incrementally and durably: SQLite in WAL mode, rows
// inserted in small transactions that checkpoint() commits. A process killed with SIGKILL leaves
// a valid file holding every row committed before the kill (unlike TraceWriter, which builds a
// temporary file and renames it at the end, right for importers and wrong for a live capture).
// Rows, strings and small tables are written by the same code as TraceWriter's (trace/rows.h);
// only the file handling and the transactions are this class's own.
#pragma once

#include <sqlite3.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "capture/sink.h"
#include "trace/rows.h"
#include "trace/sqlite_util.h"

namespace braid::capture {

struct FileSinkOptions {
  std::string source;             // runs.source: what was recorded (the command line)
  std::string backend = "cupti";  // runs.backend
  std::string label;              // runs.label
};

class FileSink final : public RowSink<FileSink> {
 public:
  // Creates `path` (replacing a file there). Throws braid::Error when it cannot.
  FileSink(std::string path, const FileSinkOptions& opts);
  ~FileSink() override;

  StrId intern(std::string_view s) override;
  void replace_window(Ns old_start, const CaptureWindow& w) override;
  void set_rank_info(const RankInfo& r) override;
  void add_stream(const StreamInfo& s) override;
  void add_communicator(const Communicator& c) override;
  void set_diagnostic(const Diagnostic& d) override;
  void set_meta(std::string_view key, std::string_view value) override;
  void renumber_rank(int32_t from, int32_t to) override;
  void checkpoint() override;
  void close() override;

  const std::string& path() const { return path_; }
  int64_t rows_committed() const { return committed_; }

  static constexpr int64_t kRun = 1;  // a capture file holds one captured run

 private:
  void write_small_tables();

  std::string path_;
  sqlite3* db_ = nullptr;
  bool closed_ = false;
  int64_t pending_ = 0, committed_ = 0;
  rows::StringTable strings_;
  rows::StringInserter ins_string_;
  // One inserter per event table: RowSink's add() of each row kind comes to row().
  friend class RowSink<FileSink>;
  template <typename Row>
  void row(const Row& r) {
    std::get<rows::Inserter<Row>>(inserters_).add(kRun, r);
    ++pending_;
  }
  std::tuple<rows::Inserter<Kernel>, rows::Inserter<Memcpy>, rows::Inserter<ApiCall>,
             rows::Inserter<Range>, rows::Inserter<Collective>, rows::Inserter<Step>,
             rows::Inserter<NcclCallRow>, rows::Inserter<ProxyOpRow>, rows::Inserter<CaptureWindow>>
      inserters_;
  // Small tables, rewritten at each checkpoint when they changed.
  bool small_dirty_ = true;
  std::map<int32_t, RankInfo> ranks_;
  std::map<std::tuple<int32_t, int64_t, bool>, std::string> streams_;
  std::map<std::string, Communicator> comms_;
  std::map<std::pair<int32_t, std::string>, Diagnostic> diags_;
  std::map<std::string, std::string> meta_;
};

}  // namespace braid::capture
