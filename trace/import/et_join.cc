// Joining an execution trace's nodes to the trace's CPU ops, and storing both
// (trace/import/et.h, docs/import-et.md "The join").
//
// 1. By record-function id: a trace whose CPU ops carry "Record function id" (PyTorch 2.1+
//    Kineto) names each op's ET node exactly (the ET's rf_id); the names must agree.
// 2. Otherwise by sequence number and op-name order, per thread. An ET numbers its threads
//    itself; the trace has the OS thread ids. Ops that carry a sequence number on both sides
//    (autograd ops: "Sequence number" in Kineto, seq_id in the ET) with a (name, number) pair
//    found once in the trace are anchors: they map the ET's threads to the trace's and fix the
//    iteration. Between anchors, and on threads without any, the nodes (in id order, which is
//    the order the ops were entered) are aligned with the thread's ops (in start order) by name:
//    equal names join; on a difference the nearer resync in either sequence wins, and ops that
//    start at the same time (microsecond timestamps) may match in either order. Without
//    anchors, the alignment starts where runs of 6 consecutive names agree most (voting on
//    the offset between the sequences), trying the best few offsets and keeping the one that
//    joins most: a trace of several iterations has one such offset per iteration.
// 3. Nodes left over are joined to a not yet joined op of the same name on any thread between
//    the ops their joined neighbours (by id) were joined to: the work a framework runs on a
//    helper thread (gloo's) that the ET records on the calling thread.
// The join holds when at least half the nodes join; otherwise the ET is not of this trace's run.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "trace/error.h"
#include "trace/import/et.h"
#include "trace/import/importer.h"
#include "trace/rows.h"

namespace braid::et {
namespace {

constexpr size_t kLookahead = 48;
constexpr size_t kGram = 6;
constexpr size_t kMaxGramHits = 64;  // k-grams more frequent than this in the trace vote not
constexpr size_t kCandidates = 8;    // offsets tried per thread
constexpr double kMinJoined = 0.5;

struct Side {
  std::vector<StrId> names;
  std::vector<Ns> starts;    // host side only (tie groups)
  std::vector<int32_t> ids;  // indices into the op lists
};

using Pairs = std::vector<std::pair<size_t, size_t>>;  // positions in (a, b)

// Greedy alignment of a[i, ie) with b[j, je) (b may be reordered within groups of equal
// start times). Appends the joined positions.
void align_forward(const Side& a, Side& b, size_t i, size_t ie, size_t j, size_t je, Pairs& out) {
  while (i < ie && j < je) {
    if (a.names[i] != b.names[j] && !b.starts.empty()) {
      // Ops that started at the same time may have entered in either order.
      for (size_t k = j + 1; k < je && b.starts[k] == b.starts[j]; ++k)
        if (b.names[k] == a.names[i]) {
          std::swap(b.names[j], b.names[k]);
          std::swap(b.ids[j], b.ids[k]);
          std::swap(b.starts[j], b.starts[k]);
          break;
        }
    }
    if (a.names[i] == b.names[j]) {
      out.emplace_back(i++, j++);
      continue;
    }
    size_t da = 0, db = 0;
    for (size_t d = 1; d < kLookahead && i + d < ie; ++d)
      if (a.names[i + d] == b.names[j]) {
        da = d;
        break;
      }
    for (size_t d = 1; d < kLookahead && j + d < je; ++d)
      if (b.names[j + d] == a.names[i]) {
        db = d;
        break;
      }
    if (da == 0 && db == 0) {
      ++i, ++j;  // neither resyncs nearby: both unjoined
    } else if (da != 0 && (db == 0 || da <= db)) {
      i += da;
    } else {
      j += db;
    }
  }
}

Side reversed(const Side& s, size_t from, size_t to) {
  Side r;
  for (size_t k = to; k-- > from;) {
    r.names.push_back(s.names[k]);
    r.ids.push_back(s.ids[k]);
    if (!s.starts.empty()) r.starts.push_back(s.starts[k]);
  }
  return r;
}

// Aligns a[0, i0) backwards from b position j0 (exclusive), appending pairs in original
// positions.
void align_backward(const Side& a, Side& b, size_t i0, size_t j0, size_t jlo, Pairs& out) {
  Side ra = reversed(a, 0, i0);
  Side rb = reversed(b, jlo, j0);
  Pairs p;
  align_forward(ra, rb, 0, ra.names.size(), 0, rb.names.size(), p);
  for (auto [x, y] : p) {
    size_t ai = i0 - 1 - x, bj = j0 - 1 - y;
    // rb may have been reordered within tie groups: write the order back
    b.names[bj] = rb.names[y];
    b.ids[bj] = rb.ids[y];
    if (!b.starts.empty()) b.starts[bj] = rb.starts[y];
    out.emplace_back(ai, bj);
  }
}

uint64_t gram_hash(const std::vector<StrId>& v, size_t at) {
  uint64_t h = 1469598103934665603ull;
  for (size_t k = 0; k < kGram; ++k) h = (h ^ v[at + k]) * 1099511628211ull;
  return h;
}

// The best alignment of `a` with `b` without anchors: candidate offsets by k-gram votes; the
// pairs' second is a host op index. A trace of several iterations offers one offset per
// iteration, and they may join (nearly) as many nodes: among those within 10% of the best, the
// one whose span is closest to the ET's own recorded duration (`et_ns`, -1 unknown) wins.
// `ambiguous` counts the others.
template <typename SpanOf>
Pairs align_unanchored(const Side& a, const Side& b0, Ns et_ns, const SpanOf& span_of,
                       int& ambiguous) {
  ambiguous = 0;
  if (a.names.empty() || b0.names.empty()) return {};
  std::vector<std::pair<int64_t, size_t>> seeds;  // (offset j - i, first i)
  if (a.names.size() >= kGram && b0.names.size() >= kGram) {
    std::unordered_map<uint64_t, std::vector<uint32_t>> grams;
    for (size_t j = 0; j + kGram <= b0.names.size(); ++j)
      grams[gram_hash(b0.names, j)].push_back(static_cast<uint32_t>(j));
    std::map<int64_t, std::pair<int64_t, size_t>> votes;  // offset -> (votes, first i)
    for (size_t i = 0; i + kGram <= a.names.size(); ++i) {
      auto g = grams.find(gram_hash(a.names, i));
      if (g == grams.end() || g->second.size() > kMaxGramHits) continue;
      for (uint32_t j : g->second) {
        auto& v = votes[static_cast<int64_t>(j) - static_cast<int64_t>(i)];
        if (v.first++ == 0) v.second = i;
      }
    }
    std::vector<std::pair<int64_t, int64_t>> ranked;  // (votes, offset)
    for (auto& [off, v] : votes) ranked.emplace_back(v.first, off);
    std::sort(ranked.begin(), ranked.end(), [](auto x, auto y) {
      return x.first != y.first ? x.first > y.first : x.second < y.second;
    });
    // Offsets within a few positions of a better one are the same alignment, shifted by a skip.
    std::vector<int64_t> taken;
    for (auto [n, off] : ranked) {
      if (seeds.size() >= kCandidates || n * 4 < ranked[0].first) break;
      bool near = false;
      for (int64_t t : taken) near = near || std::llabs(t - off) < static_cast<int64_t>(kLookahead);
      if (near) continue;
      taken.push_back(off);
      seeds.emplace_back(off, votes[off].second);
    }
  }
  if (seeds.empty()) {
    // Short sequences: start where the first name occurs.
    for (size_t j = 0; j < b0.names.size() && seeds.size() < kCandidates; ++j)
      if (b0.names[j] == a.names[0]) seeds.emplace_back(static_cast<int64_t>(j), 0);
  }
  std::vector<Pairs> tried;
  size_t best_n = 0;
  for (auto [off, i0] : seeds) {
    int64_t j0 = off + static_cast<int64_t>(i0);
    if (j0 < 0 || j0 >= static_cast<int64_t>(b0.names.size())) continue;
    Side b = b0;
    Pairs p;
    align_backward(a, b, i0, static_cast<size_t>(j0), 0, p);
    align_forward(a, b, i0, a.names.size(), static_cast<size_t>(j0), b.names.size(), p);
    // Positions refer to `b`, reordered within tie groups: map to op indices now.
    for (auto& [x, y] : p) y = static_cast<size_t>(b.ids[y]);
    best_n = std::max(best_n, p.size());
    tried.push_back(std::move(p));
  }
  const Pairs* pick = nullptr;
  Ns pick_miss = INT64_MAX;
  for (const Pairs& p : tried) {
    if (p.empty() || p.size() * 10 < best_n * 9) continue;
    Ns miss = et_ns > 0 ? std::llabs(span_of(p) - et_ns) : 0;
    if (pick) ++ambiguous;
    if (!pick || miss < pick_miss || (et_ns <= 0 && p.size() > pick->size())) {
      pick = &p;
      pick_miss = miss;
    }
  }
  return pick ? *pick : Pairs{};
}

// Longest chain of anchors increasing in both positions (anchors sorted by the first).
std::vector<std::pair<size_t, size_t>> monotone(std::vector<std::pair<size_t, size_t>> v) {
  if (v.empty()) return v;
  std::vector<size_t> tails, prev(v.size(), SIZE_MAX), tail_idx;
  for (size_t k = 0; k < v.size(); ++k) {
    auto it = std::lower_bound(tails.begin(), tails.end(), v[k].second);
    size_t pos = static_cast<size_t>(it - tails.begin());
    if (it == tails.end()) {
      tails.push_back(v[k].second);
      tail_idx.push_back(k);
    } else {
      *it = v[k].second;
      tail_idx[pos] = k;
    }
    prev[k] = pos > 0 ? tail_idx[pos - 1] : SIZE_MAX;
  }
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t k = tail_idx.back(); k != SIZE_MAX; k = prev[k]) out.push_back(v[k]);
  std::reverse(out.begin(), out.end());
  return out;
}

struct Joiner {
  const Trace& t;
  const HostOps& host;
  std::vector<size_t> ops;      // ET node indices (non-root), by id
  std::vector<StrId> names;     // per node index
  std::vector<int64_t> joined;  // per node index: host op index, -1
  std::vector<EtJoin> how;      // per node index
  std::vector<bool> host_used;
  int ambiguous_offsets = 0;

  void join(size_t node, size_t op, EtJoin h) {
    joined[node] = static_cast<int64_t>(op);
    how[node] = h;
    host_used[op] = true;
  }

  Side host_side(int64_t tid, Ns lo, Ns hi) const {
    Side s;
    std::vector<int32_t> idx;
    for (size_t k = 0; k < host.ops.size(); ++k) {
      const HostOp& o = host.ops[k];
      if (o.tid == tid && o.start >= lo && o.start <= hi && !host_used[k])
        idx.push_back(static_cast<int32_t>(k));
    }
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t x, int32_t y) {
      const HostOp &a = host.ops[x], &b = host.ops[y];
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    for (int32_t k : idx) {
      s.names.push_back(host.ops[k].name);
      s.starts.push_back(host.ops[k].start);
      s.ids.push_back(k);
    }
    return s;
  }

  Side et_side(const std::vector<size_t>& nodes) const {
    Side s;
    for (size_t n : nodes)
      if (joined[n] < 0) {
        s.names.push_back(names[n]);
        s.ids.push_back(static_cast<int32_t>(n));
      }
    return s;
  }

  void by_record_id() {
    std::unordered_map<int64_t, size_t> by_rf;
    for (size_t k = 0; k < host.ops.size(); ++k)
      if (host.ops[k].rf_id >= 0) by_rf.emplace(host.ops[k].rf_id, k);
    for (size_t n : ops) {
      auto it = by_rf.find(t.nodes[n].rf_id);
      if (t.nodes[n].rf_id >= 0 && it != by_rf.end() && !host_used[it->second] &&
          host.ops[it->second].name == names[n])
        join(n, it->second, EtJoin::RecordId);
    }
  }

  // Sequence-number anchors, the thread map, and the order alignment.
  void by_order() {
    std::map<std::pair<StrId, int64_t>, std::vector<size_t>> by_seq;
    for (size_t k = 0; k < host.ops.size(); ++k)
      if (host.ops[k].seq >= 0) by_seq[{host.ops[k].name, host.ops[k].seq}].push_back(k);
    std::map<int64_t, std::vector<size_t>> threads;  // ET tid -> nodes by id
    for (size_t n : ops) threads[t.nodes[n].tid].push_back(n);
    // Anchors, and the host thread each ET thread's anchors name most.
    std::map<int64_t, std::vector<std::pair<size_t, size_t>>> anchors;  // ET tid -> (node, op)
    for (auto& [tid, nodes] : threads)
      for (size_t n : nodes) {
        if (t.nodes[n].seq < 0) continue;
        auto it = by_seq.find({names[n], t.nodes[n].seq});
        if (it != by_seq.end() && it->second.size() == 1)
          anchors[tid].emplace_back(n, it->second[0]);
      }
    // Threads with the most nodes first: the first fixes the window for the others.
    std::vector<int64_t> order;
    for (auto& [tid, nodes] : threads) order.push_back(tid);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return threads[x].size() > threads[y].size(); });
    std::set<int64_t> host_tids;
    for (const HostOp& o : host.ops) host_tids.insert(o.tid);
    std::set<int64_t> taken;
    Ns win_lo = INT64_MIN, win_hi = INT64_MAX;
    for (int64_t etid : order) {
      const auto& nodes = threads[etid];
      int64_t htid = 0;
      bool found = false;
      auto& anc = anchors[etid];
      if (!anc.empty()) {
        std::map<int64_t, size_t> votes;
        for (auto [n, k] : anc) ++votes[host.ops[k].tid];
        size_t best = 0;
        for (auto [h, v] : votes)
          if (v > best) best = v, htid = h, found = true;
      }
      if (!found) {
        // The host thread whose op names overlap this thread's most (in the window).
        std::map<StrId, int64_t> want;
        for (size_t n : nodes) ++want[names[n]];
        int64_t best = 0;
        for (int64_t h : host_tids) {
          if (taken.count(h)) continue;
          std::map<StrId, int64_t> have;
          for (const HostOp& o : host.ops)
            if (o.tid == h && o.start >= win_lo && o.start <= win_hi) ++have[o.name];
          int64_t score = 0;
          for (auto& [name, c] : want) {
            auto it = have.find(name);
            if (it != have.end()) score += std::min(c, it->second);
          }
          if (score > best) best = score, htid = h, found = true;
        }
      }
      if (!found) continue;
      taken.insert(htid);
      Side a = et_side(nodes);
      // Anchors place a thread themselves; a thread without them is looked for only near the
      // ops the first thread joined.
      Side b =
          anc.empty() ? host_side(htid, win_lo, win_hi) : host_side(htid, INT64_MIN, INT64_MAX);
      Pairs pairs;  // (position in a, host op index)
      // Anchors in a's and b's positions, kept monotone.
      std::vector<std::pair<size_t, size_t>> ab;
      {
        std::unordered_map<int32_t, size_t> apos, bpos;
        for (size_t i = 0; i < a.ids.size(); ++i) apos[a.ids[i]] = i;
        for (size_t j = 0; j < b.ids.size(); ++j) bpos[b.ids[j]] = j;
        for (auto [n, k] : anc) {
          auto x = apos.find(static_cast<int32_t>(n));
          auto y = bpos.find(static_cast<int32_t>(k));
          if (x != apos.end() && y != bpos.end()) ab.emplace_back(x->second, y->second);
        }
        std::sort(ab.begin(), ab.end());
        ab = monotone(ab);
      }
      if (!ab.empty()) {
        Pairs p;
        // Before the first anchor: backwards, within a window of the thread's length.
        size_t jlo = ab[0].second > a.names.size() * 2 ? ab[0].second - a.names.size() * 2 : 0;
        align_backward(a, b, ab[0].first, ab[0].second, jlo, p);
        for (size_t q = 0; q < ab.size(); ++q) {
          p.emplace_back(ab[q].first, ab[q].second);
          size_t ie = q + 1 < ab.size() ? ab[q + 1].first : a.names.size();
          size_t je =
              q + 1 < ab.size()
                  ? ab[q + 1].second
                  : std::min(b.names.size(),
                             ab[q].second + (a.names.size() - ab[q].first) * 2 + kLookahead);
          align_forward(a, b, ab[q].first + 1, ie, ab[q].second + 1, je, p);
        }
        for (auto& [x, y] : p) y = static_cast<size_t>(b.ids[y]);
        pairs = std::move(p);
      } else {
        int amb = 0;
        const Ns et_ns = t.finish_ms > t.start_ms && t.start_ms >= 0
                             ? (t.finish_ms - t.start_ms) * 1'000'000
                             : -1;
        auto span_of = [&](const Pairs& p) {
          Ns lo = INT64_MAX, hi = INT64_MIN;
          for (auto [x, k] : p)
            lo = std::min(lo, host.ops[k].start), hi = std::max(hi, host.ops[k].end);
          return hi - lo;
        };
        pairs = align_unanchored(a, b, et_ns, span_of, amb);
        ambiguous_offsets += amb;
      }
      Ns lo = INT64_MAX, hi = INT64_MIN;
      for (auto [x, k] : pairs) {
        if (host_used[k]) continue;
        join(static_cast<size_t>(a.ids[x]), k, !anc.empty() ? EtJoin::Sequence : EtJoin::Order);
        lo = std::min(lo, host.ops[k].start);
        hi = std::max(hi, host.ops[k].end);
      }
      if (win_lo == INT64_MIN && lo <= hi) {
        const Ns et_ns = t.finish_ms > t.start_ms && t.start_ms >= 0
                             ? (t.finish_ms - t.start_ms) * 1'000'000
                             : 0;
        Ns slack = std::max((hi - lo) / 10 + 1'000'000, et_ns);
        win_lo = lo - slack, win_hi = hi + slack;
      }
    }
  }

  // Leftover nodes: an op of the same name on any thread, between the ops the node's joined
  // neighbours (by id) were joined to.
  void leftovers() {
    std::unordered_map<StrId, std::vector<size_t>> free_by_name;  // by start
    for (size_t k = 0; k < host.ops.size(); ++k)
      if (!host_used[k]) free_by_name[host.ops[k].name].push_back(k);
    for (auto& [name, v] : free_by_name)
      std::sort(v.begin(), v.end(),
                [&](size_t x, size_t y) { return host.ops[x].start < host.ops[y].start; });
    for (size_t q = 0; q < ops.size(); ++q) {
      size_t n = ops[q];
      if (joined[n] >= 0) continue;
      Ns lo = INT64_MIN, hi = INT64_MAX;
      for (size_t p = q; p-- > 0;)
        if (joined[ops[p]] >= 0) {
          lo = host.ops[joined[ops[p]]].start;
          break;
        }
      for (size_t p = q + 1; p < ops.size(); ++p)
        if (joined[ops[p]] >= 0) {
          hi = host.ops[joined[ops[p]]].end;
          break;
        }
      if (lo == INT64_MIN || hi == INT64_MAX) continue;
      auto it = free_by_name.find(names[n]);
      if (it == free_by_name.end()) continue;
      auto& v = it->second;
      auto first = std::lower_bound(v.begin(), v.end(), lo,
                                    [&](size_t k, Ns x) { return host.ops[k].start < x; });
      for (auto f = first; f != v.end() && host.ops[*f].start <= hi; ++f)
        if (!host_used[*f]) {
          join(n, *f, EtJoin::Order);
          break;
        }
    }
  }
};

std::string top_names(const std::map<std::string, int64_t>& counts, size_t k) {
  std::vector<std::pair<int64_t, std::string>> v;
  for (auto& [n, c] : counts) v.emplace_back(-c, n);
  std::sort(v.begin(), v.end());
  std::string out;
  for (size_t i = 0; i < v.size() && i < k; ++i)
    out += (i ? ", " : "") + v[i].second + " (" + std::to_string(-v[i].first) + ")";
  if (v.size() > k) out += ", ...";
  return out;
}

// The element counts (in, out) and dtype of a c10d collective from its tensors (the host
// collectives of a gloo job, which the trace does not size): c10d::allreduce_, broadcast_,
// reduce_ (tensors in place), allgather_ / _allgather_base_ (output first, then input),
// reduce_scatter_ / _reduce_scatter_base_ (output, input), alltoall_base_ (output, input),
// send / recv. Nothing for other ops.
std::optional<std::tuple<int64_t, int64_t, std::string>> c10d_size(const Node& n) {
  std::string_view name = n.name;
  if (name.rfind("c10d::", 0) != 0) return std::nullopt;
  auto sum = [&](size_t arg) -> int64_t {
    if (arg >= n.inputs.size() || n.inputs[arg].tensors.empty()) return -1;
    int64_t e = 0;
    for (const TensorValue& t : n.inputs[arg].tensors) e += t.numel;
    return e;
  };
  auto dtype = [&]() -> std::string {
    for (const Arg& a : n.inputs)
      for (const TensorValue& t : a.tensors)
        if (t.defined() && !t.dtype.empty()) return t.dtype;
    return "";
  };
  int64_t in = -1, out = -1;
  if (name.find("allreduce") != std::string_view::npos ||
      name.find("broadcast") != std::string_view::npos || name == "c10d::reduce_" ||
      name == "c10d::send" || name == "c10d::recv_" || name == "c10d::recv_any_source_") {
    in = out = sum(0);
  } else if (name.find("allgather") != std::string_view::npos ||
             name.find("reduce_scatter") != std::string_view::npos ||
             name.find("alltoall") != std::string_view::npos) {
    out = sum(0);
    in = sum(1);
  } else {
    return std::nullopt;
  }
  if (in < 0 && out < 0) return std::nullopt;
  return std::make_tuple(in, out, dtype());
}

std::string json_ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

std::string JoinReport::line() const {
  std::string s = "rank " + std::to_string(rank) + ": " + std::to_string(joined) + " of " +
                  std::to_string(nodes) + " execution-trace ops joined to " + trace_path +
                  "'s CPU ops by " +
                  (how == EtJoin::RecordId   ? "record-function id"
                   : how == EtJoin::Sequence ? "sequence number and op order"
                                             : "op order");
  if (steps.size() == 1)
    s += " (step " + std::to_string(steps[0]) + ")";
  else if (steps.size() > 1) {
    s += " (steps";
    for (size_t i = 0; i < steps.size(); ++i) s += (i ? ", " : " ") + std::to_string(steps[i]);
    s += ")";
  }
  s += "; " + std::to_string(tensors) + " tensor arguments";
  return s;
}

namespace {

void check_pair(const Trace& t, const HostOps& host) {
  if (t.pid >= 0 && host.pid >= 0 && t.pid != host.pid)
    throw Error(ErrorCode::Usage,
                t.path + ": execution trace of process " + std::to_string(t.pid) + ", but " +
                    host.path + " (rank " + std::to_string(host.rank) + ") is process " +
                    std::to_string(host.pid) +
                    ": another run's or another rank's execution trace (give each rank's "
                    "execution trace with that rank's trace)");
  if (host.ops.empty())
    throw Error(ErrorCode::Usage, t.path + ": " + host.path +
                                      " has no CPU ops to join an execution trace to (a "
                                      "GPU-only or Nsight trace; record the job with the "
                                      "PyTorch profiler's CPU activity)");
}

// What the join found, beyond the pairs: the step of each node, the steps and window it covers.
struct JoinSummary {
  std::vector<int64_t> step_of;             // per node index
  std::map<std::string, int64_t> unjoined;  // by name
  Ns lo = INT64_MAX, hi = INT64_MIN;        // the joined ops' span
  std::set<int64_t> tids;                   // the threads they are on
};

JoinSummary summarize(const Trace& t, const HostOps& host, const Joiner& j, JoinReport& rep) {
  JoinSummary sum;
  sum.step_of.assign(t.nodes.size(), -1);
  std::map<int64_t, int64_t> per_step;
  for (size_t n : j.ops) {
    if (j.joined[n] < 0) {
      ++sum.unjoined[t.nodes[n].name];
      continue;
    }
    ++rep.joined;
    const HostOp& o = host.ops[j.joined[n]];
    sum.lo = std::min(sum.lo, o.start), sum.hi = std::max(sum.hi, o.end);
    sum.tids.insert(o.tid);
    for (const Step& s : host.steps)
      if (o.start >= s.start && o.start < s.end) {
        sum.step_of[n] = s.step;
        ++per_step[s.step];
        break;
      }
  }
  rep.nodes = static_cast<int64_t>(j.ops.size());
  for (size_t n : j.ops)
    if (j.how[n] == EtJoin::Sequence) rep.how = EtJoin::Sequence;
  // The steps holding at least 10% of the joined ops.
  for (auto [s, c] : per_step)
    if (c * 10 >= rep.joined) rep.steps.push_back(s);
  return sum;
}

EtTensor tensor_row(TraceWriter& w, int32_t rank, const Node& node, const Arg& arg, size_t a,
                    size_t i, bool output) {
  const TensorValue& tv = arg.tensors[i];
  EtTensor r;
  r.rank = rank;
  r.node = node.id;
  r.arg = static_cast<int32_t>(a);
  r.item = arg.kind == Arg::Kind::TensorList ? static_cast<int32_t>(i) : -1;
  r.output = output;
  r.tensor = tv.tensor;
  r.storage = tv.storage;
  r.offset = tv.offset;
  r.numel = tv.numel;
  r.itemsize = tv.itemsize;
  r.dtype = tv.dtype.empty() ? 0 : w.intern(tv.dtype);
  r.device = tv.device.empty() ? 0 : w.intern(tv.device);
  r.shape = w.intern(json_ints(tv.shape));
  r.strides = tv.strides ? w.intern(json_ints(*tv.strides)) : 0;
  r.lo = tv.lo;
  r.hi = tv.hi;
  r.extent = tv.extent;
  return r;
}

// The et_ops and et_tensors rows; returns the number of tensor rows.
int64_t write_rows(ImportContext& ctx, const Trace& t, const HostOps& host, const Joiner& j,
                   const JoinSummary& sum) {
  TraceWriter& w = ctx.writer;
  int64_t tensors = 0;
  for (size_t n : j.ops) {
    const Node& node = t.nodes[n];
    EtOp row;
    row.rank = host.rank;
    row.node = node.id;
    row.parent = node.parent;
    row.name = j.names[n];
    row.et_tid = node.tid;
    row.rf_id = node.rf_id;
    row.seq = node.seq;
    row.schema = node.schema.empty() ? 0 : w.intern(node.schema);
    row.kind = kind_of(node);
    if (j.joined[n] >= 0) {
      const HostOp& o = host.ops[j.joined[n]];
      row.tid = o.tid;
      row.op_start = o.start;
      row.op_end = o.end;
      row.step = sum.step_of[n];
      row.join = j.how[n];
    }
    w.add(ctx.run, row);
    for (int out = 0; out < 2; ++out) {
      const auto& args = out ? node.outputs : node.inputs;
      for (size_t a = 0; a < args.size(); ++a)
        for (size_t i = 0; i < args[a].tensors.size(); ++i) {
          if (!args[a].tensors[i].defined()) continue;
          w.add(ctx.run, tensor_row(w, host.rank, node, args[a], a, i, out == 1));
          ++tensors;
        }
    }
  }
  return tensors;
}

// Host collectives the trace did not size take their tensors' sizes.
void fill_sizes(ImportContext& ctx, const Trace& t, const HostOps& host, const Joiner& j) {
  TraceWriter& w = ctx.writer;
  for (size_t n : j.ops) {
    if (j.joined[n] < 0) continue;
    auto size = c10d_size(t.nodes[n]);
    if (!size) continue;
    auto [in, out, dtype] = *size;
    const HostOp& o = host.ops[j.joined[n]];
    const int sz = dtype_size(dtype);
    const int64_t bytes = sz > 0 ? std::max(in, out) * sz : -1;
    const StrId dt = dtype.empty() ? 0 : w.intern(dtype);
    w.submit([run = ctx.run, rank = host.rank, start = o.start, name = o.name, in, out, bytes,
              dt](sqlite3* db) {
      rows::fill_collective_size(db, run, rank, start, name, in, out, bytes, dt);
    });
  }
}

void diagnose(ImportContext& ctx, const Trace& t, const HostOps& host, const Joiner& j,
              const JoinSummary& sum, const JoinReport& rep, int64_t assumed, int64_t bounded) {
  int64_t trace_unjoined = 0;
  for (size_t k = 0; k < host.ops.size(); ++k) {
    const HostOp& o = host.ops[k];
    if (!j.host_used[k] && sum.tids.count(o.tid) && o.start >= sum.lo && o.end <= sum.hi)
      ++trace_unjoined;
  }
  const std::string where = t.path + " with " + host.path;
  std::string steps;
  for (size_t i = 0; i < rep.steps.size(); ++i)
    steps += (i ? ", " : "") + std::to_string(rep.steps[i]);
  const int32_t rank = host.rank;
  ctx.diagnose(
      diag::Code::et_joined, rep.joined,
      where + ": " + std::to_string(rep.joined) + " of " + std::to_string(rep.nodes) +
          " ops joined by " + std::string(to_string(rep.how)) +
          (steps.empty() ? std::string(", in no step")
                         : ", step" + std::string(rep.steps.size() > 1 ? "s " : " ") + steps) +
          (j.ambiguous_offsets
               ? "; " + std::to_string(j.ambiguous_offsets) +
                     " other iterations of the trace match the op order nearly as well"
                     " (the one closest to the execution trace's own duration was "
                     "taken)"
               : std::string()),
      rank);
  ctx.diagnose(diag::Code::et_not_joined, rep.nodes - rep.joined,
               where +
                   ": no CPU op of the same name in order on the op's thread or between "
                   "its joined neighbours: " +
                   top_names(sum.unjoined, 5),
               rank);
  ctx.diagnose(diag::Code::et_trace_ops_not_joined, trace_unjoined,
               where +
                   ": CPU ops inside the execution trace's window with no node (ops the ET "
                   "does not record, e.g. profiler and Python annotations)",
               rank);
  ctx.diagnose(diag::Code::et_layout_assumed, assumed,
               where +
                   ": tensors first seen as inputs with no strides or producing op, taken "
                   "as dense",
               rank);
  ctx.diagnose(diag::Code::et_extent_bounded, bounded,
               where + ": views whose strides are not known, bounded by the tensor they view",
               rank);
}

}  // namespace

JoinReport join_and_store(ImportContext& ctx, Trace& t, const HostOps& host) {
  check_pair(t, host);
  JoinReport rep;
  rep.et_path = t.path;
  rep.trace_path = host.path;
  rep.rank = host.rank;
  int64_t assumed = 0, bounded = 0;
  resolve_layouts(t, assumed, bounded);
  Joiner j{t, host, {}, {}, {}, {}, {}, 0};
  j.names.resize(t.nodes.size());
  j.joined.assign(t.nodes.size(), -1);
  j.how.assign(t.nodes.size(), EtJoin::None);
  j.host_used.assign(host.ops.size(), false);
  for (size_t n = 0; n < t.nodes.size(); ++n) {
    j.names[n] = ctx.writer.intern(t.nodes[n].name);
    if (!t.nodes[n].root) j.ops.push_back(n);
  }
  std::stable_sort(j.ops.begin(), j.ops.end(),
                   [&](size_t x, size_t y) { return t.nodes[x].id < t.nodes[y].id; });
  const bool has_rf =
      std::any_of(host.ops.begin(), host.ops.end(), [](const HostOp& o) { return o.rf_id >= 0; });
  if (has_rf)
    j.by_record_id();
  else
    j.by_order();
  j.leftovers();
  rep.how = has_rf ? EtJoin::RecordId : EtJoin::Order;
  const JoinSummary sum = summarize(t, host, j, rep);
  if (rep.joined < kMinJoined * static_cast<double>(rep.nodes))
    throw Error(ErrorCode::BadFormat,
                t.path + ": not an execution trace of " + host.path + "'s run: only " +
                    std::to_string(rep.joined) + " of " + std::to_string(rep.nodes) +
                    " ops match the trace's CPU ops (no op sequence matches; pair each ET with "
                    "the trace recorded with it)");
  rep.tensors = write_rows(ctx, t, host, j, sum);
  fill_sizes(ctx, t, host, j);
  diagnose(ctx, t, host, j, sum, rep, assumed, bounded);
  return rep;
}

}  // namespace braid::et
