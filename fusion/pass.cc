#include "fusion/pass.h"

#include <algorithm>
#include <cstdio>

#include "fusion/passes/passes.h"
#include "fusion/validate.h"
#include "trace/error.h"
#include "trace/json.h"

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

std::string finding_detail_json(const Finding& f, bool applied) {
  json::Writer w;
  w.begin_object()
      .field("summary", f.summary)
      .field("applied", applied)
      .field("legal", f.legal)
      .field("enabling", f.enabling)
      .field("assumption", f.assumption);
  if (f.assumed) w.field("assumed", true);  // applied under its assumption (fuse --assume)
  if (!f.rejection.empty()) w.field("rejection", f.rejection);
  w.field("saving_bytes", f.saving_bytes).end_object();
  return w.take();
}

std::string_view finding_status(const Finding& f, bool applied) {
  if (applied) return f.assumed ? "assumed" : "applied";
  if (!f.rejection.empty()) return "rejected";
  return f.legal ? "skipped" : "advice";
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
