// The Nsight Systems importer's NVTX_EVENTS (nsys_export.h): NCCL's own ranges, their payloads,
// and every range as an nvtx_ranges row.
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trace/diagnostics.h"
#include "trace/import/nsys_export.h"
#include "trace/time_range.h"

namespace braid::nsys {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::optional<int64_t> parse_int(std::string_view s) {
  if (s.empty()) return std::nullopt;
  try {
    size_t used = 0;
    std::string str(s);
    long long v = (str.size() > 2 && str[0] == '0' && (str[1] == 'x' || str[1] == 'X'))
                      ? static_cast<long long>(std::stoull(str, &used, 16))
                      : std::stoll(str, &used, 10);
    if (used != str.size()) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

// Flattens nested objects: nsys may wrap the payload entries in an object per schema.
void collect_fields(simdjson::dom::element e,
                    std::vector<std::pair<std::string, simdjson::dom::element>>& out, int depth) {
  simdjson::dom::object obj;
  if (depth > 4 || e.get_object().get(obj)) return;
  for (auto [key, value] : obj) {
    if (value.is_object())
      collect_fields(value, out, depth + 1);
    else
      out.emplace_back(lower(key), value);
  }
}

std::optional<NcclPayload> parse_nccl_payload(const std::string& json) {
  if (json.empty()) return std::nullopt;
  static thread_local simdjson::dom::parser parser;
  auto doc = parser.parse(json);
  if (doc.error()) return std::nullopt;
  std::vector<std::pair<std::string, simdjson::dom::element>> fields;
  collect_fields(doc.value_unsafe(), fields, 0);
  NcclPayload p;
  for (auto& [key, v] : fields) {
    std::optional<int64_t> num;
    std::string text;
    if (v.is_int64())
      num = v.get_int64().value_unsafe();
    else if (v.is_uint64())
      num = static_cast<int64_t>(v.get_uint64().value_unsafe());
    else if (v.is_double())
      num = round_to_int64(v.get_double().value_unsafe());
    else if (v.is_string()) {
      text = std::string(v.get_string().value_unsafe());
      num = parse_int(text);
    }
    if (key == "nccl communicator id") {
      if (num)
        p.comm = hex(static_cast<uint64_t>(*num));
      else if (!text.empty())
        p.comm = text;
    } else if (!num) {
      if (key == "data type" || key == "datatype") p.dtype = normalize_dtype(text);
    } else if (key == "message size [bytes]" || key == "bytes") {
      p.bytes = *num;
    } else if (key == "no. of ranks") {
      p.nranks = static_cast<int32_t>(*num);
    } else if (key == "rank") {
      p.rank = static_cast<int32_t>(*num);
    } else if (key == "peer rank" || key == "peer") {
      p.peer = static_cast<int32_t>(*num);
    } else if (key == "root") {
      p.root = static_cast<int32_t>(*num);
    } else if (key == "count" || key == "no. of elements") {
      p.count = *num;
    }
  }
  return p;
}

void classify_nccl_range(NcclRange& r) {
  std::string l = lower(r.name);
  std::string rest = l.rfind("nccl", 0) == 0 ? l.substr(4) : l;
  r.group_start = rest == "groupstart";
  r.group_end = rest == "groupend";
  r.comm_init = rest.rfind("comminit", 0) == 0 || rest == "commsplit";
  if (r.group_start || r.group_end || r.comm_init) return;
  r.op = rest == "bcast" ? CollOp::Broadcast : coll_op_from_framework_name(rest);
}

}  // namespace

void NvtxTables::read_event_types() {
  // ENUM_NSYS_EVENT_TYPE gives the ids by name; the defaults are the ids nsys has written.
  ev_pushpop_ = {59, 70};  // NvtxPushPopRange, NvtxtPushPopRange
  ev_startend_ = {60, 71};
  ev_mark_ = {34};
  ev_domain_ = 75;
  if (!x_.schema->has("ENUM_NSYS_EVENT_TYPE") || !x_.schema->col("ENUM_NSYS_EVENT_TYPE", "name"))
    return;
  sql::Stmt s(x_.db, "SELECT id, name FROM ENUM_NSYS_EVENT_TYPE");
  std::map<std::string, int64_t> ids;
  while (s.step()) ids[s.text(1)] = s.i64(0);
  auto set_from = [&](std::set<int64_t>& out, std::initializer_list<const char*> names) {
    std::set<int64_t> got;
    for (const char* n : names)
      if (auto it = ids.find(n); it != ids.end()) got.insert(it->second);
    if (!got.empty()) out = got;
  };
  set_from(ev_pushpop_, {"NvtxPushPopRange", "NvtxtPushPopRange"});
  set_from(ev_startend_, {"NvtxStartEndRange", "NvtxtStartEndRange"});
  set_from(ev_mark_, {"NvtxMark"});
  if (auto it = ids.find("NvtxDomainCreate"); it != ids.end()) ev_domain_ = it->second;
}

std::string NvtxTables::range_types_sql() const {
  std::string out;
  for (const auto* set : {&ev_pushpop_, &ev_startend_})
    for (int64_t v : *set) out += (out.empty() ? "" : ",") + std::to_string(v);
  return out;
}

// NVTX text: the explicit text, else the registered string.
std::string NvtxTables::nvtx_text_expr() {
  std::string text = x_.schema->expr(kNvtx, "n", "text");
  std::string reg = x_.string_value("t", x_.schema->expr(kNvtx, "n", "textId"));
  return "COALESCE(" + text + ", " + reg + ")";
}

std::string NvtxTables::nvtx_json_expr() {
  std::string json = x_.schema->expr(kNvtx, "n", "jsonText");
  std::string reg = x_.string_value("j", x_.schema->expr(kNvtx, "n", "jsonTextId"));
  return "COALESCE(" + json + ", " + reg + ")";
}

std::string NvtxTables::nvtx_joins() {
  return x_.join_strings("t", x_.schema->expr(kNvtx, "n", "textId")) +
         x_.join_strings("j", x_.schema->expr(kNvtx, "n", "jsonTextId"));
}

void NvtxTables::read_nccl_ranges() {
  if (!x_.schema->has(kNvtx)) return;
  if (!x_.schema->col(kNvtx, "eventType") || !x_.schema->col(kNvtx, "start") ||
      !x_.schema->col(kNvtx, "end")) {
    x_.missing_column("NVTX_EVENTS.start/end/eventType (NVTX not imported)");
    nvtx_unusable_ = true;
    return;
  }
  std::string dom = x_.schema->expr(kNvtx, "n", "domainId");
  std::string tid = x_.schema->expr(kNvtx, "n", "globalTid");
  // Domain names: NvtxDomainCreate rows carry the name in `text`, keyed by (process, domain).
  {
    sql::Stmt s(x_.db, "SELECT " + dom + ", " + nvtx_text_expr() + ", " + tid +
                           " FROM NVTX_EVENTS n" + nvtx_joins() +
                           " WHERE n.eventType = " + std::to_string(ev_domain_));
    while (s.step()) {
      if (s.is_null(0)) continue;
      int64_t pk = s.is_null(2) ? -1 : pid_key_of(s.i64(2));
      domains_[{pk, s.i64(0)}] = s.text(1);
    }
  }
  std::set<int64_t> nccl_ids;
  for (const auto& [key, name] : domains_)
    if (name == "NCCL") nccl_ids.insert(key.second);
  if (nccl_ids.empty()) return;
  std::string ids;
  for (int64_t d : nccl_ids) ids += (ids.empty() ? "" : ",") + std::to_string(d);
  sql::Stmt s(x_.db, "SELECT n.start, n.\"end\", " + tid + ", " + dom + ", " + nvtx_text_expr() +
                         ", " + nvtx_json_expr() + " FROM NVTX_EVENTS n" + nvtx_joins() +
                         " WHERE n.eventType IN (" + range_types_sql() + ") AND " + dom + " IN (" +
                         ids + ") AND n.\"end\" IS NOT NULL");
  while (s.step()) {
    int64_t gtid = s.is_null(2) ? 0 : s.i64(2);
    auto d = domains_.find({s.is_null(2) ? -1 : pid_key_of(gtid), s.i64(3)});
    if (d == domains_.end() || d->second != "NCCL") continue;
    if (x_.bad_span(s.i64(0), s.i64(1))) continue;
    NcclRange r;
    r.start = s.i64(0);
    r.end = s.i64(1);
    r.global_tid = gtid;
    r.name = s.text(4);
    classify_nccl_range(r);
    if (auto p = parse_nccl_payload(s.text(5))) r.payload = *p;
    if (r.comm_init && !r.payload.comm.empty() && r.payload.nranks > 0)
      comm_nranks_[r.payload.comm] = r.payload.nranks;
    nccl_ranges_[gtid].push_back(std::move(r));
  }
  for (auto& [t, v] : nccl_ranges_)
    std::sort(v.begin(), v.end(), [](const NcclRange& a, const NcclRange& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
}

void NvtxTables::read_ranges() {
  if (!x_.schema->has(kNvtx) || nvtx_unusable_) return;
  std::string tid = x_.schema->expr(kNvtx, "n", "globalTid");
  std::string num;  // first non-null scalar payload member
  for (const char* c : {"uint64Value", "int64Value", "uint32Value", "int32Value"})
    num += (num.empty() ? "" : ", ") + x_.schema->expr(kNvtx, "n", c);
  std::string real;
  for (const char* c : {"doubleValue", "floatValue"})
    real += (real.empty() ? "" : ", ") + x_.schema->expr(kNvtx, "n", c);
  sql::Stmt s(x_.db, "SELECT n.start, n.\"end\", n.eventType, " + tid + ", " +
                         x_.schema->expr(kNvtx, "n", "domainId") + ", " + nvtx_text_expr() + ", " +
                         nvtx_json_expr() + ", COALESCE(" + num + ", NULL), COALESCE(" + real +
                         ", NULL), " + x_.schema->expr(kNvtx, "n", "binaryData") +
                         " FROM NVTX_EVENTS n" + nvtx_joins());
  int64_t marks = 0, open = 0, binary = 0;
  while (s.step()) {
    ++x_.ctx.stats.events;
    int64_t type = s.i64(2);
    bool is_range = ev_pushpop_.count(type) || ev_startend_.count(type);
    if (!is_range) {
      if (ev_mark_.count(type)) ++marks;
      continue;  // domain/category/thread naming rows are metadata
    }
    if (s.is_null(1)) {
      ++open;
      continue;
    }
    auto rank = x_.rank_of(s, 3);
    if (!rank) {
      ++x_.unplaced;
      continue;
    }
    if (x_.bad_span(s.i64(0), s.i64(1))) continue;
    Range r;
    r.rank = *rank;
    r.stream = s.is_null(3) ? 0 : os_tid(s.i64(3));
    r.start = s.i64(0);
    r.end = s.i64(1);
    r.name = x_.w.intern(s.text(5));
    if (!s.is_null(4) && s.i64(4) != 0) {
      int64_t pk = s.is_null(3) ? -1 : pid_key_of(s.i64(3));
      auto d = domains_.find({pk, s.i64(4)});
      r.domain =
          x_.w.intern(d != domains_.end() ? d->second : "domain " + std::to_string(s.i64(4)));
    }
    if (!s.is_null(6))
      r.payload = x_.w.intern(s.text(6));
    else if (!s.is_null(7))
      r.payload = x_.w.intern(std::to_string(s.i64(7)));
    else if (!s.is_null(8))
      r.payload = x_.w.intern(std::to_string(s.f64(8)));
    else if (!s.is_null(9))
      ++binary;
    x_.w.add(x_.run, r);
  }
  x_.ctx.diagnose(diag::Code::nsys_nvtx_mark_skipped, marks,
                  x_.file + ": NVTX marks (instants) are not imported as ranges");
  x_.ctx.diagnose(diag::Code::nsys_nvtx_unterminated, open,
                  x_.file + ": NVTX ranges without an end were skipped");
  x_.ctx.diagnose(diag::Code::nsys_nvtx_binary_payload, binary,
                  x_.file + ": binary NVTX payloads were not decoded");
}

// The NCCL NVTX ranges that describe the operation launched at `t` on thread `gtid`:
// the innermost enclosing API range (ncclAllReduce, ncclSend, ...), or, when the launch sits
// in ncclGroupEnd, the API ranges since the previous ncclGroupEnd on that thread.
std::vector<const NcclRange*> NvtxTables::describing_ranges(int64_t gtid, Ns t) const {
  std::vector<const NcclRange*> out;
  auto it = nccl_ranges_.find(gtid);
  if (it == nccl_ranges_.end()) return out;
  const auto& rs = it->second;
  const NcclRange* inner = nullptr;
  const NcclRange* group_end = nullptr;
  for (const auto& r : rs) {
    if (r.start > t) break;
    if (r.end < t) continue;
    if (r.op != CollOp::Unknown) inner = &r;        // sorted by start: later is inner
    if (r.group_end && !group_end) group_end = &r;  // outermost group end
  }
  if (inner) return {inner};
  if (!group_end) return out;
  Ns boundary = INT64_MIN;
  for (const auto& r : rs)
    if (r.group_end && r.end <= group_end->start) boundary = std::max(boundary, r.end);
  for (const auto& r : rs)
    if (r.op != CollOp::Unknown && r.start >= boundary && r.end <= group_end->start)
      out.push_back(&r);
  return out;
}

}  // namespace braid::nsys
