#include "trace/rows.h"

#include <ctime>
#include <type_traits>

#include "trace/schema.h"

namespace braid::rows {

int bind(sql::Stmt& s, int i, int64_t run, const Kernel& k) {
  s.bind(i++, run); s.bind(i++, k.rank); s.bind(i++, k.stream); s.bind(i++, k.start);
  s.bind(i++, k.end); s.bind(i++, static_cast<int64_t>(k.name));
  s.bind(i++, static_cast<int>(k.category)); s.bind(i++, k.correlation);
  s.bind(i++, k.external_id);
  return i;
}
int bind(sql::Stmt& s, int i, int64_t run, const Memcpy& m) {
  s.bind(i++, run); s.bind(i++, m.rank); s.bind(i++, m.stream); s.bind(i++, m.start);
  s.bind(i++, m.end); s.bind(i++, to_string(m.kind)); s.bind(i++, m.bytes);
  s.bind(i++, static_cast<int64_t>(m.name)); s.bind(i++, m.correlation);
  return i;
}
int bind(sql::Stmt& s, int i, int64_t run, const ApiCall& a) {
  s.bind(i++, run); s.bind(i++, a.rank); s.bind(i++, a.tid); s.bind(i++, a.start);
  s.bind(i++, a.end); s.bind(i++, static_cast<int64_t>(a.name)); s.bind(i++, to_string(a.kind));
  s.bind(i++, a.correlation); s.bind(i++, a.external_id);
  return i;
}
int bind(sql::Stmt& s, int i, int64_t run, const Range& r) {
  s.bind(i++, run); s.bind(i++, r.rank); s.bind(i++, r.stream); s.bind(i++, r.on_gpu ? 1 : 0);
  s.bind(i++, r.start); s.bind(i++, r.end); s.bind(i++, static_cast<int64_t>(r.name));
  s.bind(i++, static_cast<int64_t>(r.domain)); s.bind(i++, static_cast<int64_t>(r.payload));
  return i;
}
int bind(sql::Stmt& s, int i, int64_t run, const Collective& c) {
  s.bind(i++, run); s.bind(i++, c.rank); s.bind(i++, static_cast<int64_t>(c.comm));
  s.bind(i++, c.seq); s.bind(i++, to_string(c.op)); s.bind(i++, static_cast<int64_t>(c.dtype));
  s.bind(i++, c.in_count); s.bind(i++, c.out_count); s.bind(i++, c.bytes);
  s.bind(i++, c.peer_or_root); s.bind(i++, c.stream); s.bind(i++, c.start); s.bind(i++, c.end);
  s.bind(i++, c.enqueue); s.bind(i++, static_cast<int64_t>(c.algo));
  s.bind(i++, static_cast<int64_t>(c.proto)); s.bind(i++, c.channels); s.bind(i++, c.group_size);
  s.bind(i++, static_cast<int64_t>(c.name)); s.bind(i++, c.kernel_ref);
  return i;
}
int bind(sql::Stmt& s, int i, int64_t run, const CaptureWindow& w) {
  s.bind(i++, run);
  s.bind(i++, w.rank);
  s.bind(i++, w.start);
  s.bind(i++, w.end);
  return i;
}
int bind(sql::Stmt& s, int i, int64_t run, const EtOp& o) {
  s.bind(i++, run);
  s.bind(i++, o.rank);
  s.bind(i++, o.node);
  s.bind(i++, o.parent);
  s.bind(i++, static_cast<int64_t>(o.name));
  s.bind(i++, o.et_tid);
  s.bind(i++, o.rf_id);
  s.bind(i++, o.seq);
  s.bind(i++, static_cast<int64_t>(o.schema));
  s.bind(i++, o.tid);
  s.bind(i++, o.op_start);
  s.bind(i++, o.op_end);
  s.bind(i++, o.step);
  s.bind(i++, to_string(o.join));
  s.bind(i++, to_string(o.kind));
  return i;
}
int bind(sql::Stmt& s, int i, int64_t run, const EtTensor& t) {
  s.bind(i++, run);
  s.bind(i++, t.rank);
  s.bind(i++, t.node);
  s.bind(i++, t.arg);
  s.bind(i++, t.item);
  s.bind(i++, t.output ? 1 : 0);
  s.bind(i++, t.tensor);
  s.bind(i++, t.storage);
  s.bind(i++, t.offset);
  s.bind(i++, t.numel);
  s.bind(i++, t.itemsize);
  s.bind(i++, static_cast<int64_t>(t.dtype));
  s.bind(i++, static_cast<int64_t>(t.device));
  s.bind(i++, static_cast<int64_t>(t.shape));
  s.bind(i++, static_cast<int64_t>(t.strides));
  s.bind(i++, t.lo);
  s.bind(i++, t.hi);
  s.bind(i++, to_string(t.extent));
  return i;
}
int bind(sql::Stmt& s, int i, int64_t run, const Step& st) {
  s.bind(i++, run); s.bind(i++, st.rank); s.bind(i++, st.step); s.bind(i++, st.start);
  s.bind(i++, st.end);
  return i;
}
int bind(sql::Stmt& s, int i, int64_t run, const NcclCallRow& c) {
  s.bind(i++, run); s.bind(i++, c.rank); s.bind(i++, static_cast<int64_t>(c.comm));
  s.bind(i++, c.seq); s.bind(i++, c.call_id); s.bind(i++, c.group_id); s.bind(i++, to_string(c.op));
  s.bind(i++, static_cast<int64_t>(c.redop)); s.bind(i++, static_cast<int64_t>(c.sendbuff));
  s.bind(i++, static_cast<int64_t>(c.recvbuff)); s.bind(i++, c.count);
  s.bind(i++, static_cast<int64_t>(c.dtype)); s.bind(i++, c.peer_or_root);
  s.bind(i++, static_cast<int64_t>(c.stream_handle)); s.bind(i++, c.tid); s.bind(i++, c.enqueue);
  s.bind(i++, c.ret); s.bind(i++, c.result); s.bind(i++, c.comm_rank); s.bind(i++, c.comm_size);
  return i;
}
int bind(sql::Stmt& s, int i, int64_t run, const ProxyOpRow& p) {
  s.bind(i++, run); s.bind(i++, p.rank); s.bind(i++, static_cast<int64_t>(p.comm));
  s.bind(i++, p.seq); s.bind(i++, p.call_id); s.bind(i++, p.channel); s.bind(i++, p.peer);
  s.bind(i++, p.is_send ? 1 : 0); s.bind(i++, p.steps); s.bind(i++, p.chunk_size);
  s.bind(i++, p.tid); s.bind(i++, p.start); s.bind(i++, p.end);
  return i;
}

NcclCallRow read_nccl_call(const sql::Stmt& s, int i) {
  NcclCallRow c;
  ++i;  // run_id
  c.rank = static_cast<int32_t>(s.i64(i++));
  c.comm = static_cast<StrId>(s.i64(i++));
  c.seq = s.i64(i++);
  c.call_id = s.i64(i++);
  c.group_id = s.i64(i++);
  c.op = coll_op_from_string(s.text(i++)).value_or(CollOp::Unknown);
  c.redop = static_cast<StrId>(s.i64(i++));
  c.sendbuff = static_cast<uint64_t>(s.i64(i++));
  c.recvbuff = static_cast<uint64_t>(s.i64(i++));
  c.count = s.i64(i++);
  c.dtype = static_cast<StrId>(s.i64(i++));
  c.peer_or_root = static_cast<int32_t>(s.i64(i++));
  c.stream_handle = static_cast<uint64_t>(s.i64(i++));
  c.tid = s.i64(i++);
  c.enqueue = s.i64(i++);
  c.ret = s.i64(i++);
  c.result = static_cast<int32_t>(s.i64(i++));
  c.comm_rank = static_cast<int32_t>(s.i64(i++));
  c.comm_size = static_cast<int32_t>(s.i64(i++));
  return c;
}

ProxyOpRow read_proxy_op(const sql::Stmt& s, int i) {
  ProxyOpRow p;
  ++i;  // run_id
  p.rank = static_cast<int32_t>(s.i64(i++));
  p.comm = static_cast<StrId>(s.i64(i++));
  p.seq = s.i64(i++);
  p.call_id = s.i64(i++);
  p.channel = static_cast<int32_t>(s.i64(i++));
  p.peer = static_cast<int32_t>(s.i64(i++));
  p.is_send = s.i64(i++) != 0;
  p.steps = static_cast<int32_t>(s.i64(i++));
  p.chunk_size = static_cast<int32_t>(s.i64(i++));
  p.tid = s.i64(i++);
  p.start = s.i64(i++);
  p.end = s.i64(i++);
  return p;
}

EtOp read_et_op(const sql::Stmt& s, int i) {
  EtOp o;
  ++i;  // run_id
  o.rank = static_cast<int32_t>(s.i64(i++));
  o.node = s.i64(i++);
  o.parent = s.i64(i++);
  o.name = static_cast<StrId>(s.i64(i++));
  o.et_tid = s.i64(i++);
  o.rf_id = s.i64(i++);
  o.seq = s.i64(i++);
  o.schema = static_cast<StrId>(s.i64(i++));
  o.tid = s.i64(i++);
  o.op_start = s.i64(i++);
  o.op_end = s.i64(i++);
  o.step = s.i64(i++);
  o.join = et_join_from_string(s.text(i++)).value_or(EtJoin::None);
  o.kind = et_op_kind_from_string(s.text(i++)).value_or(EtOpKind::Op);
  return o;
}

EtTensor read_et_tensor(const sql::Stmt& s, int i) {
  EtTensor t;
  ++i;  // run_id
  t.rank = static_cast<int32_t>(s.i64(i++));
  t.node = s.i64(i++);
  t.arg = static_cast<int32_t>(s.i64(i++));
  t.item = static_cast<int32_t>(s.i64(i++));
  t.output = s.i64(i++) != 0;
  t.tensor = s.i64(i++);
  t.storage = s.i64(i++);
  t.offset = s.i64(i++);
  t.numel = s.i64(i++);
  t.itemsize = static_cast<int32_t>(s.i64(i++));
  t.dtype = static_cast<StrId>(s.i64(i++));
  t.device = static_cast<StrId>(s.i64(i++));
  t.shape = static_cast<StrId>(s.i64(i++));
  t.strides = static_cast<StrId>(s.i64(i++));
  t.lo = s.i64(i++);
  t.hi = s.i64(i++);
  t.extent = et_extent_from_string(s.text(i++)).value_or(EtExtent::Bound);
  return t;
}

std::string insert_sql(const char* table, int cols, int rows, bool replace) {
  std::string row = "(";
  for (int c = 0; c < cols; ++c) row += c ? ",?" : "?";
  row += ")";
  std::string s = std::string(replace ? "INSERT OR REPLACE INTO " : "INSERT INTO ") + table +
                  " VALUES ";
  for (int r = 0; r < rows; ++r) {
    if (r) s += ',';
    s += row;
  }
  return s;
}

template <typename T>
Inserter<T>::Inserter(sqlite3* db) : db_(db) {
  if constexpr (std::is_same_v<T, NcclCallRow> || std::is_same_v<T, ProxyOpRow> ||
                std::is_same_v<T, CaptureWindow>)
    schema::create_capture_tables(db);
  if constexpr (std::is_same_v<T, EtOp> || std::is_same_v<T, EtTensor>)
    schema::create_et_tables(db);
  single_ = sql::Stmt(db, insert_sql(Table<T>::name, Table<T>::cols, 1, Table<T>::replace));
}

template <typename T>
void Inserter<T>::add(int64_t run, const T& row) {
  bind(single_, 1, run, row);
  single_.step();
  sqlite3_reset(single_.get());  // every parameter is bound again by the next row
}

template <typename T>
void Inserter<T>::add(int64_t run, const std::vector<T>& rows) {
  size_t i = 0;
  if (rows.size() >= static_cast<size_t>(kMulti)) {
    if (!multi_)  // prepared on first use: a live capture never needs it
      multi_ = sql::Stmt(db_, insert_sql(Table<T>::name, Table<T>::cols, kMulti, Table<T>::replace));
    for (; i + kMulti <= rows.size(); i += kMulti) {
      int p = 1;
      for (int r = 0; r < kMulti; ++r) p = bind(multi_, p, run, rows[i + r]);
      multi_.step();
      sqlite3_reset(multi_.get());
    }
  }
  for (; i < rows.size(); ++i) add(run, rows[i]);
}

template class Inserter<Kernel>;
template class Inserter<Memcpy>;
template class Inserter<ApiCall>;
template class Inserter<Range>;
template class Inserter<Collective>;
template class Inserter<Step>;
template class Inserter<NcclCallRow>;
template class Inserter<ProxyOpRow>;
template class Inserter<CaptureWindow>;
template class Inserter<EtOp>;
template class Inserter<EtTensor>;

StrId StringTable::intern(std::string_view s) {
  if (s.empty()) return 0;
  auto it = ids_.find(s);
  if (it != ids_.end()) return it->second;
  arena_.emplace_back(s);
  StrId id = next_++;
  ids_.emplace(arena_.back(), id);
  new_.emplace_back(id, arena_.back());
  return id;
}

void StringTable::load(sqlite3* db) {
  sql::Stmt s(db, "SELECT id, text FROM strings");
  while (s.step()) {
    StrId id = static_cast<StrId>(s.i64(0));
    arena_.push_back(s.text(1));
    ids_.emplace(arena_.back(), id);
    if (id >= next_) next_ = id + 1;
  }
}

std::vector<std::pair<StrId, std::string_view>> StringTable::take_new() {
  std::vector<std::pair<StrId, std::string_view>> out;
  out.swap(new_);
  return out;
}

void StringTable::write(sqlite3* db,
                        const std::vector<std::pair<StrId, std::string_view>>& batch) {
  if (batch.empty()) return;
  sql::Stmt s(db, "INSERT INTO strings(id, text) VALUES (?, ?)");
  for (auto& [id, text] : batch) {
    s.bind(1, static_cast<int64_t>(id));
    s.bind(2, text);
    s.step();
    sqlite3_reset(s.get());
  }
}

StringInserter::StringInserter(sqlite3* db)
    : s_(db, "INSERT INTO strings(id, text) VALUES (?, ?)") {}

void StringInserter::add(StrId id, std::string_view text) {
  s_.bind(1, static_cast<int64_t>(id));
  s_.bind(2, text);
  s_.run();
}

sql::Stmt& SmallTables::stmt(sql::Stmt& s, const char* text) {
  if (!s) s = sql::Stmt(db_, text);
  return s;
}

void SmallTables::run(int64_t run, RunKind kind, int64_t schedule_id, std::string_view backend,
                      std::string_view source, std::string_view label,
                      std::string_view created_at) {
  auto& q = stmt(run_, "INSERT INTO runs(run_id, kind, schedule_id, backend, source, label,"
                       " created_at) VALUES (?,?,?,?,?,?,?)");
  q.bind(1, run);
  q.bind(2, to_string(kind));
  if (schedule_id >= 0) q.bind(3, schedule_id); else q.bind_null(3);
  q.bind(4, backend);
  q.bind(5, source);
  q.bind(6, label);
  q.bind(7, created_at);
  q.run();
}

void SmallTables::rank(int64_t run, const RankInfo& r) {
  auto& q = stmt(rank_, "INSERT OR REPLACE INTO ranks(run_id, rank, world_size, host, pid, device,"
                        " device_name, backend, nccl_version, source, clock_offset_ns,"
                        " offset_error_ns) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)");
  q.bind(1, run);
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

void SmallTables::stream(int64_t run, const StreamInfo& s) {
  auto& q = stmt(stream_, "INSERT OR REPLACE INTO streams(run_id, rank, stream, gpu, label)"
                          " VALUES (?,?,?,?,?)");
  q.bind(1, run);
  q.bind(2, s.rank);
  q.bind(3, s.stream);
  q.bind(4, s.gpu ? 1 : 0);
  q.bind(5, s.label);
  q.run();
}

void SmallTables::communicator(int64_t run, const Communicator& c) {
  auto& q = stmt(comm_, "INSERT OR REPLACE INTO communicators(run_id, comm, nranks, ranks, label,"
                        " backend) VALUES (?,?,?,?,?,?)");
  q.bind(1, run);
  q.bind(2, c.comm);
  if (c.nranks >= 0) q.bind(3, c.nranks); else q.bind_null(3);
  q.bind(4, c.ranks);
  q.bind(5, c.label);
  q.bind(6, c.backend);
  q.run();
}

void SmallTables::diagnostic(int64_t run, const Diagnostic& d) {
  auto& q = stmt(diag_, "INSERT INTO diagnostics(run_id, rank, severity, code, count, detail)"
                        " VALUES (?,?,?,?,?,?)");
  q.bind(1, run);
  q.bind(2, d.rank);
  q.bind(3, to_string(d.severity));
  q.bind(4, d.code);
  q.bind(5, d.count);
  q.bind(6, d.detail);
  q.run();
}

void SmallTables::meta(std::string_view key, std::string_view value) {
  auto& q = stmt(meta_, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)");
  q.bind(1, key);
  q.bind(2, value);
  q.run();
}

void SmallTables::clear_diagnostics(int64_t run) {
  auto& q = stmt(clear_diag_, "DELETE FROM diagnostics WHERE run_id=?");
  q.bind(1, run);
  q.run();
}

void SmallTables::clock_offset(int64_t run, int32_t rank, Ns offset, Ns error) {
  auto& q = stmt(offset_,
                 "UPDATE ranks SET clock_offset_ns=?, offset_error_ns=? WHERE run_id=? AND"
                 " rank=?");
  q.bind(1, static_cast<int64_t>(offset));
  q.bind(2, static_cast<int64_t>(error));
  q.bind(3, run);
  q.bind(4, rank);
  q.run();
}

void renumber_rank(sqlite3* db, int64_t run, int32_t from, int32_t to) {
  for (const char* t :
       {"kernels", "memcpys", "api_calls", "nvtx_ranges", "steps", "collectives", "nccl_calls",
        "nccl_proxy_ops", "capture_windows", "streams", "ranks", "diagnostics"}) {
    sql::Stmt s(db, std::string("UPDATE ") + t + " SET rank=? WHERE run_id=? AND rank=?");
    s.bind(1, to);
    s.bind(2, run);
    s.bind(3, from);
    s.run();
  }
}

void move_events(sqlite3* db, int64_t run, int32_t from, int32_t to, Ns shift) {
  for (const char* table : {"kernels", "memcpys", "api_calls", "nvtx_ranges"}) {
    sql::Stmt s(db, std::string("UPDATE ") + table +
                        " SET rank=?, start_ns=start_ns+?, end_ns=end_ns+?"
                        " WHERE run_id=? AND rank=?");
    s.bind(1, to);
    s.bind(2, shift);
    s.bind(3, shift);
    s.bind(4, run);
    s.bind(5, from);
    s.run();
  }
}

void recategorize_kernels(sqlite3* db, int64_t run, int32_t rank, Category from,
                          const std::vector<std::tuple<int64_t, Ns, int>>& list) {
  sql::Stmt s(db,
              "UPDATE kernels SET category=? WHERE run_id=? AND rank=? AND stream=? AND"
              " start_ns=? AND category=?");
  for (auto& [stream, start, cat] : list) {
    s.bind(1, cat);
    s.bind(2, run);
    s.bind(3, rank);
    s.bind(4, stream);
    s.bind(5, start);
    s.bind(6, static_cast<int>(from));
    s.run();
  }
}

void fill_collective_size(sqlite3* db, int64_t run, int32_t rank, Ns start, StrId name,
                          int64_t in_count, int64_t out_count, int64_t bytes, StrId dtype) {
  sql::Stmt s(db,
              "UPDATE collectives SET in_count=?, out_count=?, bytes=?, dtype_id=? WHERE run_id=?"
              " AND rank=? AND start_ns=? AND name_id=? AND in_count<0 AND out_count<0");
  s.bind(1, in_count);
  s.bind(2, out_count);
  s.bind(3, bytes);
  s.bind(4, static_cast<int64_t>(dtype));
  s.bind(5, run);
  s.bind(6, rank);
  s.bind(7, start);
  s.bind(8, static_cast<int64_t>(name));
  s.run();
}

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace braid::rows
