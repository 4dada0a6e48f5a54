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
// double (us_text_to_ns), so they land as exact int64 nanoseconds.
#include <charconv>

#include "trace/categories.h"
#include "trace/import/kineto_file.h"
#include "trace/input.h"
#include "trace/rows.h"

namespace braid::kineto {

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
  ctx_.stats.bytes += tokenize_chrome_trace(in, path_, *this, ctx_.options.progress);
  ctx_.stats.events += events_;
  finish();
}

static std::optional<int64_t> dom_int_of(simdjson::dom::element e) {
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
static std::optional<int64_t> dom_int(simdjson::simdjson_result<simdjson::dom::element> r) {
  simdjson::dom::element e;
  if (r.get(e) != simdjson::SUCCESS) return std::nullopt;
  return dom_int_of(e);
}

static std::string dom_str(simdjson::dom::element e) {
  std::string_view s;
  if (e.get_string().get(s) == simdjson::SUCCESS) return std::string(s);
  return simdjson::minify(e);
}

// pg_config is a JSON list in some versions and the text of a Python list of dicts in others:
// "[{'pg_name': '0', 'ranks': [0, 1]}]". Turn the latter into JSON.
static std::string python_literal_to_json(std::string_view s) {
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
static int64_t od_int(od::value v) {
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

static std::string_view od_text(od::value v) {
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) return s;
  return v.raw_json_token();
}

// "Input Dims": [[d0, d1, ...], [], ...] -> elements per argument (-1 where the shape is empty:
// a tensor list, a scalar or no tensor).
static std::vector<int64_t> od_dims(od::value v) {
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

static MemKind memkind_from_name(std::string_view name) {
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

// The fields of an event and the args Braid reads; false (counted) when ts or dur is no time.
bool KinetoFile::read_event(od::object obj, EventFields& e) {
  for (auto field : obj) {
    std::string_view key;
    if (auto err = field.unescaped_key().get(key)) throw simdjson::simdjson_error(err);
    od::value v = field.value();
    // Dispatch on length first: most keys are told apart without a string compare.
    switch (key.size()) {
      case 2:
        if (key == "ph") {
          e.ph = od_text(v);
        } else if (key == "ts") {
          if (!us_text_to_ns(v.raw_json_token(), e.ts)) return ++bad_events_, false;
          e.has_ts = true;
        }
        continue;
      case 3:
        if (key == "cat")
          e.cat = od_text(v);
        else if (key == "pid")
          e.pid = od_int(v);
        else if (key == "tid")
          e.tid = od_int(v);
        else if (key == "dur" && !us_text_to_ns(v.raw_json_token(), e.dur))
          return ++bad_events_, false;
        continue;
      case 4:
        if (key == "name") {
          e.name = od_text(v);
          continue;
        }
        if (key != "args") continue;
        break;
      default:
        continue;
    }
    // Flow arrows and Python frames carry nothing Braid reads in their args.
    if (e.cat == "python_function" || e.cat == "ac2g" || e.cat == "fwdbwd") continue;
    od::object args;
    if (!v.get_object().get(args)) read_args(args, e);
  }
  return true;
}

void KinetoFile::read_args(od::object args, EventFields& e) {
  CommOp& meta = e.meta;
  for (auto af : args) {
    std::string_view k;
    if (auto err = af.unescaped_key().get(k)) throw simdjson::simdjson_error(err);
    od::value av = af.value();
    if (k == "External id")
      e.a_ext = od_int(av);
    else if (k == "correlation")
      e.a_corr = od_int(av);
    else if (k == "stream")
      e.a_stream = od_int(av);
    else if (k == "device")
      e.a_device = od_int(av);
    else if (k == "bytes")
      e.a_bytes = od_int(av);
    else if (k == "name")
      e.a_name = od_text(av);
    else if (k == "Record function id")
      e.a_rf = od_int(av);
    else if (k == "Sequence number")
      e.a_seq = od_int(av);
    else if (k == "labels")
      e.a_labels = od_text(av);
    else if (k == "Collective name") {
      meta.has_meta = true;
      meta.op = coll_op_from_framework_name(od_text(av));
    } else if (k == "In msg nelems")
      meta.in_nelems = od_int(av);
    else if (k == "Out msg nelems")
      meta.out_nelems = od_int(av);
    else if (k == "Group size")
      meta.group_size = od_int(av);
    else if (k == "dtype")
      meta.dtype = normalize_dtype(od_text(av));
    else if (k == "Process Group Name")
      meta.pg_name = std::string(od_text(av));
    else if (k == "Process Group Description")
      meta.pg_desc = std::string(od_text(av));
    else if (k == "Process Group Ranks")
      meta.pg_ranks = std::string(od_text(av));
    else if (k == "Seq" || k == "seq")
      meta.seq = od_int(av);
    else if (k == "Input Dims" && is_comm_cpu_name(e.name))
      meta.input_elems = od_dims(av);
    else if (k == "Input type" && is_comm_cpu_name(e.name)) {
      od::array types;
      if (!av.get_array().get(types))
        for (auto t : types) {
          od::value tv;
          meta.input_types.push_back(t.get(tv) ? std::string() : normalize_dtype(od_text(tv)));
        }
    } else if (k == "Root" || k == "root") {
      meta.root = od_int(av);
    }
  }
}

void KinetoFile::handle_event(od::object obj) {
  EventFields e;
  if (!read_event(obj, e)) return;
  if (e.ph.size() != 1) {
    ++bad_events_;
    return;
  }
  const char p = e.ph[0];
  if (p == 'M') {
    if (e.name == "thread_name" && !e.a_name.empty())
      thread_names_[{e.pid, e.tid}] = std::string(e.a_name);
    if (e.name == "process_labels" && !e.a_labels.empty())
      gpu_pids_[e.pid] = e.a_labels.rfind("GPU", 0) == 0;
    return;
  }
  if (p != 'X') {
    ++skipped_[std::string("ph '") + std::string(e.ph) + "'"];
    return;
  }
  if (!e.has_ts) {
    ++bad_events_;
    return;
  }
  on_first_event();
  if (e.dur < 0) {
    ++negative_;
    e.dur = 0;
  }
  // A time that overflows or is over 130 years from the clock's origin is skipped and counted.
  auto start_or = checked_add(base_ns_, e.ts);
  auto end_or = start_or ? checked_add(*start_or, e.dur) : std::nullopt;
  if (!end_or || !valid_span(*start_or, *end_or)) {
    if (bad_time_++ == 0)
      bad_time_example_ = std::string(e.name) + " (ts " + std::to_string(e.ts) + " ns, dur " +
                          std::to_string(e.dur) + " ns after the time base)";
    return;
  }
  const Ns start = *start_or, end = *end_or;
  min_start_ = std::min(min_start_, start);
  max_end_ = std::max(max_end_, end);
  const std::string_view cat = e.cat;
  if (cat == "kernel") {
    on_kernel(e, start, end);
  } else if (cat == "gpu_memcpy" || cat == "gpu_memset") {
    on_copy(e, start, end);
  } else if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "cpu_op" ||
             cat == "python_function" || cat == "user_annotation" ||
             cat == "gpu_user_annotation") {
    on_host(e, start, end);
  } else {
    ++skipped_[std::string(cat.empty() ? "(no category)" : cat)];
  }
}

void KinetoFile::on_kernel(EventFields& e, Ns start, Ns end) {
  const int64_t stream = e.a_stream >= 0 ? e.a_stream : e.tid;
  if (e.a_device >= 0 && device_seen_ < 0) device_seen_ = e.a_device;
  streams_.try_emplace({stream, true}, "");
  Kernel k;
  k.rank = rank_;
  k.stream = stream;
  k.start = start;
  k.end = end;
  k.name = w_.intern(e.name);
  // Classification lower-cases and scans the name: do it once per distinct name.
  if (k.name >= category_of_.size()) category_of_.resize(k.name + 1024, -1);
  if (category_of_[k.name] < 0) category_of_[k.name] = static_cast<int8_t>(classify_kernel(e.name));
  k.category = static_cast<Category>(category_of_[k.name]);
  k.correlation = e.a_corr;
  k.external_id = e.a_ext;
  std::optional<NcclKernelName> nccl;
  if (is_comm(k.category)) nccl = parse_nccl_kernel_name(e.name);
  if (nccl) {
    PendingKernel pk;
    pk.coll.stream = stream;
    pk.coll.start = start;
    pk.coll.end = end;
    pk.coll.name = k.name;
    pk.coll.kernel_ref = e.a_corr;
    pk.coll.algo = w_.intern(nccl->algo);
    pk.coll.proto = w_.intern(nccl->proto);
    pk.correlation = e.a_corr;
    pk.external_id = e.a_ext;
    pk.name_op = nccl->op;
    pk.name_dtype = nccl->dtype;
    pk.meta = std::move(e.meta);
    nccl_.push_back(std::move(pk));
  } else if (is_comm(k.category)) {
    note(diag::Code::kineto_nccl_kernel_unparsed, std::string(e.name));
  }
  w_.add(run_, k);
  ++stored_;
}

void KinetoFile::on_copy(const EventFields& e, Ns start, Ns end) {
  const int64_t stream = e.a_stream >= 0 ? e.a_stream : e.tid;
  streams_.try_emplace({stream, true}, "");
  Memcpy m;
  m.rank = rank_;
  m.stream = stream;
  m.start = start;
  m.end = end;
  m.kind = e.cat == "gpu_memset" ? MemKind::Memset : memkind_from_name(e.name);
  m.bytes = e.a_bytes;
  m.name = w_.intern(e.name);
  m.correlation = e.a_corr;
  w_.add(run_, m);
  ++stored_;
}

// CPU ops, runtime and driver calls, Python frames, annotations: API rows or ranges; steps;
// launches (for linking NCCL kernels); communication ops; the CPU ops an ET joins.
void KinetoFile::on_host(EventFields& e, Ns start, Ns end) {
  const std::string_view cat = e.cat, name = e.name;
  if (cpu_pid_ < 0 && cat != "gpu_user_annotation") cpu_pid_ = e.pid;
  if (ctx_.host_ops && (cat == "cpu_op" || cat == "user_annotation"))
    host_ops_.push_back({e.tid, start, end, w_.intern(name), e.a_rf, e.a_seq});
  if (cat == "user_annotation" || cat == "gpu_user_annotation") {
    const bool gpu = cat == "gpu_user_annotation";
    Range r;
    r.rank = rank_;
    r.stream = gpu && e.a_stream >= 0 ? e.a_stream : e.tid;
    r.on_gpu = gpu;
    r.start = start;
    r.end = end;
    r.name = w_.intern(name);
    w_.add(run_, r);
    streams_.try_emplace({r.stream, gpu}, "");
  } else {
    ApiCall a;
    a.rank = rank_;
    a.tid = e.tid;
    a.start = start;
    a.end = end;
    a.name = w_.intern(name);
    a.kind = cat == "cpu_op"         ? ApiKind::CpuOp
             : cat == "cuda_runtime" ? ApiKind::Runtime
             : cat == "cuda_driver"  ? ApiKind::Driver
                                     : ApiKind::Python;
    a.correlation = e.a_corr;
    a.external_id = e.a_ext;
    w_.add(run_, a);
    streams_.try_emplace({e.tid, false}, "");
    if ((a.kind == ApiKind::Runtime || a.kind == ApiKind::Driver) && e.a_corr != 0 &&
        name.find("aunch") != std::string_view::npos)
      launches_.push_back({e.a_corr, e.tid, start});
  }
  ++stored_;
  if (name.rfind("ProfilerStep#", 0) == 0 && cat != "gpu_user_annotation") {
    int64_t n = 0;
    auto num = name.substr(13);
    if (std::from_chars(num.data(), num.data() + num.size(), n).ec == std::errc())
      steps_.push_back({rank_, n, start, end});
  }
  if (cat != "gpu_user_annotation" && is_comm_cpu_name(name)) {
    CommOp meta = std::move(e.meta);
    meta.tid = e.tid;
    meta.start = start;
    meta.end = end;
    meta.external_id = e.a_ext;
    meta.is_record_param = name == "record_param_comms";
    meta.op_is_annotation = name.rfind("nccl:", 0) == 0 || name.rfind("gloo:", 0) == 0;
    if (!meta.is_record_param) meta.op = coll_op_from_framework_name(name);
    meta.name = w_.intern(name);
    comm_ops_.push_back(std::move(meta));
  }
}

}  // namespace braid::kineto

namespace braid {

void import_kineto(ImportContext& ctx, const std::string& file, size_t index) {
  kineto::KinetoFile f(ctx, file, index);
  f.run();
}

}  // namespace braid
