#include "analysis/matching.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <compare>
#include <set>
#include <tuple>
#include <unordered_map>

#include "trace/diagnostics.h"

namespace braid::analysis {

std::string_view to_string(MatchMethod m) {
  switch (m) {
    case MatchMethod::Seq: return "seq";
    case MatchMethod::Order: return "order";
    case MatchMethod::Aligned: return "aligned";
    case MatchMethod::PointToPoint: return "p2p";
    case MatchMethod::CallOrder:
      return "call_order";
  }
  return "order";
}

int MatchResult::group(CollRef r) const {
  auto it = group_of.find(r.rank);
  if (it == group_of.end() || r.index < 0 || r.index >= static_cast<int>(it->second.size()))
    return -1;
  return it->second[r.index];
}

namespace {

bool is_p2p(CollOp op) { return op == CollOp::Send || op == CollOp::Recv; }

// Parses a JSON array of integers ("[0, 1, 2]"); anything else gives an empty list.
std::vector<int32_t> parse_rank_list(const std::string& s) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < s.size() && s[i] != '[') ++i;
  if (i == s.size()) return {};
  ++i;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == ',' || s[i] == '\n')) ++i;
    if (i < s.size() && s[i] == ']') return out;
    size_t j = i;
    if (j < s.size() && s[j] == '-') ++j;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j == i) return {};
    out.push_back(static_cast<int32_t>(std::stol(s.substr(i, j - i))));
    i = j;
  }
  return {};
}

using Seqs = std::map<int32_t, std::vector<int32_t>>;  // rank -> indices into collectives

const Collective& coll(const RunData& run, int32_t rank, int32_t index) {
  return run.ranks.at(rank).collectives[index];
}

bool compatible(const Collective& a, const Collective& b) {
  if (a.op != b.op) return false;
  // An all-to-all's splits may differ per rank, so its sizes may too.
  return a.op == CollOp::AllToAll || a.bytes < 0 || b.bytes < 0 || a.bytes == b.bytes;
}

// Clock difference of `other` relative to `ref` (other = ref + delta) that the most pairs of
// compatible collectives agree on: the median of the densest 100 µs window of their end
// differences.
Ns estimate_delta(const RunData& run, int32_t ref, const std::vector<int32_t>& a, int32_t other,
                  const std::vector<int32_t>& b) {
  std::vector<Ns> diffs;
  const size_t cap = 4'000'000;
  for (int32_t i : a)
    for (int32_t j : b) {
      if (diffs.size() >= cap) break;
      const Collective &x = coll(run, ref, i), &y = coll(run, other, j);
      if (compatible(x, y)) diffs.push_back(y.end - x.end);
    }
  if (diffs.empty()) return 0;
  std::sort(diffs.begin(), diffs.end());
  const Ns window = 100'000;
  size_t best_lo = 0, best_n = 0;
  for (size_t lo = 0, hi = 0; lo < diffs.size(); ++lo) {
    while (hi < diffs.size() && diffs[hi] - diffs[lo] <= window) ++hi;
    if (hi - lo > best_n) best_n = hi - lo, best_lo = lo;
  }
  return diffs[best_lo + best_n / 2];
}

// Intervals overlap once `delta` is removed from b's clock (1 µs slack for clock error).
bool overlaps(const Collective& a, const Collective& b, Ns delta) {
  const Ns slack = 1000;
  return std::max(a.start, b.start - delta) <= std::min(a.end, b.end - delta) + slack;
}

// Pairs of positions (i in a, j in b), increasing in both, with the most compatible overlapping
// pairs; ties go to the smaller total |end difference - delta|.
std::vector<std::pair<int, int>> align(const RunData& run, int32_t ref,
                                       const std::vector<int32_t>& a, int32_t other,
                                       const std::vector<int32_t>& b, Ns delta) {
  const size_t n = a.size(), m = b.size();
  struct Cell {
    int matches = 0;
    double cost = 0;
    uint8_t from = 0;  // 0: skip a, 1: skip b, 2: pair
  };
  std::vector<Cell> dp((n + 1) * (m + 1));
  auto at = [&](size_t i, size_t j) -> Cell& { return dp[i * (m + 1) + j]; };
  auto better = [](int m1, double c1, int m2, double c2) {
    return m1 != m2 ? m1 > m2 : c1 < c2;
  };
  for (size_t i = 0; i <= n; ++i)
    for (size_t j = 0; j <= m; ++j) {
      if (i == 0 && j == 0) continue;
      Cell c;
      bool set = false;
      if (i > 0) c = at(i - 1, j), c.from = 0, set = true;
      if (j > 0 && (!set || better(at(i, j - 1).matches, at(i, j - 1).cost, c.matches, c.cost)))
        c = at(i, j - 1), c.from = 1, set = true;
      if (i > 0 && j > 0) {
        const Collective &x = coll(run, ref, a[i - 1]), &y = coll(run, other, b[j - 1]);
        if (compatible(x, y) && overlaps(x, y, delta)) {
          const Cell& p = at(i - 1, j - 1);
          int mm = p.matches + 1;
          double cc = p.cost + std::abs(static_cast<double>(y.end - x.end - delta));
          if (better(mm, cc, c.matches, c.cost)) c = {mm, cc, 2};
        }
      }
      at(i, j) = c;
    }
  std::vector<std::pair<int, int>> pairs;
  for (size_t i = n, j = m; i > 0 || j > 0;) {
    const Cell& c = at(i, j);
    if (c.from == 2) {
      pairs.emplace_back(static_cast<int>(i - 1), static_cast<int>(j - 1));
      --i, --j;
    } else if (c.from == 0) {
      --i;
    } else {
      --j;
    }
  }
  std::reverse(pairs.begin(), pairs.end());
  return pairs;
}

// True when plain order is consistent: same count and operations on every rank, and the k-th
// collectives overlap in time once each rank's typical clock difference is removed.
bool order_consistent(const RunData& run, const Seqs& seqs) {
  auto ref = seqs.begin();
  for (auto it = std::next(ref); it != seqs.end(); ++it) {
    if (it->second.size() != ref->second.size()) return false;
    std::vector<Ns> d;
    for (size_t k = 0; k < ref->second.size(); ++k) {
      const Collective &x = coll(run, ref->first, ref->second[k]),
                       &y = coll(run, it->first, it->second[k]);
      if (!compatible(x, y)) return false;
      d.push_back(y.end - x.end);
    }
    if (d.empty()) continue;
    std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
    Ns delta = d[d.size() / 2];
    for (size_t k = 0; k < ref->second.size(); ++k)
      if (!overlaps(coll(run, ref->first, ref->second[k]), coll(run, it->first, it->second[k]),
                    delta))
        return false;
  }
  return true;
}

// Every collective of the communicator ran on the host only (gloo, a legacy profiler trace): no
// GPU kernel, host times from each rank's own profiler origin.
bool host_only(const RunData& run, const Seqs& seqs) {
  for (const auto& [r, idx] : seqs)
    for (int32_t i : idx)
      if (coll(run, r, i).stream >= 0) return false;
  return true;
}

// Host collectives matched by call order within each step (the whole trace when a rank has no
// steps): the ranks of a process group call its collectives in the same order, so the i-th call of
// a step on one rank is the i-th call of that step on every other. The reference order of a step
// is the one most ranks show (ties: the longest, then the lowest rank's); a rank whose calls are
// the start or the end of it (a trace that stops or begins inside the step) is placed
// accordingly; a rank whose calls in the step are in another order or number (another program,
// another job) is left unmatched there. No times are compared.
struct CallOrder {
  std::vector<CollGroup> groups;  // in call order
  int64_t differ = 0;             // calls of steps whose order differs on their rank
  std::string example;            // the first such step
};

std::string op_list(const std::vector<CollOp>& ops) {
  std::string s;
  for (size_t i = 0; i < ops.size() && i < 6; ++i)
    s += (i ? ", " : "") + std::string(to_string(ops[i]));
  return s + (ops.size() > 6 ? ", ..." : "");
}

// Where `ops` starts within `ref`: 0 for the same calls or a start of them, the difference of
// lengths for an end of them; -1 when neither, or both and it is not the same (ambiguous).
int64_t place_in(const std::vector<CollOp>& ops, const std::vector<CollOp>& ref) {
  if (ops.size() > ref.size()) return -1;
  const bool prefix = std::equal(ops.begin(), ops.end(), ref.begin());
  const bool suffix = std::equal(ops.begin(), ops.end(), ref.end() - ops.size());
  if (ops.size() == ref.size()) return prefix ? 0 : -1;
  if (prefix == suffix) return -1;
  return prefix ? 0 : static_cast<int64_t>(ref.size() - ops.size());
}

void match_step_calls(const RunData& run, int64_t step,
                      const std::map<int32_t, std::vector<int32_t>>& calls, CallOrder& out,
                      std::vector<CollGroup>& slots) {
  std::map<int32_t, std::vector<CollOp>> ops;
  std::map<std::vector<CollOp>, int> votes;
  for (const auto& [r, idx] : calls) {
    for (int32_t i : idx) ops[r].push_back(coll(run, r, i).op);
    ++votes[ops[r]];
  }
  const std::vector<CollOp>* ref = nullptr;
  for (const auto& [r, o] : ops)  // ranks in increasing order: ties keep the lowest rank
    if (!ref || votes[o] > votes[*ref] || (votes[o] == votes[*ref] && o.size() > ref->size()))
      ref = &o;
  slots.assign(ref->size(), CollGroup{});
  for (const auto& [r, idx] : calls) {
    const int64_t at = place_in(ops[r], *ref);
    if (at < 0) {
      out.differ += static_cast<int64_t>(idx.size());
      if (out.example.empty())
        out.example = (step >= 0 ? "step " + std::to_string(step) : std::string("outside steps")) +
                      ": rank " + std::to_string(r) + " calls " + op_list(ops[r]) +
                      "; the others " + op_list(*ref);
      for (int32_t i : idx) {
        CollGroup g;
        g.seq = -1;
        g.members.push_back({r, i});
        out.groups.push_back(std::move(g));
      }
      continue;
    }
    for (size_t k = 0; k < idx.size(); ++k) slots[at + k].members.push_back({r, idx[k]});
  }
}

CallOrder match_by_call_order(const RunData& run, const std::string& comm, const Seqs& seqs,
                              int32_t expected) {
  bool by_step = true;
  for (const auto& [r, _] : seqs) by_step = by_step && !run.ranks.at(r).steps.empty();
  std::map<int64_t, std::map<int32_t, std::vector<int32_t>>> steps;  // step -> rank -> calls
  for (const auto& [r, idx] : seqs) {
    const RankTrace& t = run.ranks.at(r);
    for (int32_t i : idx) steps[by_step ? t.collective_step(t.collectives[i]) : -1][r].push_back(i);
  }
  CallOrder out;
  std::vector<CollGroup> slots;
  for (const auto& [step, calls] : steps) {
    match_step_calls(run, step, calls, out, slots);
    for (CollGroup& g : slots)
      if (!g.members.empty()) out.groups.push_back(std::move(g));
  }
  // In call order: by the first member's position on its rank (groups of one step are
  // consecutive in every rank's order).
  std::stable_sort(out.groups.begin(), out.groups.end(),
                   [](const CollGroup& a, const CollGroup& b) {
                     return std::pair(a.members[0].rank, a.members[0].index) <
                            std::pair(b.members[0].rank, b.members[0].index);
                   });
  int64_t seq = 0;
  for (CollGroup& g : out.groups) {
    g.comm = comm;
    g.method = MatchMethod::CallOrder;
    g.expected = expected;
    if (g.seq >= 0 || g.members.size() > 1) g.seq = seq++;
  }
  return out;
}

}  // namespace

std::vector<int32_t> comm_members(const RunData& run, const std::string& comm) {
  std::set<int32_t> present;
  for (const auto& [r, t] : run.ranks)
    for (const Collective& c : t.collectives)
      if (run.str(c.comm) == comm) {
        present.insert(r);
        break;
      }
  for (const Communicator& c : run.comms) {
    if (c.comm != comm) continue;
    std::vector<int32_t> listed = parse_rank_list(c.ranks);
    if (listed.empty()) break;
    std::set<int32_t> out;
    for (int32_t r : listed)
      if (run.ranks.count(r)) out.insert(r);
    // A rank list that leaves out a rank seen using the communicator is not trusted.
    bool covers = std::includes(out.begin(), out.end(), present.begin(), present.end());
    if (covers) return {out.begin(), out.end()};
    break;
  }
  return {present.begin(), present.end()};
}

namespace {

// A group's identity: its communicator, its sequence number there, how it was matched and the
// members the communicator has in the run.
void set_identity(CollGroup& g, const std::string& comm, int64_t seq, MatchMethod method,
                  int32_t expected) {
  g.comm = comm;
  g.seq = seq;
  g.method = method;
  g.expected = expected;
}

// collective_size with the collective's dtype normalized already (normalize_dtype).
CollSize size_with(const RunData& run, const Collective& c, int64_t n, const std::string& dtype);

// Builds a MatchResult: each way of matching adds its groups here.
struct Matcher {
  const RunData& run;
  MatchResult& res;
  std::map<std::string, int64_t> unmatched_by_comm, aligned_by_comm;
  // Asked for every group (and every member): comm_members reads the ranks' collectives, and a
  // dtype's text is normalized once, not for each of millions of collectives.
  std::unordered_map<std::string, int64_t> comm_size;
  std::unordered_map<StrId, std::string> dtypes;
  int64_t members_of(const std::string& comm) {
    auto [it, fresh] = comm_size.try_emplace(comm, 0);
    if (fresh) it->second = static_cast<int64_t>(comm_members(run, comm).size());
    return it->second;
  }
  int64_t bytes_of(const Collective& c, int64_t n) {
    auto [it, fresh] = dtypes.try_emplace(c.dtype);
    if (fresh) it->second = normalize_dtype(run.str(c.dtype));
    return size_with(run, c, n, it->second).bytes;
  }

  void add(CollGroup g);
  void by_seq(const std::string& comm, const Seqs& seqs, int32_t expected);
  void by_call_order(const std::string& comm, const Seqs& seqs, int32_t expected);
  void by_order(const std::string& comm, const Seqs& seqs, int32_t expected);
  void by_alignment(const std::string& comm, const Seqs& seqs, int32_t expected);
  void channel(const std::string& comm, int32_t src, int32_t dst, const std::vector<int32_t>& sends,
               const std::vector<int32_t>& recvs);
  void finish(int64_t p2p_no_peer);
};

// A group's op, size and whether its members agree; counted, indexed and stored.
void Matcher::add(CollGroup g) {
  std::sort(g.members.begin(), g.members.end(),
            [](const CollRef& a, const CollRef& b) { return a.rank < b.rank; });
  g.members.shrink_to_fit();  // a group of every matched collective: no growth's spare room
  const Collective& first = coll(run, g.members[0].rank, g.members[0].index);
  g.op = first.op;
  const int64_t n = first.group_size > 0 ? first.group_size : members_of(g.comm);
  auto size_of = [&](const Collective& c) { return bytes_of(c, n); };
  g.bytes = size_of(first);
  for (const CollRef& m : g.members) {
    const Collective& c = coll(run, m.rank, m.index);
    const int64_t c_bytes = size_of(c);
    bool send_recv = g.method == MatchMethod::PointToPoint;
    if (c.op != g.op && !send_recv) {
      g.mismatched = true;
      g.problem = "rank " + std::to_string(m.rank) + " runs " + std::string(to_string(c.op)) +
                  ", rank " + std::to_string(g.members[0].rank) + " " +
                  std::string(to_string(g.op));
    } else if (c_bytes >= 0 && g.bytes >= 0 && c_bytes != g.bytes &&
               g.op != CollOp::AllToAll) {  // all-to-all splits may differ per rank
      g.mismatched = true;
      g.problem = "rank " + std::to_string(m.rank) + " moves " + std::to_string(c_bytes) +
                  " bytes, rank " + std::to_string(g.members[0].rank) + " " +
                  std::to_string(g.bytes);
    }
    if (g.bytes < 0) g.bytes = c_bytes;
  }
  if (g.mismatched) {
    g.bytes = -1;
    ++res.mismatched;
    Diagnostic d;
    diag::set_code(d, diag::Code::analysis_mismatched_collective);
    d.detail = "communicator '" + g.comm + "' #" + std::to_string(g.seq) + ": " + g.problem;
    res.diagnostics.push_back(d);
  }
  if (!g.complete()) {
    unmatched_by_comm[g.comm] += static_cast<int64_t>(g.members.size());
    res.unmatched += static_cast<int64_t>(g.members.size());
  }
  int id = static_cast<int>(res.groups.size());
  for (const CollRef& m : g.members) res.group_of[m.rank][m.index] = id;
  res.groups.push_back(std::move(g));
}

void Matcher::by_seq(const std::string& comm, const Seqs& seqs, int32_t expected) {
  std::map<int64_t, CollGroup> groups;
  for (const auto& [r, idx] : seqs)
    for (int32_t i : idx) {
      int64_t s = coll(run, r, i).seq;
      CollGroup& g = groups[s];
      set_identity(g, comm, s, MatchMethod::Seq, expected);
      bool dup = std::any_of(g.members.begin(), g.members.end(),
                             [&](const CollRef& m) { return m.rank == r; });
      if (dup) {
        Diagnostic d;
        d.rank = r;
        diag::set_code(d, diag::Code::analysis_duplicate_seq);
        d.detail = "communicator '" + comm + "' sequence number " + std::to_string(s) +
                   " appears twice on the rank; the later one is left unmatched";
        res.diagnostics.push_back(d);
        ++res.unmatched;
        continue;
      }
      g.members.push_back({r, i});
    }
  for (auto& [_, g] : groups) add(std::move(g));
}

void Matcher::by_call_order(const std::string& comm, const Seqs& seqs, int32_t expected) {
  CallOrder co = match_by_call_order(run, comm, seqs, expected);
  for (CollGroup& g : co.groups) add(std::move(g));
  if (co.differ == 0) return;
  Diagnostic d;
  diag::set_code(d, diag::Code::analysis_call_order_differs);
  d.count = co.differ;
  d.detail = "communicator '" + comm +
             "': host collectives of steps whose calls differ on "
             "their rank from the other ranks' (another order or number), left unmatched; " +
             co.example;
  res.diagnostics.push_back(d);
}

void Matcher::by_order(const std::string& comm, const Seqs& seqs, int32_t expected) {
  size_t longest = 0;
  for (const auto& [_, idx] : seqs) longest = std::max(longest, idx.size());
  for (size_t k = 0; k < longest; ++k) {
    CollGroup g;
    set_identity(g, comm, static_cast<int64_t>(k), MatchMethod::Order, expected);
    for (const auto& [r, idx] : seqs)
      if (k < idx.size()) g.members.push_back({r, idx[k]});
    add(std::move(g));
  }
}

// Order disagrees between ranks: align every rank with the reference rank.
void Matcher::by_alignment(const std::string& comm, const Seqs& seqs, int32_t expected) {
  int32_t ref = seqs.begin()->first;
  for (const auto& [r, idx] : seqs)
    if (idx.size() > seqs.at(ref).size()) ref = r;
  const std::vector<int32_t>& a = seqs.at(ref);
  std::vector<CollGroup> groups(a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    groups[k].comm = comm;
    groups[k].seq = static_cast<int64_t>(k);
    groups[k].method = MatchMethod::Aligned;
    groups[k].expected = expected;
    groups[k].members.push_back({ref, a[k]});
  }
  std::vector<CollGroup> leftovers;
  for (const auto& [r, b] : seqs) {
    if (r == ref) continue;
    Ns delta = estimate_delta(run, ref, a, r, b);
    std::vector<bool> used(b.size(), false);
    if (a.size() * b.size() <= 25'000'000)
      for (auto [i, j] : align(run, ref, a, r, b, delta)) {
        groups[i].members.push_back({r, b[j]});
        used[j] = true;
      }
    for (size_t j = 0; j < b.size(); ++j)
      if (!used[j]) {
        CollGroup g;
        set_identity(g, comm, -1, MatchMethod::Aligned, expected);
        g.members.push_back({r, b[j]});
        leftovers.push_back(std::move(g));
      }
  }
  aligned_by_comm[comm] = static_cast<int64_t>(a.size());
  for (auto& g : groups) add(std::move(g));
  for (auto& g : leftovers) add(std::move(g));
}

void Matcher::channel(const std::string& comm, int32_t src, int32_t dst,
                      const std::vector<int32_t>& sends, const std::vector<int32_t>& recvs) {
  // Both ends must be in the run for the pair to be complete.
  const int32_t expected = (run.ranks.count(src) ? 1 : 0) + (run.ranks.count(dst) ? 1 : 0);
  // Sequence numbers counted per channel (braid's capture numbers a communicator's point-to-point
  // calls per peer and direction) pair the n-th send with the n-th receive even where the two
  // ranks' traces start at different points; numbers counted otherwise (per communicator, by
  // another tool) rarely agree between the ends, and then the order within the channel pairs.
  std::map<int64_t, CollGroup> by_seq;
  std::set<int64_t> send_seqs, recv_seqs;
  bool all_seq = true;
  for (int32_t i : sends) send_seqs.insert(coll(run, src, i).seq);
  for (int32_t i : recvs) recv_seqs.insert(coll(run, dst, i).seq);
  for (int64_t s : send_seqs) all_seq = all_seq && s >= 0;
  for (int64_t s : recv_seqs) all_seq = all_seq && s >= 0;
  size_t common = 0;
  for (int64_t s : send_seqs) common += recv_seqs.count(s);
  bool distinct = send_seqs.size() == sends.size() && recv_seqs.size() == recvs.size();
  if (all_seq && distinct && common > 0 && 2 * common >= std::min(sends.size(), recvs.size())) {
    for (int32_t i : sends) by_seq[coll(run, src, i).seq].members.push_back({src, i});
    for (int32_t i : recvs) by_seq[coll(run, dst, i).seq].members.push_back({dst, i});
    for (auto& [s, g] : by_seq) {
      set_identity(g, comm, s, MatchMethod::PointToPoint, expected);
      add(std::move(g));
    }
    return;
  }
  size_t n = std::max(sends.size(), recvs.size());
  for (size_t k = 0; k < n; ++k) {
    CollGroup g;
    set_identity(g, comm, static_cast<int64_t>(k), MatchMethod::PointToPoint, expected);
    if (k < sends.size()) g.members.push_back({src, sends[k]});
    if (k < recvs.size()) g.members.push_back({dst, recvs[k]});
    add(std::move(g));
  }
}

void Matcher::finish(int64_t p2p_no_peer) {
  for (auto& [comm, n] : unmatched_by_comm) {
    res.diagnostics.push_back(diag::make(
        diag::Code::analysis_unmatched_collective, n,
        "collectives on communicator '" + comm +
            "' without their partner on every member rank of the run (dropped or sampled "
            "trace, or a rank missing)"));
  }
  for (auto& [comm, n] : aligned_by_comm) {
    res.diagnostics.push_back(diag::make(
        diag::Code::analysis_order_aligned, n,
        "communicator '" + comm +
            "': ranks disagree on the order of its collectives and the trace has no sequence "
            "numbers; matched by aligning each rank's order with the rank that has the most "
            "(same operation, overlapping in time)"));
  }
  if (p2p_no_peer > 0) {
    res.diagnostics.push_back(
        diag::make(diag::Code::analysis_p2p_without_peer, p2p_no_peer,
                   "send/recv operations whose peer the trace does not give; not matched"));
    res.unmatched += p2p_no_peer;
  }
}

}  // namespace

MatchResult match_trace_collectives(const RunData& run) {
  MatchResult res;
  for (const auto& [r, t] : run.ranks) res.group_of[r].assign(t.collectives.size(), -1);

  // Collectives per communicator and rank, and point-to-point messages per channel.
  std::map<std::string, Seqs> by_comm;
  std::map<std::tuple<std::string, int32_t, int32_t>, std::pair<std::vector<int32_t>,
                                                                std::vector<int32_t>>>
      channels;  // (comm, src, dst) -> (sends on src, recvs on dst)
  int64_t p2p_no_peer = 0;
  for (const auto& [r, t] : run.ranks)
    for (int32_t i = 0; i < static_cast<int32_t>(t.collectives.size()); ++i) {
      const Collective& c = t.collectives[i];
      const std::string& comm = run.str(c.comm);
      if (is_p2p(c.op)) {
        if (c.peer_or_root < 0) {
          ++p2p_no_peer;
          continue;
        }
        if (c.op == CollOp::Send)
          channels[{comm, r, c.peer_or_root}].first.push_back(i);
        else
          channels[{comm, c.peer_or_root, r}].second.push_back(i);
        continue;
      }
      by_comm[comm][r].push_back(i);
    }

  Matcher m{run, res, {}, {}, {}, {}};
  for (auto& [comm, seqs] : by_comm) {
    const int32_t expected = static_cast<int32_t>(comm_members(run, comm).size());
    bool all_seq = true;
    for (const auto& [r, idx] : seqs)
      for (int32_t i : idx) all_seq = all_seq && coll(run, r, i).seq >= 0;
    if (all_seq)
      m.by_seq(comm, seqs, expected);
    else if (seqs.size() > 1 && host_only(run, seqs))
      m.by_call_order(comm, seqs, expected);
    else if (seqs.size() <= 1 || order_consistent(run, seqs))
      m.by_order(comm, seqs, expected);
    else
      m.by_alignment(comm, seqs, expected);
  }
  for (auto& [key, lists] : channels)
    m.channel(std::get<0>(key), std::get<1>(key), std::get<2>(key), lists.first, lists.second);
  m.finish(p2p_no_peer);
  return res;
}

CollSize collective_size(const RunData& run, const Collective& c, int64_t n) {
  return size_with(run, c, n, normalize_dtype(run.str(c.dtype)));
}

namespace {

CollSize size_with(const RunData& run, const Collective& c, int64_t n, const std::string& dtype) {
  CollSize s;
  const int size = dtype_size(dtype);
  n = std::max<int64_t>(n, 1);
  int64_t in = -1, out = -1;
  if (size > 0) {
    s.dtype = dtype;
    in = c.in_count;
    out = c.out_count;
    if (in < 0 && out < 0 && c.bytes >= 0) in = out = c.bytes / size;
  } else {
    // Bytes without a type (e.g. Chakra's comm_size): counted as uint8.
    s.dtype = "uint8";
    if (c.bytes >= 0) in = out = c.bytes;  // nccl-tests size: the larger buffer
    if (c.op == CollOp::AllGather && in >= 0) in = in / n;
    if (c.op == CollOp::ReduceScatter && out >= 0) out = out / n;
    if (c.bytes < 0 && (c.in_count >= 0 || c.out_count >= 0)) {
      s.why = "element counts without a known dtype ('" + run.str(c.dtype) + "')";
      return s;
    }
  }
  switch (c.op) {
    case CollOp::AllGather:
      s.count = in >= 0 ? in : (out >= 0 ? out / n : -1);
      break;
    case CollOp::ReduceScatter:
      s.count = out >= 0 ? out : (in >= 0 ? in / n : -1);
      break;
    case CollOp::AllToAll:
      s.count = in >= 0 ? in / n : (out >= 0 ? out / n : -1);
      break;
    default:
      s.count = in >= 0 ? in : out;
      break;
  }
  if (s.count < 0) {
    s.why =
        "no size in the trace (no message size in the kernel's args or record_param_comms, "
        "no Input Dims on its CPU ops)";
    return s;
  }
  if (size <= 0) {
    s.bytes = c.bytes;
  } else {
    // From the counts (an All-Gather's output or a Reduce-Scatter's input derived where the
    // trace gives only the other buffer), so every source yields the same nccl-tests size.
    switch (c.op) {
      case CollOp::AllGather:
        s.bytes = std::max(in, out >= 0 ? out : s.count * n) * size;
        break;
      case CollOp::ReduceScatter:
        s.bytes = std::max(out, in >= 0 ? in : s.count * n) * size;
        break;
      default:
        s.bytes = std::max(in, out) * size;
        break;
    }
  }
  return s;
}

}  // namespace

}  // namespace braid::analysis
