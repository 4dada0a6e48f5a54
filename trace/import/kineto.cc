// PyTorch profiler (Kineto) Chrome-trace JSON importer: the event parser.
//
// The tokenizer (kineto_tokenizer.h) streams the file: it hands over every top-level value but
// `traceEvents` whole (parsed here with simdjson's DOM) and the event array in batches of
// complete events, which simdjson's On-Demand API parses here in place. Nothing is kept per
// event for the whole trace except what linking NCCL kernels to their CPU-side ops needs: one
// (correlation, thread, time) triple per launch call, and the few communication ops.
//
// Timestamps: Chrome-trace `ts`/`dur` are microseconds whatever `displayTimeUnit` says (it only
// sets the viewer's display unit); Kineto writes them with up to 3 decimals (ns) relative to
// `baseTimeNanoseconds` when present. They are parsed from their decimal text, never through a
// double (kineto::us_text_to_ns), so they land as exact int64 nanoseconds.
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "trace/categories.h"
#include "trace/diagnostics.h"
#include "trace/error.h"
#include "trace/import/et.h"
#include "trace/import/importer.h"
#include "trace/import/kineto_tokenizer.h"
#include "trace/input.h"
#include "trace/rows.h"
#include "trace/time_range.h"

namespace braid {
namespace {

namespace od = simdjson::ondemand;

// ---------------------------------------------------------------------------------------------
// The per-file importer.

struct CommOp {  // a CPU-side communication op (record_param_comms, nccl:*, c10d::*)
  int64_t tid = 0;
  Ns start = 0, end = 0;
  int64_t external_id = 0;
  bool is_record_param = false;
  bool op_is_annotation = false;  // nccl:* / gloo:* (lists the input tensor only)
  CollOp op = CollOp::Unknown;
  StrId name = 0;
  // Metadata (record_param_comms and new-style kernels).
  bool has_meta = false;
  std::string dtype, pg_name, pg_desc, pg_ranks;
  int64_t in_nelems = -1, out_nelems = -1, group_size = -1, seq = -1, root = -1;
  // The op's "Input Dims" (elements per tensor argument, -1 for a list or a scalar) and
  // "Input type" (normalized dtype per argument): where a trace without message-size metadata
  // still says how large the tensors were (nccl:* annotations, c10d::* operators).
  std::vector<int64_t> input_elems;
  std::vector<std::string> input_types;
  bool used = false;
};

struct PendingKernel {
  Collective coll;
  int64_t correlation = 0, external_id = 0;
  CollOp name_op = CollOp::Unknown;
  std::string name_dtype;
  CommOp meta;  // metadata carried by the kernel itself (has_meta)
};

// Records too large to move around cheaply (strings, vectors) live in a deque, which never moves
// them as it grows, and are sorted as pointers; ties keep the file's order. (A vector of them
// moved every record on each growth and again when sorted: 4% of a Kineto import, and twice the
// records' memory at the peak.)
template <typename T, typename Less>
std::vector<T*> sorted_pointers(std::deque<T>& records, Less less) {
  std::vector<T*> order;
  order.reserve(records.size());
  for (T& r : records) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(),
                   [&](const T* a, const T* b) { return less(*a, *b); });
  return order;
}

struct Launch {
  int64_t correlation;
  int64_t tid;
  Ns ts;
};

class KinetoFile final : public kineto::TokenSink {
 public:
  KinetoFile(ImportContext& ctx, const std::string& path, size_t index)
      : ctx_(ctx), w_(ctx.writer), run_(ctx.run), path_(path), index_(index) {
    rank_ = ctx.default_rank(index);
  }

  void run();

  // What the tokenizer hands over.
  void top_value(std::string_view key, std::string& text) override {
    try {
      handle_top_value(key, text);
    } catch (const simdjson::simdjson_error& e) {
      bad("unexpected content in \"" + std::string(key) + "\" (" + e.what() + ")");
    }
  }
  void event_batch(const char* p, size_t n) override;

 private:
  // Top level.
  void peek_time_base();
  void handle_top_value(std::string_view key, std::string& text);
  void handle_event(od::object obj);
  void finish();

  [[noreturn]] void bad(const std::string& what) {
    throw Error(ErrorCode::BadFormat, path_ + ": " + what);
  }
  Ns t(int64_t ns_rel) const { return base_ns_ + ns_rel; }
  void note(diag::Code code, std::string detail) {
    diags_.push_back({code, std::move(detail)});  // written with the rank in finish()
  }
  void on_first_event() {
    if (events_started_) return;
    events_started_ = true;
    base_known_at_events_ = base_ns_;
    if (!dist_seen_) {
      // The rank is not known yet: write rows under a provisional rank; finish() renames them.
      provisional_ = true;
      rank_ = -1000000 - static_cast<int32_t>(index_);
    }
  }

  ImportContext& ctx_;
  TraceWriter& w_;
  int64_t run_;
  std::string path_;
  size_t index_;
  int32_t rank_;
  bool provisional_ = false;
  bool dist_seen_ = false;
  bool events_started_ = false;
  Ns base_ns_ = 0, base_known_at_events_ = 0;
  int64_t events_ = 0;
  int64_t stored_ = 0;

  RankInfo info_;
  int32_t dist_rank_ = -1;
  std::map<int64_t, std::string> device_names_;
  std::vector<Communicator> comms_;
  std::vector<std::pair<diag::Code, std::string>> diags_;  // noted before the rank is known
  std::vector<Step> steps_;
  std::map<std::pair<int64_t, bool>, std::string> streams_;  // (id, gpu) -> label
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names_;  // (pid, tid) -> name
  std::map<int64_t, bool> gpu_pids_;                                  // pid -> is a GPU process
  std::vector<Launch> launches_;
  std::vector<et::HostOp> host_ops_;  // kept only when execution traces are to be joined
  std::deque<CommOp> comm_ops_;
  std::deque<PendingKernel> nccl_;
  std::map<std::string, int64_t> skipped_;
  int64_t bad_events_ = 0, negative_ = 0, bad_time_ = 0;
  std::string bad_time_example_;
  Ns min_start_ = kMaxTimeNs, max_end_ = 0;  // of the stored events, before a late time base
  int64_t device_seen_ = -1;
  int64_t cpu_pid_ = -1;

  std::vector<int8_t> category_of_;  // by name id, -1: not classified yet
  od::parser parser_;
  std::string batch_;
};

// Kineto writes baseTimeNanoseconds after traceEvents. For a plain file, read it from the tail
// first so event times are right when written; otherwise (gzip) the rows are shifted in SQL at
// the end. The value parsed at its real place always wins: a wrong guess is corrected then.
void KinetoFile::peek_time_base() {
  FILE* f = std::fopen(path_.c_str(), "rb");
  if (!f) return;
  std::string tail(64 << 10, '\0');
  long size = std::fseek(f, 0, SEEK_END) == 0 ? std::ftell(f) : -1;
  long from = size > static_cast<long>(tail.size()) ? size - static_cast<long>(tail.size()) : 0;
  size_t got = size > 0 && std::fseek(f, from, SEEK_SET) == 0 ? std::fread(tail.data(), 1, tail.size(), f) : 0;
  std::fclose(f);
  tail.resize(got);
  static constexpr std::string_view kKey = "\"baseTimeNanoseconds\"";
  size_t at = tail.rfind(kKey);
  if (at == std::string::npos) return;
  size_t i = tail.find_first_not_of(" \t\r\n:", at + kKey.size());
  if (i == std::string::npos) return;
  int64_t v = 0;
  auto r = std::from_chars(tail.data() + i, tail.data() + tail.size(), v);
  if (r.ec == std::errc() && v > 0) base_ns_ = v;
}

void KinetoFile::run() {
  InputFile in(path_);
  if (!in.gzip()) peek_time_base();
  ctx_.stats.bytes += kineto::tokenize_chrome_trace(in, path_, *this, ctx_.options.progress);
  ctx_.stats.events += events_;
  finish();
}

std::optional<int64_t> dom_int_of(simdjson::dom::element e) {
  int64_t i;
  if (e.get_int64().get(i) == simdjson::SUCCESS) return i;
  uint64_t u;
  if (e.get_uint64().get(u) == simdjson::SUCCESS) return static_cast<int64_t>(u);
  double d;
  if (e.get_double().get(d) == simdjson::SUCCESS) return round_to_int64(d);
  std::string_view s;
  if (e.get_string().get(s) == simdjson::SUCCESS) {
    int64_t v = 0;
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec == std::errc()) return v;
  }
  return std::nullopt;
}

// A field that may be missing (an error result) or of any type.
std::optional<int64_t> dom_int(simdjson::simdjson_result<simdjson::dom::element> r) {
  simdjson::dom::element e;
  if (r.get(e) != simdjson::SUCCESS) return std::nullopt;
  return dom_int_of(e);
}

std::string dom_str(simdjson::dom::element e) {
  std::string_view s;
  if (e.get_string().get(s) == simdjson::SUCCESS) return std::string(s);
  return simdjson::minify(e);
}

// pg_config is a JSON list in some versions and the text of a Python list of dicts in others:
// "[{'pg_name': '0', 'ranks': [0, 1]}]". Turn the latter into JSON.
std::string python_literal_to_json(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool in_str = false;
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_str) {
      if (c == '\\' && i + 1 < s.size()) {
        out += c;
        out += s[++i];
      } else if (c == quote) {
        out += '"';
        in_str = false;
      } else if (c == '"') {
        out += "\\\"";
      } else {
        out += c;
      }
    } else if (c == '\'' || c == '"') {
      in_str = true;
      quote = c;
      out += '"';
    } else if (s.substr(i, 4) == "True") {
      out += "true";
      i += 3;
    } else if (s.substr(i, 5) == "False") {
      out += "false";
      i += 4;
    } else if (s.substr(i, 4) == "None") {
      out += "null";
      i += 3;
    } else {
      out += c;
    }
  }
  return out;
}

void KinetoFile::handle_top_value(std::string_view key, std::string& text) {
  if (key != "baseTimeNanoseconds" && key != "distributedInfo" && key != "deviceProperties")
    return;
  simdjson::dom::parser p;
  simdjson::dom::element e;
  if (p.parse(text).get(e) != simdjson::SUCCESS) bad("malformed JSON in \"" + std::string(key) + "\"");
  if (key == "baseTimeNanoseconds") {
    auto v = dom_int_of(e);
    if (!v) bad("\"baseTimeNanoseconds\" is not an integer");
    if (events_started_ && *v != base_known_at_events_)
      note(diag::Code::kineto_late_time_base,
           "baseTimeNanoseconds follows traceEvents; event times were shifted after loading");
    base_ns_ = *v;
    return;
  }
  if (key == "deviceProperties") {
    simdjson::dom::array arr;
    if (e.get_array().get(arr) != simdjson::SUCCESS) return;
    for (auto d : arr) {
      auto id = dom_int(d["id"]);
      std::string_view name;
      if (id && d["name"].get_string().get(name) == simdjson::SUCCESS)
        device_names_[*id] = std::string(name);
    }
    return;
  }
  // distributedInfo
  dist_seen_ = true;
  if (auto r = dom_int(e["rank"]); r) dist_rank_ = static_cast<int32_t>(*r);
  if (auto ws = dom_int(e["world_size"]); ws) info_.world_size = static_cast<int32_t>(*ws);
  std::string_view s;
  if (e["backend"].get_string().get(s) == simdjson::SUCCESS) info_.backend = std::string(s);
  if (e["nccl_version"].get_string().get(s) == simdjson::SUCCESS) info_.nccl_version = std::string(s);
  if (!provisional_ && dist_rank_ >= 0 && !ctx_.options.ranks.size()) rank_ = dist_rank_;
  if (!provisional_ && index_ < ctx_.options.ranks.size()) rank_ = ctx_.options.ranks[index_];
  simdjson::dom::element pgc;
  if (e["pg_config"].get(pgc) == simdjson::SUCCESS) {
    std::string json = pgc.is_string() ? python_literal_to_json(dom_str(pgc)) : simdjson::minify(pgc);
    simdjson::dom::parser pp;
    simdjson::dom::element groups;
    if (pp.parse(json).get(groups) != simdjson::SUCCESS || !groups.is_array()) {
      note(diag::Code::kineto_bad_pg_config, "pg_config could not be parsed");
    } else {
      for (auto g : groups.get_array()) {
        Communicator c;
        std::string_view v;
        if (g["pg_name"].get_string().get(v) == simdjson::SUCCESS) c.comm = std::string(v);
        else if (auto n = dom_int(g["pg_name"]); n) c.comm = std::to_string(*n);
        if (g["pg_desc"].get_string().get(v) == simdjson::SUCCESS) c.label = std::string(v);
        if (g["backend_config"].get_string().get(v) == simdjson::SUCCESS) c.backend = std::string(v);
        if (auto n = dom_int(g["pg_size"]); n) c.nranks = static_cast<int32_t>(*n);
        simdjson::dom::element ranks;
        if (g["ranks"].get(ranks) == simdjson::SUCCESS) c.ranks = simdjson::minify(ranks);
        if (!c.comm.empty()) comms_.push_back(std::move(c));
      }
    }
  }
}

void KinetoFile::event_batch(const char* p, size_t n) {
  batch_.clear();
  batch_.reserve(n + 2 + simdjson::SIMDJSON_PADDING);
  batch_ += '[';
  batch_.append(p, n);
  batch_ += ']';
  od::document doc;
  auto err = parser_.iterate(simdjson::padded_string_view(batch_.data(), batch_.size(), batch_.capacity())).get(doc);
  if (err) bad(std::string("malformed JSON in traceEvents: ") + simdjson::error_message(err));
  od::array arr;
  if (doc.get_array().get(arr)) bad("malformed JSON in traceEvents");
  for (auto item : arr) {
    od::object obj;
    if (item.get_object().get(obj)) {
      ++bad_events_;
      continue;
    }
    try {
      handle_event(obj);
    } catch (const simdjson::simdjson_error& e) {
      bad("malformed JSON in event " + std::to_string(events_ + 1) + " of traceEvents (" +
          e.what() + ")");
    }
    ++events_;
  }
}

// Integer from a JSON number or a numeric string (Kineto writes some ids as strings).
int64_t od_int(od::value v) {
  int64_t i;
  if (v.get_int64().get(i) == simdjson::SUCCESS) return i;
  double d;
  if (v.get_double().get(d) == simdjson::SUCCESS) return round_to_int64(d).value_or(0);
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) {
    // "stream 7", "7": take the last run of digits.
    size_t e = s.find_last_of("0123456789");
    if (e == std::string_view::npos) return 0;
    size_t b = e;
    while (b > 0 && s[b - 1] >= '0' && s[b - 1] <= '9') --b;
    int64_t out = 0;
    std::from_chars(s.data() + b, s.data() + e + 1, out);
    return out;
  }
  return 0;
}

std::string_view od_text(od::value v) {
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) return s;
  return v.raw_json_token();
}

// "Input Dims": [[d0, d1, ...], [], ...] -> elements per argument (-1 where the shape is empty:
// a tensor list, a scalar or no tensor).
std::vector<int64_t> od_dims(od::value v) {
  std::vector<int64_t> out;
  od::array args;
  if (v.get_array().get(args)) return out;
  for (auto a : args) {
    int64_t n = -1;
    od::array dims;
    if (!a.get_array().get(dims))
      for (auto d : dims) {
        int64_t x = 0;
        if (d.get_int64().get(x) != simdjson::SUCCESS || x < 0) {
          n = -1;
          break;
        }
        n = n < 0 ? x : n * x;
      }
    out.push_back(n);
  }
  return out;
}

// In/out element counts and dtype of a collective from the Input Dims of the CPU ops around its
// kernel, for traces without message-size metadata. Innermost op first: an nccl:* annotation
// and record_param_comms list the input tensor; a c10d operator lists (output, input) for the
// *_base_/alltoall_base_ forms and the tensor for all-reduce, broadcast and reduce (a tensor list
// has no dims and sizes nothing). Returns whether anything was filled.
bool size_from_input_dims(const std::vector<CommOp*>& chain, CollOp op, int64_t& in, int64_t& out,
                          std::string& dtype) {
  bool filled = false;
  auto take = [&](int64_t& slot, const CommOp& o, size_t i) {
    if (i >= o.input_elems.size() || o.input_elems[i] < 0) return;
    if (slot < 0) slot = o.input_elems[i], filled = true;
    if (dtype_size(dtype) <= 0 && i < o.input_types.size() && dtype_size(o.input_types[i]) > 0)
      dtype = o.input_types[i];
  };
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const CommOp& o = **it;
    if (o.input_elems.empty()) continue;
    // The CommOp's name is interned; its op kind and record flag say which form it is.
    if (o.is_record_param || o.op_is_annotation) {
      take(in, o, 0);
    } else if (o.op == CollOp::AllReduce || o.op == CollOp::Broadcast || o.op == CollOp::Reduce) {
      take(in, o, 0);
    } else if (o.op == CollOp::AllGather || o.op == CollOp::ReduceScatter ||
               o.op == CollOp::AllToAll) {
      take(out, o, 0);
      take(in, o, 1);
    }
  }
  if (op == CollOp::AllReduce || op == CollOp::Broadcast || op == CollOp::Reduce) {
    if (out < 0) out = in;
    if (in < 0) in = out;
  }
  return filled;
}

MemKind memkind_from_name(std::string_view name) {
  if (name.find("HtoD") != std::string_view::npos) return MemKind::HtoD;
  if (name.find("DtoH") != std::string_view::npos) return MemKind::DtoH;
  if (name.find("DtoD") != std::string_view::npos) return MemKind::DtoD;
  if (name.find("HtoH") != std::string_view::npos) return MemKind::HtoH;
  if (name.find("PtoP") != std::string_view::npos) return MemKind::PtoP;
  return MemKind::Unknown;
}

bool is_comm_cpu_name(std::string_view n) {
  return n == "record_param_comms" || n.rfind("nccl:", 0) == 0 || n.rfind("c10d::", 0) == 0 ||
         n.rfind("gloo:", 0) == 0;
}

void KinetoFile::handle_event(od::object obj) {
  std::string_view ph, cat, name;
  int64_t pid = 0, tid = 0;
  int64_t ts = 0, dur = 0;
  bool has_ts = false;
  // args of interest
  int64_t a_ext = 0, a_corr = 0, a_stream = -1, a_device = -1, a_bytes = -1;
  int64_t a_rf = -1, a_seq = -1;
  CommOp meta;
  std::string_view a_name, a_labels;

  for (auto field : obj) {
    std::string_view key;
    if (auto err = field.unescaped_key().get(key))
      throw simdjson::simdjson_error(err);
    od::value v = field.value();
    // Dispatch on length first: most keys are told apart without a string compare.
    switch (key.size()) {
      case 2:
        if (key == "ph") {
          ph = od_text(v);
        } else if (key == "ts") {
          if (!kineto::us_text_to_ns(v.raw_json_token(), ts)) {
            ++bad_events_;
            return;
          }
          has_ts = true;
        }
        continue;
      case 3:
        if (key == "cat") cat = od_text(v);
        else if (key == "pid") pid = od_int(v);
        else if (key == "tid") tid = od_int(v);
        else if (key == "dur" && !kineto::us_text_to_ns(v.raw_json_token(), dur)) {
          ++bad_events_;
          return;
        }
        continue;
      case 4:
        if (key == "name") {
          name = od_text(v);
          continue;
        }
        if (key != "args") continue;
        break;
      default:
        continue;
    }
    {
      // Flow arrows and Python frames carry nothing Braid reads in their args.
      if (cat == "python_function" || cat == "ac2g" || cat == "fwdbwd") continue;
      od::object args;
      if (v.get_object().get(args)) continue;
      for (auto af : args) {
        std::string_view k;
        if (auto err = af.unescaped_key().get(k)) throw simdjson::simdjson_error(err);
        od::value av = af.value();
        if (k == "External id") a_ext = od_int(av);
        else if (k == "correlation") a_corr = od_int(av);
        else if (k == "stream") a_stream = od_int(av);
        else if (k == "device") a_device = od_int(av);
        else if (k == "bytes") a_bytes = od_int(av);
        else if (k == "name") a_name = od_text(av);
        else if (k == "Record function id")
          a_rf = od_int(av);
        else if (k == "Sequence number")
          a_seq = od_int(av);
        else if (k == "labels") a_labels = od_text(av);
        else if (k == "Collective name") {
          meta.has_meta = true;
          meta.op = coll_op_from_framework_name(od_text(av));
        } else if (k == "In msg nelems") meta.in_nelems = od_int(av);
        else if (k == "Out msg nelems") meta.out_nelems = od_int(av);
        else if (k == "Group size") meta.group_size = od_int(av);
        else if (k == "dtype") meta.dtype = normalize_dtype(od_text(av));
        else if (k == "Process Group Name") meta.pg_name = std::string(od_text(av));
        else if (k == "Process Group Description") meta.pg_desc = std::string(od_text(av));
        else if (k == "Process Group Ranks") meta.pg_ranks = std::string(od_text(av));
        else if (k == "Seq" || k == "seq") meta.seq = od_int(av);
        else if (k == "Input Dims" && is_comm_cpu_name(name))
          meta.input_elems = od_dims(av);
        else if (k == "Input type" && is_comm_cpu_name(name)) {
          od::array types;
          if (!av.get_array().get(types))
            for (auto t : types) {
              od::value tv;
              meta.input_types.push_back(t.get(tv) ? std::string() : normalize_dtype(od_text(tv)));
            }
        } else if (k == "Root" || k == "root")
          meta.root = od_int(av);
      }
    }
  }

  if (ph.size() != 1) {
    ++bad_events_;
    return;
  }
  char p = ph[0];
  if (p == 'M') {
    if (name == "thread_name" && !a_name.empty()) thread_names_[{pid, tid}] = std::string(a_name);
    if (name == "process_labels" && !a_labels.empty())
      gpu_pids_[pid] = a_labels.rfind("GPU", 0) == 0;
    return;
  }
  if (p != 'X') {
    ++skipped_[std::string("ph '") + std::string(ph) + "'"];
    return;
  }
  if (!has_ts) {
    ++bad_events_;
    return;
  }
  on_first_event();
  if (dur < 0) {
    ++negative_;
    dur = 0;
  }
  // A time that overflows or is over 130 years from the clock's origin is skipped and counted.
  auto start_or = checked_add(base_ns_, ts);
  auto end_or = start_or ? checked_add(*start_or, dur) : std::nullopt;
  if (!end_or || !valid_span(*start_or, *end_or)) {
    if (bad_time_++ == 0)
      bad_time_example_ = std::string(name) + " (ts " + std::to_string(ts) + " ns, dur " +
                          std::to_string(dur) + " ns after the time base)";
    return;
  }
  Ns start = *start_or, end = *end_or;
  min_start_ = std::min(min_start_, start);
  max_end_ = std::max(max_end_, end);

  if (cat == "kernel") {
    int64_t stream = a_stream >= 0 ? a_stream : tid;
    if (a_device >= 0 && device_seen_ < 0) device_seen_ = a_device;
    streams_.try_emplace({stream, true}, "");
    Kernel k;
    k.rank = rank_;
    k.stream = stream;
    k.start = start;
    k.end = end;
    k.name = w_.intern(name);
    // Classification lower-cases and scans the name: do it once per distinct name.
    if (k.name >= category_of_.size()) category_of_.resize(k.name + 1024, -1);
    if (category_of_[k.name] < 0) category_of_[k.name] = static_cast<int8_t>(classify_kernel(name));
    k.category = static_cast<Category>(category_of_[k.name]);
    k.correlation = a_corr;
    k.external_id = a_ext;
    std::optional<NcclKernelName> nccl;
    if (is_comm(k.category)) nccl = parse_nccl_kernel_name(name);
    if (nccl) {
      PendingKernel pk;
      pk.coll.stream = stream;
      pk.coll.start = start;
      pk.coll.end = end;
      pk.coll.name = k.name;
      pk.coll.kernel_ref = a_corr;
      pk.coll.algo = w_.intern(nccl->algo);
      pk.coll.proto = w_.intern(nccl->proto);
      pk.correlation = a_corr;
      pk.external_id = a_ext;
      pk.name_op = nccl->op;
      pk.name_dtype = nccl->dtype;
      pk.meta = std::move(meta);
      nccl_.push_back(std::move(pk));
    } else if (is_comm(k.category)) {
      note(diag::Code::kineto_nccl_kernel_unparsed, std::string(name));
    }
    w_.add(run_, k);
    ++stored_;
  } else if (cat == "gpu_memcpy" || cat == "gpu_memset") {
    int64_t stream = a_stream >= 0 ? a_stream : tid;
    streams_.try_emplace({stream, true}, "");
    Memcpy m;
    m.rank = rank_;
    m.stream = stream;
    m.start = start;
    m.end = end;
    m.kind = cat == "gpu_memset" ? MemKind::Memset : memkind_from_name(name);
    m.bytes = a_bytes;
    m.name = w_.intern(name);
    m.correlation = a_corr;
    w_.add(run_, m);
    ++stored_;
  } else if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "cpu_op" ||
             cat == "python_function" || cat == "user_annotation" ||
             cat == "gpu_user_annotation") {
    if (cpu_pid_ < 0 && cat != "gpu_user_annotation") cpu_pid_ = pid;
    if (ctx_.host_ops && (cat == "cpu_op" || cat == "user_annotation"))
      host_ops_.push_back({tid, start, end, w_.intern(name), a_rf, a_seq});
    if (cat == "user_annotation" || cat == "gpu_user_annotation") {
      bool gpu = cat == "gpu_user_annotation";
      Range r;
      r.rank = rank_;
      r.stream = gpu && a_stream >= 0 ? a_stream : tid;
      r.on_gpu = gpu;
      r.start = start;
      r.end = end;
      r.name = w_.intern(name);
      w_.add(run_, r);
      streams_.try_emplace({r.stream, gpu}, "");
    } else {
      ApiCall a;
      a.rank = rank_;
      a.tid = tid;
      a.start = start;
      a.end = end;
      a.name = w_.intern(name);
      a.kind = cat == "cpu_op"            ? ApiKind::CpuOp
               : cat == "cuda_runtime"    ? ApiKind::Runtime
               : cat == "cuda_driver"     ? ApiKind::Driver
                                          : ApiKind::Python;
      a.correlation = a_corr;
      a.external_id = a_ext;
      w_.add(run_, a);
      streams_.try_emplace({tid, false}, "");
      if ((a.kind == ApiKind::Runtime || a.kind == ApiKind::Driver) && a_corr != 0 &&
          name.find("aunch") != std::string_view::npos)
        launches_.push_back({a_corr, tid, start});
    }
    ++stored_;
    if (name.rfind("ProfilerStep#", 0) == 0 && cat != "gpu_user_annotation") {
      int64_t n = 0;
      auto num = name.substr(13);
      if (std::from_chars(num.data(), num.data() + num.size(), n).ec == std::errc())
        steps_.push_back({rank_, n, start, end});
    }
    if (cat != "gpu_user_annotation" && is_comm_cpu_name(name)) {
      meta.tid = tid;
      meta.start = start;
      meta.end = end;
      meta.external_id = a_ext;
      meta.is_record_param = name == "record_param_comms";
      meta.op_is_annotation = name.rfind("nccl:", 0) == 0 || name.rfind("gloo:", 0) == 0;
      if (!meta.is_record_param) meta.op = coll_op_from_framework_name(name);
      meta.name = w_.intern(name);
      comm_ops_.push_back(std::move(meta));
    }
  } else {
    ++skipped_[std::string(cat.empty() ? "(no category)" : cat)];
  }
}

void KinetoFile::finish() {
  if (events_ == 0 && stored_ == 0) throw Error(ErrorCode::Empty, path_ + ": no trace events");
  if (stored_ == 0) {  // events, but none Braid reads: an error, not an empty run
    std::string saw;
    for (const auto& [what, n] : skipped_)
      saw += (saw.empty() ? "" : ", ") + std::to_string(n) + " " + what;
    bool no_cat = skipped_.count("(no category)") > 0;
    throw Error(
        ErrorCode::BadFormat,
        path_ + ": 0 of " + std::to_string(events_) + " events recognized (" + saw + ")" +
            (no_cat ? ": no cat field; is this a legacy profiler trace? (--format legacy)" : ""));
  }
  if (dist_rank_ >= 0 && index_ >= ctx_.options.ranks.size()) info_.rank = dist_rank_;
  else info_.rank = ctx_.default_rank(index_);
  int32_t final_rank = info_.rank;
  ctx_.claim_rank(final_rank, path_);

  // Rows written before the rank or the time base were known get fixed in SQL.
  Ns late_base = base_ns_ - base_known_at_events_;
  if (late_base != 0 && max_end_ >= min_start_) {
    auto lo = checked_add(min_start_, late_base), hi = checked_add(max_end_, late_base);
    if (!lo || !hi || !valid_span(*lo, *hi))
      bad("baseTimeNanoseconds " + std::to_string(base_ns_) +
          " puts the events over 130 years from the epoch (not a time)");
  }
  if (provisional_ || late_base != 0) {
    int32_t from = rank_;
    w_.submit([from, final_rank, late_base, run = run_](sqlite3* db) {
      rows::move_events(db, run, from, final_rank, late_base);
    });
  }
  auto fix = [&](Ns v) { return v + late_base; };

  // ---- link NCCL kernels to their CPU-side communication ops ----
  std::sort(launches_.begin(), launches_.end(),
            [](const Launch& a, const Launch& b) { return a.correlation < b.correlation; });
  const std::vector<CommOp*> ops = sorted_pointers(comm_ops_, [](const CommOp& a, const CommOp& b) {
    return a.tid != b.tid ? a.tid < b.tid : a.start < b.start;
  });
  Ns max_comm_dur = 0;
  for (const CommOp* o : ops) max_comm_dur = std::max(max_comm_dur, o->end - o->start);
  std::unordered_map<int64_t, CommOp*> by_ext;
  for (CommOp* o : ops)
    if (o->external_id) by_ext.emplace(o->external_id, o);

  int64_t unlinked = 0, no_meta = 0, from_dims = 0;
  std::map<std::string, int64_t> seq_by_comm;
  const std::vector<PendingKernel*> kernels = sorted_pointers(
      nccl_,
      [](const PendingKernel& a, const PendingKernel& b) { return a.coll.start < b.coll.start; });
  std::vector<Collective> colls;
  for (PendingKernel* k : kernels) {
    PendingKernel& pk = *k;
    // The comm ops enclosing the launch call, innermost last.
    std::vector<CommOp*> chain;
    auto it = std::lower_bound(launches_.begin(), launches_.end(), pk.correlation,
                               [](const Launch& l, int64_t c) { return l.correlation < c; });
    if (pk.correlation && it != launches_.end() && it->correlation == pk.correlation) {
      // Ops of this thread that start at or before the launch, scanned backwards only as far
      // as the longest comm op reaches (keeps this linear in the number of kernels).
      auto hi =
          std::upper_bound(ops.begin(), ops.end(), std::make_pair(it->tid, it->ts),
                           [](const std::pair<int64_t, Ns>& k, const CommOp* o) {
                             return k.first != o->tid ? k.first < o->tid : k.second < o->start;
                           });
      for (auto o = hi; o != ops.begin();) {
        --o;
        if ((*o)->tid != it->tid || (*o)->start < it->ts - max_comm_dur) break;
        if ((*o)->end >= it->ts) chain.insert(chain.begin(), *o);
      }
    }
    if (chain.empty() && pk.external_id) {
      auto e = by_ext.find(pk.external_id);
      if (e != by_ext.end()) chain.push_back(e->second);
    }
    if (chain.empty()) ++unlinked;

    const CommOp* meta = pk.meta.has_meta ? &pk.meta : nullptr;
    CollOp cpu_op = CollOp::Unknown;
    for (auto* o : chain) {
      o->used = true;
      if (o->is_record_param && o->has_meta && !meta) meta = o;
      if (o->op != CollOp::Unknown) cpu_op = o->op;  // innermost wins
    }
    if (meta && meta->op != CollOp::Unknown && pk.name_op == CollOp::SendRecv) cpu_op = meta->op;
    Collective c = pk.coll;
    c.rank = final_rank;
    c.start = fix(c.start);
    c.end = fix(c.end);
    // The kernel name decides, except for SendRecv kernels, whose operation is the CPU op's.
    c.op = pk.name_op != CollOp::SendRecv && pk.name_op != CollOp::Unknown ? pk.name_op
           : cpu_op != CollOp::Unknown ? cpu_op
           : meta && meta->op != CollOp::Unknown ? meta->op
                                                 : pk.name_op;
    if (it != launches_.end() && it->correlation == pk.correlation && pk.correlation)
      c.enqueue = fix(it->ts);
    std::string dtype;
    if (meta) {
      dtype = meta->dtype;
      c.in_count = meta->in_nelems;
      c.out_count = meta->out_nelems;
      c.group_size = static_cast<int32_t>(meta->group_size);
      c.seq = meta->seq;
      if (meta->root >= 0) c.peer_or_root = static_cast<int32_t>(meta->root);
      c.comm = w_.intern(meta->pg_name);
      if (!meta->pg_name.empty() &&
          std::none_of(comms_.begin(), comms_.end(),
                       [&](const Communicator& x) { return x.comm == meta->pg_name; })) {
        Communicator cm;
        cm.comm = meta->pg_name;
        cm.label = meta->pg_desc;
        cm.nranks = static_cast<int32_t>(meta->group_size);
        cm.ranks = meta->pg_ranks;
        comms_.push_back(cm);
      }
    } else {
      if (pk.name_op != CollOp::SendRecv) dtype = pk.name_dtype;
    }
    if (c.in_count < 0 && c.out_count < 0) {
      if (size_from_input_dims(chain, c.op, c.in_count, c.out_count, dtype))
        ++from_dims;
      else
        ++no_meta;
    }
    c.dtype = w_.intern(dtype);
    int sz = dtype_size(dtype);
    int64_t n = std::max(c.in_count, c.out_count);
    if (sz > 0 && n >= 0) c.bytes = n * sz;
    colls.push_back(c);
  }
  // Collectives recorded on the CPU side with full metadata but no GPU kernel (e.g. world size 1,
  // where NCCL launches nothing): kept with CPU timing and stream -1.
  int64_t cpu_only = 0;
  int64_t not_collective = 0;
  for (const CommOp* op : ops) {
    const CommOp& o = *op;
    if (!o.is_record_param || !o.has_meta || o.used) continue;
    if (o.op == CollOp::Unknown) {  // "wait", "coalesced" and other bookkeeping records
      ++not_collective;
      continue;
    }
    Collective c;
    c.rank = final_rank;
    c.op = o.op;
    c.start = fix(o.start);
    c.end = fix(o.end);
    c.in_count = o.in_nelems;
    c.out_count = o.out_nelems;
    c.group_size = static_cast<int32_t>(o.group_size);
    c.seq = o.seq;
    c.comm = w_.intern(o.pg_name);
    c.dtype = w_.intern(o.dtype);
    c.name = o.name;
    int sz = dtype_size(o.dtype);
    int64_t n = std::max(c.in_count, c.out_count);
    if (sz > 0 && n >= 0) c.bytes = n * sz;
    colls.push_back(c);
    ++cpu_only;
  }
  std::sort(colls.begin(), colls.end(),
            [](const Collective& a, const Collective& b) { return a.start < b.start; });
  for (auto& c : colls) w_.add(run_, c);
  // SendRecv kernels whose operation came from the CPU side take that operation's category, so
  // kernel categories and collectives tell the same story. Found through the window index.
  std::vector<std::tuple<int64_t, Ns, int>> recategorize;
  for (auto& c : colls)
    if (c.stream >= 0 && c.name < category_of_.size() &&
        category_of_[c.name] == static_cast<int8_t>(Category::CommSendRecv) &&
        comm_category(c.op) != Category::CommSendRecv)
      recategorize.emplace_back(c.stream, c.start, static_cast<int>(comm_category(c.op)));
  if (!recategorize.empty())
    w_.submit([list = std::move(recategorize), final_rank, run = run_](sqlite3* db) {
      rows::recategorize_kernels(db, run, final_rank, Category::CommSendRecv, list);
    });

  // ---- small tables ----
  info_.source = path_;
  info_.pid = cpu_pid_;
  info_.device = static_cast<int32_t>(device_seen_);
  if (auto d = device_names_.find(device_seen_); d != device_names_.end())
    info_.device_name = d->second;
  w_.add_rank(run_, info_);
  for (auto& [key, label] : streams_) {
    StreamInfo s;
    s.rank = final_rank;
    s.stream = key.first;
    s.gpu = key.second;
    for (auto& [pt, tn] : thread_names_) {
      bool pid_is_gpu = gpu_pids_.count(pt.first) ? gpu_pids_[pt.first] : false;
      if (pt.second == key.first && pid_is_gpu == key.second) s.label = tn;
    }
    w_.add_stream(run_, s);
  }
  for (auto& s : steps_) {
    s.rank = final_rank;
    s.start = fix(s.start);
    s.end = fix(s.end);
    w_.add_step(run_, s);
  }
  if (ctx_.host_ops) {
    et::HostOps& h = (*ctx_.host_ops)[index_];
    h.rank = final_rank;
    h.pid = cpu_pid_;
    h.path = path_;
    h.steps = steps_;
    for (et::HostOp& o : host_ops_) o.start = fix(o.start), o.end = fix(o.end);
    h.ops = std::move(host_ops_);
  }
  for (auto& c : comms_) w_.add_communicator(run_, c);
  auto put = [&](diag::Code code, int64_t n, std::string detail) {
    ctx_.diagnose(code, n, std::move(detail), final_rank);
  };
  for (auto& [code, detail] : diags_) put(code, 1, std::move(detail));
  put(diag::Code::kineto_unlinked_nccl_kernel, unlinked,
      "NCCL kernels with no CPU-side communication op found through correlation/External id");
  put(diag::Code::kineto_collective_without_metadata, no_meta,
      "collectives without message sizes in the trace (profiler run without record_shapes or an "
      "older PyTorch)");
  put(diag::Code::kineto_collective_sized_from_input_dims, from_dims,
      "collectives without message-size metadata sized from the Input Dims of their CPU ops "
      "(nccl:* annotation, record_param_comms, c10d operator)");
  put(diag::Code::kineto_cpu_only_collective, cpu_only,
      "record_param_comms ops with no NCCL kernel; stored with CPU timing and stream -1");
  put(diag::Code::kineto_non_collective_comm_record, not_collective,
      "record_param_comms entries that are not collectives (e.g. wait), not stored as such");
  put(diag::Code::kineto_malformed_event, bad_events_,
      "events without ph/ts or with unparseable timestamps, skipped");
  put(diag::Code::kineto_negative_duration, negative_, "negative durations set to 0");
  put(diag::Code::kineto_bad_time, bad_time_,
      "events whose ts/dur overflow or are over 130 years from the clock's origin were "
      "skipped; first: " +
          bad_time_example_);
  int64_t skipped = 0;
  std::string what;
  for (auto& [kind, n] : skipped_) {
    skipped += n;
    what += (what.empty() ? "" : ", ") + kind + ": " + std::to_string(n);
  }
  put(diag::Code::kineto_skipped_events, skipped,
      "events not stored (flow arrows, instants, other categories): " + what);
  ctx_.stats.rows += stored_ + static_cast<int64_t>(colls.size());
}

}  // namespace

void import_kineto(ImportContext& ctx, const std::string& file, size_t index) {
  KinetoFile f(ctx, file, index);
  f.run();
}

}  // namespace braid
