#include "fusion/pass.h"

#include <algorithm>
#include <cstdio>

#include "fusion/passes/passes.h"
#include "fusion/validate.h"
#include "trace/error.h"

namespace braid::fusion {

bool Focus::has(int32_t r) const { return std::binary_search(ranks.begin(), ranks.end(), r); }

bool Focus::hits(const Schedule& s, const std::vector<OpRef>& members) const {
  if (!any(members)) return false;
  if (ops.empty()) return true;
  for (const OpRef& m : members)
    if (std::binary_search(ops.begin(), ops.end(), s.op(m).id)) return true;
  return false;
}

void Pass::apply(Schedule& s, const Finding& f) const {
  if (!f.rewrite || (!f.legal && !f.assumed))
    throw Error(ErrorCode::Usage, "finding of pass '" + std::string(name()) +
                                      "' is advice and cannot be applied" +
                                      (f.rewrite ? " unless assumed: " : ": ") + f.assumption);
  for (int64_t id : f.ops) must_find(s, id);
  f.rewrite(s);
}

const std::vector<std::unique_ptr<Pass>>& all_passes() {
  static const std::vector<std::unique_ptr<Pass>> v = [] {
    std::vector<std::unique_ptr<Pass>> p;
    p.push_back(passes::make_decompose());
    p.push_back(passes::make_reorder());
    p.push_back(passes::make_tp_sp());
    p.push_back(passes::make_tp_ep());
    p.push_back(passes::make_pp_ep());
    p.push_back(passes::make_pp_sp());
    p.push_back(passes::make_tp_pp());
    p.push_back(passes::make_sp_ep());
    p.push_back(passes::make_coalesce());
    p.push_back(passes::make_dedup());
    p.push_back(passes::make_coc());
    return p;
  }();
  return v;
}

const Pass* find_pass(std::string_view name) {
  for (const auto& p : all_passes())
    if (p->name() == name) return p.get();
  return nullptr;
}

namespace {
std::string json_str(std::string_view s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}
}  // namespace

std::string finding_detail_json(const Finding& f, bool applied) {
  std::string o = "{\"summary\":" + json_str(f.summary);
  o += std::string(",\"applied\":") + (applied ? "true" : "false");
  o += std::string(",\"legal\":") + (f.legal ? "true" : "false");
  o += std::string(",\"enabling\":") + (f.enabling ? "true" : "false");
  o += ",\"assumption\":" + json_str(f.assumption);
  if (f.assumed) o += ",\"assumed\":true";  // applied under its assumption (fuse --assume)
  o += ",\"saving_bytes\":" + std::to_string(f.saving_bytes) + "}";
  return o;
}

namespace passes {

std::vector<int64_t> member_ids(const Schedule& s, const MatchGroup& g) {
  std::vector<int64_t> v;
  for (const OpRef& r : g.members) v.push_back(s.op(r).id);
  return v;
}

std::vector<int32_t> member_ranks(const MatchGroup& g) {
  std::vector<int32_t> v;
  for (const OpRef& r : g.members) v.push_back(r.rank);
  sort_unique(v);
  return v;
}

std::string name_ops(const Schedule& s, const std::vector<OpRef>& refs, size_t most) {
  std::vector<std::string> names;
  for (const OpRef& r : refs) {
    std::string n = "op " + std::to_string(s.op(r).id) + " (" + op_name(s.op(r)) + ", rank " +
                    std::to_string(r.rank) + ")";
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  std::string t;
  for (size_t i = 0; i < names.size() && i < most; ++i) t += (i ? ", " : "") + names[i];
  if (names.size() > most) t += " and " + std::to_string(names.size() - most) + " more";
  return t;
}

bool valid(const Schedule& s, std::string* why) {
  auto problems = validate(s);
  if (problems.empty()) return true;
  if (why) *why = problems.front();
  return false;
}

}  // namespace passes

}  // namespace braid::fusion
