#include "replay/sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>

#include "fusion/symmetry.h"
#include "replay/common.h"
#include "trace/error.h"

namespace braid::replay {

namespace {

constexpr int32_t kNoEvent = -1;

// Per-op facts the simulation looks up in its inner loop, precomputed once.
struct OpInfo {
  int32_t event = kNoEvent;  // record / wait: index of the event on its rank
  int32_t group = -1;        // collective: match group
  Ns duration = 0;           // compute / delay
};

class Simulation {
 public:
  Simulation(const fusion::Schedule& s, const fusion::Matching& m, const analysis::CostModel& model,
             const SimOptions& o)
      : s_(s), m_(m) {
    const size_t n = s.ranks.size();
    info_.resize(n);
    clock_.resize(n);
    pc_.resize(n);
    event_time_.resize(n);
    waiters_.resize(n);
    arrival_.resize(n);
    result_.step.ranks.resize(n);
    for (size_t r = 0; r < n; ++r) {
      const auto& rs = s.ranks[r];
      std::unordered_map<std::string_view, int32_t> events;
      auto event_index = [&](const std::string& e) {
        auto [it, fresh] = events.emplace(e, static_cast<int32_t>(events.size()));
        return it->second;
      };
      info_[r].resize(rs.streams.size());
      arrival_[r].resize(rs.streams.size());
      size_t ops = 0;
      for (size_t st = 0; st < rs.streams.size(); ++st) {
        const auto& sops = rs.streams[st].ops;
        ops += sops.size();
        info_[r][st].resize(sops.size());
        for (size_t i = 0; i < sops.size(); ++i) {
          OpInfo& oi = info_[r][st][i];
          const fusion::Op& op = sops[i];
          if (const auto* c = op.compute()) {
            const Ns d = static_cast<Ns>(static_cast<double>(c->duration_ns) * o.compute_scale);
            oi.duration = o.compute_scale > 0 ? o.compute_cost(d) : d;
          } else if (const auto* d = op.delay())
            oi.duration = static_cast<Ns>(static_cast<double>(d->duration_ns) * o.compute_scale);
          else if (const auto* e = op.record())
            oi.event = event_index(e->event);
          else if (const auto* w = op.wait())
            oi.event = event_index(w->event);
          else if (op.collective())
            oi.group = m.group_of(
                {static_cast<int32_t>(r), static_cast<int32_t>(st), static_cast<int32_t>(i)});
        }
      }
      clock_[r].assign(rs.streams.size(), o.step_start_ns);
      pc_[r].assign(rs.streams.size(), 0);
      event_time_[r].assign(events.size(), -1);
      waiters_[r].resize(events.size());
      result_.step.ranks[r].reserve(ops);
    }
    // Group costs: every member runs the collective for the slowest member's part.
    start_skew_ = o.start_skew_ns;
    had_collective_.assign(n, 0);
    group_cost_.resize(m.groups.size());
    group_arrived_.assign(m.groups.size(), 0);
    group_start_.assign(m.groups.size(), 0);
    for (size_t g = 0; g < m.groups.size(); ++g) {
      const fusion::MatchGroup& grp = m.groups[g];
      const fusion::Comm* comm = s.find_comm(grp.comm);
      const fusion::Collective& c0 = *s.op(grp.members[0]).collective();
      const int esize = element_size(c0.dtype);
      int64_t bytes = 0;
      int nranks;
      std::vector<int32_t> members;
      if (grp.op == CollOp::Send || grp.op == CollOp::Recv) {
        nranks = 2;
        members = {grp.members[0].rank, grp.members[1].rank};
        bytes = c0.count * static_cast<int64_t>(esize);
      } else {
        nranks = static_cast<int>(comm->ranks.size());
        members = comm->ranks;
        for (const fusion::OpRef& mem : grp.members)
          bytes = std::max(bytes, fusion::collective_bytes(s, *s.op(mem).collective()));
      }
      const CollOp op = cost_op(grp.op);
      // The calibrated link: the communicator size's own, else the kind's.
      std::optional<SizedLink> link;
      if (auto k = o.sized_links.find(op); k != o.sized_links.end() && !k->second.empty()) {
        auto it = k->second.lower_bound(nranks);
        link = it != k->second.end() ? it->second : k->second.rbegin()->second;
      } else if (auto it = o.op_links.find(op); it != o.op_links.end()) {
        auto e = o.reduce_ns_per_element.find(op);
        link = SizedLink{it->second, e != o.reduce_ns_per_element.end() ? e->second : 0, {}};
      }
      if (link) {
        const analysis::Algorithm algo = model.choose(op, bytes, nranks, grp.comm, members);
        const double wire = analysis::wire_factor(op, nranks, algo) * static_cast<double>(bytes);
        group_cost_[g] = static_cast<Ns>(std::llround(
            std::max(0.0, link->link.time_ns(analysis::latency_steps(op, nranks, algo), wire) +
                              link->ns_per_element * wire / esize + link->correction_ns(bytes))));
      } else {
        group_cost_[g] = model.collective_ns(op, bytes, nranks, grp.comm, members);
      }
    }
    // Siblings that cost the same end staggered around their cost (SimOptions::sibling_stagger).
    if (o.sibling_stagger > 0 && o.host_cores <= 0) {
      std::map<std::string, std::vector<int>> families;
      for (size_t g = 0; g < m.groups.size(); ++g)
        if (std::string k = sibling_key(m.groups[g]); !k.empty())
          families[k + "|" + std::to_string(group_cost_[g])].push_back(static_cast<int>(g));
      for (auto& [key, v] : families) {
        if (v.size() < 2) continue;
        std::sort(v.begin(), v.end(),
                  [&](int a, int b) { return m.groups[a].comm < m.groups[b].comm; });
        const double last = static_cast<double>(v.size() - 1);
        for (size_t k = 0; k < v.size(); ++k) {
          const double f = 1.0 + o.sibling_stagger * (2.0 * static_cast<double>(k) / last - 1.0);
          group_cost_[v[k]] = static_cast<Ns>(
              std::llround(std::max(0.0, f) * static_cast<double>(group_cost_[v[k]])));
        }
      }
    }
    // Processor sharing: the cores each group's member streams run on.
    cores_ = std::max(o.host_cores, 0);
    if (cores_ > 0) {
      load_.assign(static_cast<size_t>(cores_), 0);
      group_cores_.resize(m.groups.size());
      wait_base_.resize(m.groups.size());
      for (size_t g = 0; g < m.groups.size(); ++g) {
        wait_base_[g] = static_cast<int>(wait_core_.size());
        for (const fusion::OpRef& mem : m.groups[g].members) {
          group_cores_[g].push_back(s.ranks[static_cast<size_t>(mem.rank)].rank % cores_);
          wait_core_.push_back(group_cores_[g].back());
        }
      }
      wait_state_.assign(wait_core_.size(), kNotYet);
      wait_spin_ = std::max<Ns>(o.wait_spin_ns, 0);
    }
  }

  SimResult run() {
    for (int32_t r = 0; r < static_cast<int32_t>(s_.ranks.size()); ++r)
      for (int32_t st = 0; st < static_cast<int32_t>(s_.ranks[r].streams.size()); ++st)
        work_.push_back({r, st});
    do {
      while (!work_.empty()) {
        auto [r, st] = work_.front();
        work_.pop_front();
        advance(r, st);
      }
    } while (cores_ > 0 && complete_next_shared());
    for (int32_t r = 0; r < static_cast<int32_t>(s_.ranks.size()); ++r)
      for (int32_t st = 0; st < static_cast<int32_t>(s_.ranks[r].streams.size()); ++st)
        if (pc_[r][st] < static_cast<int32_t>(s_.ranks[r].streams[st].ops.size()))
          throw Error(ErrorCode::BadFormat, "schedule '" + s_.name +
                                                "' deadlocks in simulation at " +
                                                fusion::describe(s_, {r, st, pc_[r][st]}));
    return std::move(result_);
  }

 private:
  void finish(int32_t r, int32_t st, Ns start, Ns end) {
    const int32_t i = pc_[r][st];
    result_.step.ranks[r].push_back({s_.ranks[r].streams[st].ops[i].id, st, start, end});
    result_.order.push_back({r, st, i});
    clock_[r][st] = end;
    ++pc_[r][st];
  }

  void advance(int32_t r, int32_t st) {
    const auto& ops = s_.ranks[r].streams[st].ops;
    while (pc_[r][st] < static_cast<int32_t>(ops.size())) {
      const int32_t i = pc_[r][st];
      const OpInfo& oi = info_[r][st][i];
      const Ns t = clock_[r][st];
      switch (ops[i].kind()) {
        case fusion::OpKind::Compute:
        case fusion::OpKind::Delay:
          finish(r, st, t, t + oi.duration);
          break;
        case fusion::OpKind::Record: {
          event_time_[r][oi.event] = t;
          finish(r, st, t, t);
          for (int32_t w : waiters_[r][oi.event]) work_.push_back({r, w});
          waiters_[r][oi.event].clear();
          break;
        }
        case fusion::OpKind::Wait: {
          const Ns e = event_time_[r][oi.event];
          if (e < 0) {
            waiters_[r][oi.event].push_back(st);
            return;
          }
          finish(r, st, t, std::max(t, e));
          break;
        }
        case fusion::OpKind::Collective: {
          const int g = oi.group;
          arrival_[r][st] = t;
          group_start_[g] = std::max(group_start_[g], t);
          const auto& members = m_.groups[g].members;
          if (++group_arrived_[g] < static_cast<int>(members.size())) {
            if (cores_ > 0 && wait_spin_ > 0) begin_wait(g, r, st, t);
            return;
          }
          Ns skew = 0;
          for (const fusion::OpRef& mem : members)
            if (!had_collective_[mem.rank]) skew = start_skew_;
          for (const fusion::OpRef& mem : members) had_collective_[mem.rank] = 1;
          if (cores_ > 0) {  // its end depends on what else runs: complete_next_shared
            pending_.push({static_cast<double>(group_start_[g] + skew), g});
            return;
          }
          const Ns end = group_start_[g] + skew + group_cost_[g];
          for (const fusion::OpRef& mem : members) {
            finish(mem.rank, mem.stream, arrival_[mem.rank][mem.stream], end);
            if (mem.rank != r || mem.stream != st) work_.push_back({mem.rank, mem.stream});
          }
          break;
        }
      }
    }
  }

  // Processor sharing. Called when every stream is blocked: each is waiting for an event or a
  // collective, so the collectives that have all their members (pending_, by start time) are
  // the only way on, and any collective that becomes complete later starts no earlier than the
  // first of these to end. Runs the cores' fluid model from the shared clock to that end,
  // completes that collective, and returns false when there is none.
  bool complete_next_shared() {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    for (;;) {
      // A group's rate: 1 / the load of its most loaded core.
      size_t first = 0;
      double first_end = kInf;
      for (size_t a = 0; a < active_.size(); ++a) {
        int l = 1;
        for (int c : group_cores_[active_[a].group]) l = std::max(l, load_[c]);
        active_[a].rate = 1.0 / l;
        const double end = now_ + active_[a].left / active_[a].rate;
        if (end < first_end) first_end = end, first = a;
      }
      const double next_start = pending_.empty() ? kInf : pending_.top().start;
      const double next_wait = waits_.empty() ? kInf : waits_.top().t;
      const double until = std::min({first_end, next_start, next_wait});
      if (until == kInf) return false;
      if (until > now_) {
        for (Active& a : active_) a.left -= (until - now_) * a.rate;
        now_ = until;
      }
      if (next_wait <= until) {
        apply_waits();
        continue;
      }
      if (next_start <= until) {
        join_started();
        continue;
      }
      const int g = active_[first].group;
      active_[first] = active_.back();
      active_.pop_back();
      for (int c : group_cores_[g]) --load_[c];
      const Ns end = static_cast<Ns>(std::llround(now_));
      for (const fusion::OpRef& mem : m_.groups[g].members) {
        finish(mem.rank, mem.stream, arrival_[mem.rank][mem.stream], end);
        work_.push_back({mem.rank, mem.stream});
      }
      return true;
    }
  }
  // Moves the pending groups that have started by now_ to the running ones; their members
  // that were spinning while they waited now run them.
  void join_started() {
    while (!pending_.empty() && pending_.top().start <= now_) {
      const int g = pending_.top().group;
      pending_.pop();
      active_.push_back({g, static_cast<double>(group_cost_[g]), 1.0});
      for (int c : group_cores_[g]) ++load_[c];
      const auto& members = m_.groups[g].members;
      for (size_t k = 0; k < members.size(); ++k) {
        char& w = wait_state_[wait_base_[g] + k];
        if (w == kSpinning) --load_[group_cores_[g][k]];
        w = kOver;
      }
    }
  }
  // A member that arrives before its peers spins on its core for up to wait_spin_ (the
  // backend's yield window), then naps: load from t to t + wait_spin_ unless the group
  // starts first. t is never before now_: every stream was blocked at now_ or later.
  void begin_wait(int g, int32_t r, int32_t st, Ns t) {
    const auto& members = m_.groups[g].members;
    for (size_t k = 0; k < members.size(); ++k)
      if (members[k].rank == r && members[k].stream == st) {
        const int id = wait_base_[g] + static_cast<int>(k);
        waits_.push({static_cast<double>(t), id, true});
        waits_.push({static_cast<double>(t + wait_spin_), id, false});
        return;
      }
  }
  // Applies the spin windows that begin or end by now_.
  void apply_waits() {
    while (!waits_.empty() && waits_.top().t <= now_) {
      const WaitEvent e = waits_.top();
      waits_.pop();
      char& w = wait_state_[e.id];
      const int core = wait_core_[e.id];
      if (e.begin && w == kNotYet) {
        w = kSpinning;
        ++load_[core];
      } else if (!e.begin && w == kSpinning) {
        w = kOver;
        --load_[core];
      }
    }
  }

  const fusion::Schedule& s_;
  const fusion::Matching& m_;
  std::vector<std::vector<std::vector<OpInfo>>> info_;
  std::vector<std::vector<Ns>> clock_;
  std::vector<std::vector<int32_t>> pc_;
  std::vector<std::vector<Ns>> event_time_;
  std::vector<std::vector<std::vector<int32_t>>> waiters_;
  std::vector<std::vector<Ns>> arrival_;
  std::vector<Ns> group_cost_, group_start_;
  std::vector<int> group_arrived_;
  Ns start_skew_ = 0;
  std::vector<char> had_collective_;  // per rank: a collective of it has completed
  std::deque<std::pair<int32_t, int32_t>> work_;
  SimResult result_;
  // Processor sharing (SimOptions::host_cores).
  struct Pending {
    double start;
    int group;
    bool operator>(const Pending& o) const {
      return start != o.start ? start > o.start : group > o.group;
    }
  };
  struct Active {
    int group;
    double left;  // α-β time still to run at full rate
    double rate;
  };
  struct WaitEvent {
    double t;
    int id;
    bool begin;
    bool operator>(const WaitEvent& o) const { return t > o.t; }
  };
  static constexpr char kNotYet = 0, kSpinning = 1, kOver = 2;
  int cores_ = 0;
  Ns wait_spin_ = 0;
  std::vector<std::vector<int>> group_cores_;  // per group: its members' cores
  std::vector<int> wait_base_;                 // per group: its members' first wait id
  std::vector<int> wait_core_;                 // per wait id (group member): its core
  std::vector<char> wait_state_;               // per wait id: kNotYet, kSpinning, kOver
  std::priority_queue<WaitEvent, std::vector<WaitEvent>, std::greater<>> waits_;
  std::vector<int> load_;  // per core: member streams of running groups
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> pending_;
  std::vector<Active> active_;
  double now_ = 0;
};

class SimPrepared : public PreparedReplay {
 public:
  SimPrepared(const fusion::Schedule& s, const analysis::CostModel& model, SimOptions so,
              const ReplayOptions& o)
      : s_(s), data_(o.data) {
    fusion::Matching m = checked_matching(s);
    so.compute_scale = o.compute_scale;
    step_ = simulate(s, m, model, so).step;
    if (data_ == DataMode::Check) buffers_ = fusion::interpret(s).buffers;
  }
  StepRecord run_step(bool measure) override {
    if (measure) measured_.push_back(step_);
    return step_;
  }
  ReplayResult collect() override {
    ReplayResult r;
    r.backend = "sim";
    r.kind = RunKind::Simulated;
    r.steps = measured_;
    for (const auto& rs : s_.ranks) {
      RankInfo info;
      info.rank = rs.rank;
      info.world_size = static_cast<int32_t>(s_.ranks.size());
      info.backend = "sim";
      r.ranks.push_back(info);
    }
    r.notes.push_back("simulated with the α-β cost model; data from the reference interpreter");
    return r;
  }
  std::vector<fusion::RankBuffers> buffers() const override { return buffers_; }
  std::vector<fusion::RankBuffers> take_buffers() override { return std::move(buffers_); }

 private:
  fusion::Schedule s_;
  DataMode data_;
  StepRecord step_;
  std::vector<StepRecord> measured_;
  std::vector<fusion::RankBuffers> buffers_;
};

}  // namespace

SimResult simulate(const fusion::Schedule& s, const fusion::Matching& m,
                   const analysis::CostModel& model, const SimOptions& o) {
  // Rank classes are simulated through their representatives (every image runs the same ops
  // at the same times) unless a calibrated host makes ranks differ: siblings staggered by
  // communicator, collectives sharing the cores their members are pinned to by rank.
  if (s.symmetry.on() && (o.sibling_stagger > 0 || o.host_cores > 0)) {
    const fusion::Schedule full = fusion::expand(s);
    return Simulation(full, checked_matching(full), model, o).run();
  }
  return Simulation(s, m, model, o).run();
}

SimResult simulate(const fusion::Schedule& s, const analysis::CostModel& model,
                   const SimOptions& o) {
  fusion::Matching m = checked_matching(s);
  return simulate(s, m, model, o);
}

std::unique_ptr<PreparedReplay> SimExecutor::prepare(const fusion::Schedule& s,
                                                     const ReplayOptions& o) {
  return std::make_unique<SimPrepared>(s, model_, opt_, o);
}

}  // namespace braid::replay
