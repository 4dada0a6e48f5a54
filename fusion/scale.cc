#include "fusion/scale.h"

#include <algorithm>
#include <numeric>

#include "fusion/validate.h"
#include "trace/error.h"

namespace braid::fusion {

namespace {

// Union-find over (rank, buffer) keys and collective groups, with the gcd of every number that
// must stay divisible per class.
class Classes {
 public:
  int node(int32_t rank, const std::string& buffer) {
    auto [it, fresh] = ids_.try_emplace({rank, buffer}, static_cast<int>(parent_.size()));
    if (fresh) add_node();
    return it->second;
  }
  int fresh_node() {
    add_node();
    return static_cast<int>(parent_.size()) - 1;
  }
  int find(int x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void link(int a, int b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    parent_[a] = b;
    gcd_[b] = std::gcd(gcd_[a], gcd_[b]);
  }
  void divides(int x, int64_t n) {
    x = find(x);
    gcd_[x] = std::gcd(gcd_[x], n);
  }
  ExactScale result() {
    ExactScale k;
    for (const auto& [key, id] : ids_) {
      const int64_t g = gcd_[find(id)];
      if (g > 1) k.divisor[key] = g;
    }
    return k;
  }

 private:
  void add_node() {
    parent_.push_back(static_cast<int>(parent_.size()));
    gcd_.push_back(0);
  }
  std::map<std::pair<int32_t, std::string>, int> ids_;
  std::vector<int> parent_;
  std::vector<int64_t> gcd_;  // 0: no constraint yet
};

void add_schedule(Classes& c, const Schedule& s) {
  auto slice = [&](int32_t r, const Slice& sl) {
    const int n = c.node(r, sl.buffer);
    c.divides(n, sl.offset);
    c.divides(n, sl.count);
    return n;
  };
  const Matching m = match_collectives(s);
  std::vector<int> group_node(m.groups.size(), -1);
  for (const RankSchedule& rs : s.ranks) {
    const int32_t r = rs.rank;
    for (const Buffer& b : rs.buffers) c.divides(c.node(r, b.name), b.size);
    for (int32_t st = 0; st < static_cast<int32_t>(rs.streams.size()); ++st) {
      const auto& ops = rs.streams[st].ops;
      for (int32_t i = 0; i < static_cast<int32_t>(ops.size()); ++i) {
        if (const Compute* cp = ops[i].compute()) {
          if (cp->opaque) continue;
          if (cp->row_wise()) {
            // Rows are hashed whole: each per-row slice keeps whole rows of whole blocks.
            for (size_t k = 0; k < cp->reads.size(); ++k) {
              const int n = slice(r, cp->reads[k]);
              if (k < cp->read_rows.size() && cp->read_rows[k] > 0)
                c.divides(n, cp->reads[k].count / cp->read_rows[k]);
            }
            for (size_t w = 0; w < cp->writes.size(); ++w) {
              const int n = slice(r, cp->writes[w]);
              if (w < cp->write_rows.size() && cp->write_rows[w] > 0)
                c.divides(n, cp->writes[w].count / cp->write_rows[w]);
            }
            continue;
          }
          std::vector<int> reads, writes;
          for (const Slice& sl : cp->reads) reads.push_back(slice(r, sl));
          for (const Slice& sl : cp->writes) writes.push_back(slice(r, sl));
          const bool add = cp->fn == "add";
          for (size_t w = 0; w < writes.size(); ++w)
            for (size_t k = 0; k < reads.size(); ++k)
              if (add || (cp->writes[w].count > 1 && cp->reads[k].count > 1))
                c.link(writes[w], reads[k]);
          continue;
        }
        const Collective* co = ops[i].collective();
        if (!co) continue;
        const int g = m.group_of({r, st, i});
        int hub;
        if (g >= 0) {
          if (group_node[g] < 0) group_node[g] = c.fresh_node();
          hub = group_node[g];
        } else {
          hub = c.fresh_node();
        }
        c.divides(hub, co->count);
        for (const Slice* sl : {&co->in, &co->out}) {
          if (sl->empty()) continue;
          c.link(slice(r, *sl), hub);
        }
        for (const auto* chunks : {&co->sends, &co->recvs})
          for (const PeerChunk& ch : *chunks) {
            c.divides(hub, ch.offset);
            c.divides(hub, ch.count);
          }
      }
    }
  }
}

int64_t scaled(int64_t v, int64_t d, const Schedule& s, int32_t rank, const std::string& what) {
  if (v % d != 0)
    throw Error(ErrorCode::Internal, "scale_down: " + what + " " + std::to_string(v) + " on rank " +
                                         std::to_string(rank) + " of '" + s.name +
                                         "' is not divisible by " + std::to_string(d));
  return v / d;
}

}  // namespace

int64_t ExactScale::of(int32_t rank, const std::string& buffer) const {
  auto it = divisor.find({rank, buffer});
  return it == divisor.end() ? 1 : it->second;
}

int64_t ExactScale::largest() const {
  int64_t m = 1;
  for (const auto& [key, d] : divisor) m = std::max(m, d);
  return m;
}

ExactScale exact_scale(const std::vector<const Schedule*>& schedules) {
  Classes c;
  for (const Schedule* s : schedules) add_schedule(c, *s);
  return c.result();
}

Schedule scale_down(const Schedule& s, const ExactScale& k) {
  Schedule out = s;
  for (RankSchedule& rs : out.ranks) {
    const int32_t r = rs.rank;
    auto slice = [&](Slice& sl) {
      if (sl.empty()) return int64_t{1};
      const int64_t d = k.of(r, sl.buffer);
      sl.offset = scaled(sl.offset, d, s, r, "offset in '" + sl.buffer + "'");
      sl.count = scaled(sl.count, d, s, r, "count in '" + sl.buffer + "'");
      return d;
    };
    for (Buffer& b : rs.buffers)
      b.size = scaled(b.size, k.of(r, b.name), s, r, "size of '" + b.name + "'");
    for (Stream& st : rs.streams)
      for (Op& op : st.ops) {
        if (Compute* cp = op.compute()) {
          for (Slice& sl : cp->reads) slice(sl);
          for (Slice& sl : cp->writes) slice(sl);
        } else if (Collective* co = op.collective()) {
          const int64_t din = slice(co->in), dout = slice(co->out);
          const int64_t d = co->in.empty() ? dout : din;
          co->count = scaled(co->count, d, s, r, "count of collective '" + co->label + "'");
          for (auto* chunks : {&co->sends, &co->recvs})
            for (PeerChunk& ch : *chunks) {
              ch.offset = scaled(ch.offset, d, s, r, "chunk offset of '" + co->label + "'");
              ch.count = scaled(ch.count, d, s, r, "chunk count of '" + co->label + "'");
            }
        }
      }
  }
  return out;
}

int64_t buffer_elements(const Schedule& s, const std::vector<int32_t>& ranks) {
  int64_t n = 0;
  for (const RankSchedule& rs : s.ranks) {
    if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), rs.rank) == ranks.end()) continue;
    for (const Buffer& b : rs.buffers) n += b.size;
  }
  return n;
}

}  // namespace braid::fusion
