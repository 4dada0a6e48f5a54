#include "replay/common.h"

#include <time.h>

#include <deque>
#include <unordered_map>

#include "trace/error.h"

namespace braid::replay {

int element_size(std::string_view dtype) {
  return static_cast<int>(fusion::dtype_bytes_of(std::string(dtype)));
}

CollOp cost_op(CollOp op) { return op == CollOp::Recv ? CollOp::Send : op; }

std::string sibling_key(const fusion::MatchGroup& g) {
  if (g.op == CollOp::Send || g.op == CollOp::Recv) return {};
  std::string k;
  for (char c : g.comm)
    if (c < '0' || c > '9')
      k += c;
    else if (k.empty() || k.back() != '#')
      k += '#';
  return k + "|" + std::to_string(g.members.size()) + "|" + std::string(to_string(g.op)) + "|" +
         std::to_string(g.seq);
}

fusion::Matching checked_matching(const fusion::Schedule& s) {
  fusion::Matching matching;
  std::vector<std::string> problems = fusion::validate(s, {}, &matching);
  if (!problems.empty()) {
    std::string msg = "schedule '" + s.name + "' cannot be replayed: " + problems[0];
    if (problems.size() > 1) msg += " (and " + std::to_string(problems.size() - 1) + " more)";
    throw Error(ErrorCode::BadFormat, msg);
  }
  return matching;
}

std::vector<fusion::OpRef> global_order(const fusion::Schedule& s, const fusion::Matching& m) {
  // Each stream runs until it blocks on an event not yet recorded or on a collective whose other
  // members have not arrived; the op that unblocks it queues it again (first in, first out). A
  // collective completes on all its members at once when the last arrives.
  const size_t n = s.ranks.size();
  std::vector<std::vector<int32_t>> pc(n);
  std::vector<std::vector<int32_t>> event_of(n);  // [rank][flat op index]: event id, -1 none
  std::vector<std::vector<char>> recorded(n);
  std::vector<std::vector<std::vector<int32_t>>> waiters(n);  // [rank][event]: streams
  std::vector<std::vector<int32_t>> first_op(n);              // [rank][stream]: flat index
  for (size_t r = 0; r < n; ++r) {
    const auto& rs = s.ranks[r];
    std::unordered_map<std::string_view, int32_t> events;
    pc[r].assign(rs.streams.size(), 0);
    for (const auto& st : rs.streams) {
      first_op[r].push_back(static_cast<int32_t>(event_of[r].size()));
      for (const fusion::Op& op : st.ops) {
        const std::string* e = op.record() ? &op.record()->event
                               : op.wait() ? &op.wait()->event
                                           : nullptr;
        event_of[r].push_back(
            e ? events.emplace(*e, static_cast<int32_t>(events.size())).first->second : -1);
      }
    }
    recorded[r].assign(events.size(), 0);
    waiters[r].resize(events.size());
  }
  std::vector<int> arrived(m.groups.size(), 0);
  std::vector<fusion::OpRef> order;
  order.reserve(s.op_count());
  std::deque<std::pair<int32_t, int32_t>> work;
  for (int32_t r = 0; r < static_cast<int32_t>(n); ++r)
    for (int32_t st = 0; st < static_cast<int32_t>(s.ranks[r].streams.size()); ++st)
      work.push_back({r, st});
  auto done = [&](int32_t r, int32_t st) { order.push_back({r, st, pc[r][st]++}); };
  while (!work.empty()) {
    auto [r, st] = work.front();
    work.pop_front();
    const auto& ops = s.ranks[r].streams[st].ops;
    while (pc[r][st] < static_cast<int32_t>(ops.size())) {
      const int32_t i = pc[r][st];
      const fusion::Op& op = ops[i];
      const int32_t ev = event_of[r][first_op[r][st] + i];
      if (op.record()) {
        recorded[r][ev] = 1;
        done(r, st);
        for (int32_t w : waiters[r][ev]) work.push_back({r, w});
        waiters[r][ev].clear();
      } else if (op.wait()) {
        if (!recorded[r][ev]) {
          waiters[r][ev].push_back(st);
          break;
        }
        done(r, st);
      } else if (op.collective()) {
        const int g = m.group_of({r, st, i});
        const auto& members = m.groups[g].members;
        if (++arrived[g] < static_cast<int>(members.size())) break;
        for (const fusion::OpRef& mem : members) {
          done(mem.rank, mem.stream);
          if (mem.rank != r || mem.stream != st) work.push_back({mem.rank, mem.stream});
        }
      } else {
        done(r, st);
      }
    }
  }
  for (int32_t r = 0; r < static_cast<int32_t>(n); ++r)
    for (int32_t st = 0; st < static_cast<int32_t>(s.ranks[r].streams.size()); ++st)
      if (pc[r][st] < static_cast<int32_t>(s.ranks[r].streams[st].ops.size()))
        throw Error(ErrorCode::BadFormat, "schedule '" + s.name + "' deadlocks at " +
                                              fusion::describe(s, {r, st, pc[r][st]}));
  return order;
}

Ns monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<Ns>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace braid::replay
