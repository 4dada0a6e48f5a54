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
  // A per-row slice of a row-wise compute: its class node, row length and rows per block.
  struct RowSlice {
    int node;
    int64_t len, rows;
  };
  // A row-wise compute: its per-row reads and writes (indexes into row_slices_).
  struct RowOp {
    std::vector<int> reads, writes;
    bool sum_rows = false;
  };
  int row_slice(int node, int64_t len, int64_t rows) {
    row_slices_.push_back({node, len, rows});
    return static_cast<int>(row_slices_.size()) - 1;
  }
  void row_op(RowOp op) { row_ops_.push_back(std::move(op)); }

  // Each class's divisor: the gcd of its positional numbers, then for classes with per-row
  // slices either a divisor of every row length (rows kept, each row shorter) or, where it
  // divides them, a multiple of every row length (whole rows merged, F = d / len of them per
  // scaled row) as long as every row-wise op still maps each scaled row to a whole number of
  // scaled rows (docs/replay.md); classes that break that are demoted to the first form.
  ExactScale result() {
    const int n = static_cast<int>(parent_.size());
    std::vector<int64_t> len_gcd(n, 0), len_lcm(n, 1), block_gcd(n, 0);
    std::vector<char> has_rows(n, 0);
    for (const RowSlice& s : row_slices_) {
      const int c = find(s.node);
      has_rows[c] = 1;
      len_gcd[c] = std::gcd(len_gcd[c], s.len);
      len_lcm[c] = std::lcm(len_lcm[c], s.len);
      block_gcd[c] = std::gcd(block_gcd[c], s.len * s.rows);
    }
    std::vector<int64_t> merged(n, 0);  // 0: rows kept
    for (int c = 0; c < n; ++c) {
      if (find(c) != c || !has_rows[c]) continue;
      const int64_t d = std::gcd(gcd_[c], block_gcd[c]);
      if (d > len_lcm[c] && d % len_lcm[c] == 0) merged[c] = d;
    }
    auto factor = [&](int slice) {
      const RowSlice& s = row_slices_[slice];
      const int64_t d = merged[find(s.node)];
      return d ? d / s.len : int64_t{1};
    };
    // Lowers a merged class's divisor to gcd(d, x), or back to rows kept when that no longer
    // holds whole rows of every per-row slice; true when it changed.
    auto shrink = [&](int slice, int64_t x) {
      const int c = find(row_slices_[slice].node);
      const int64_t d = merged[c];
      int64_t nd = std::gcd(d, x);
      if (nd <= len_lcm[c] || nd % len_lcm[c] != 0) nd = 0;
      merged[c] = nd;
      return nd != d;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (const RowOp& op : row_ops_) {
        if (op.sum_rows) {  // every per-row read merges the same rows
          int64_t f = 0;
          for (int k : op.reads) f = std::gcd(f, factor(k));
          for (int k : op.reads)
            if (factor(k) != f) changed |= shrink(k, f * row_slices_[k].len);
          continue;
        }
        // Each scaled write row must read a whole number (>= 1) of scaled rows of each read:
        // F_k must divide R_k * F_w / R_w.
        for (int w : op.writes)
          for (int k : op.reads) {
            const int64_t fw = factor(w), fk = factor(k);
            if (fw == 1 && fk == 1) continue;
            const int64_t rw = row_slices_[w].rows, rk = row_slices_[k].rows;
            if ((rk * fw) % rw == 0 && ((rk * fw) / rw) % fk == 0) continue;
            if ((rk * fw) % rw == 0) {
              changed |= shrink(k, ((rk * fw) / rw) * row_slices_[k].len);
            } else {
              changed |= shrink(w, 1);
              changed |= shrink(k, 1);
            }
          }
      }
    }
    ExactScale k;
    for (const auto& [key, id] : ids_) {
      const int c = find(id);
      const int64_t g = merged[c]     ? merged[c]
                        : has_rows[c] ? std::gcd(gcd_[c], len_gcd[c])
                                      : gcd_[c];
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
  std::vector<RowSlice> row_slices_;
  std::vector<RowOp> row_ops_;
};

void add_schedule(Classes& c, const Schedule& s) {
  auto slice = [&](int32_t r, const Slice& sl) {
    const int n = c.node(r, sl.buffer);
    c.divides(n, sl.offset);
    c.divides(n, sl.count);
    return n;
  };
  const Matching m = match_schedule_collectives(s);
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
            // Rows are hashed whole: a per-row slice keeps whole rows of whole blocks, or whole
            // blocks of whole rows (Classes::result).
            const int64_t blocks =
                cp->transpose.size() == 2 ? cp->transpose[0] * cp->transpose[1] : 1;
            Classes::RowOp op;
            op.sum_rows = cp->sum_rows;
            for (size_t k = 0; k < cp->reads.size(); ++k) {
              const int n = slice(r, cp->reads[k]);
              const int64_t rows = k < cp->read_rows.size() ? cp->read_rows[k] : 0;
              if (rows > 0)
                op.reads.push_back(c.row_slice(n, cp->reads[k].count / rows, rows / blocks));
            }
            for (size_t w = 0; w < cp->writes.size(); ++w) {
              const int n = slice(r, cp->writes[w]);
              const int64_t rows = w < cp->write_rows.size() ? cp->write_rows[w] : 0;
              if (rows > 0)
                op.writes.push_back(c.row_slice(n, cp->writes[w].count / rows, rows / blocks));
            }
            c.row_op(std::move(op));
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
          // A per-row slice whose divisor exceeds its row length merges d / len rows.
          auto rows = [&](const Slice& sl, int64_t& n) {
            if (n <= 0 || sl.empty()) return;
            const int64_t len = sl.count / n, d = k.of(r, sl.buffer);
            if (d > len)
              n = scaled(n, scaled(d, len, s, r, "divisor of '" + sl.buffer + "'"), s, r,
                         "rows of '" + sl.buffer + "'");
          };
          for (size_t i = 0; i < cp->reads.size() && i < cp->read_rows.size(); ++i)
            rows(cp->reads[i], cp->read_rows[i]);
          for (size_t i = 0; i < cp->writes.size() && i < cp->write_rows.size(); ++i)
            rows(cp->writes[i], cp->write_rows[i]);
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
