// Rank classes (fusion/symmetry.h): every preset at 64 ranks synthesized as classes expands to
// the schedule synthesized rank by rank, and `braid fuse`'s work on the classes (passes and
// simulator) gives the same fused schedule on every rank, the same simulated steps and the
// same findings as on every rank. A replica that differs in one op is never folded.
#include "fusion/symmetry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "fusion/pass_schedules.h"
#include "fusion/pipeline.h"
#include "fusion/synth.h"
#include "fusion/validate.h"
#include "replay/fuse.h"
#include "replay/host_calibration.h"
#include "replay/sim.h"
#include "trace/error.h"

namespace braid::fusion {
namespace {

// A preset at the fusion tests' small shape with dp raised so the world is `world` ranks.
Preset at_world(const std::string& name, int world) {
  Preset p = testing::preset_test_shape(name);
  p.layout.dp = world / (p.layout.tp * p.layout.pp);
  return p;
}

using Pos = std::tuple<int32_t, int32_t, int32_t>;

// Where every op id of `s` is.
std::map<int64_t, Pos> positions(const Schedule& s) {
  std::map<int64_t, Pos> at;
  for (const RankSchedule& r : s.ranks)
    for (size_t st = 0; st < r.streams.size(); ++st)
      for (size_t k = 0; k < r.streams[st].ops.size(); ++k)
        at[r.streams[st].ops[k].id] = {r.rank, static_cast<int32_t>(st), static_cast<int32_t>(k)};
  return at;
}

// `s` with op ids replaced by their places, and the ids in `replaces` by their places in
// `parent` (so two numberings of one schedule compare equal). A pass may name a new buffer
// after an op id ("sp-ep.8.wgrad"): the id in such a name is replaced by the op's stream and
// place in `parent` (each image names it after its own op, a class after its representative's).
std::string canonical(Schedule s, const Schedule& parent) {
  const std::map<int64_t, Pos> in_parent = positions(parent);
  auto rename = [&](std::string& name) {
    const size_t a = name.find('.');
    const size_t b = a == std::string::npos ? a : name.find('.', a + 1);
    if (b == std::string::npos || b == a + 1) return;
    const std::string digits = name.substr(a + 1, b - a - 1);
    if (digits.find_first_not_of("0123456789") != std::string::npos) return;
    auto it = in_parent.find(std::stoll(digits));
    if (it == in_parent.end()) return;
    name = name.substr(0, a + 1) + "s" + std::to_string(std::get<1>(it->second)) + "i" +
           std::to_string(std::get<2>(it->second)) + name.substr(b);
  };
  // Communicators by member set (the k-th of one set by list order): a rewrite's new
  // communicator is named per replica on every rank, once with images on classes.
  std::map<std::string, std::string> comm_name;
  std::map<std::vector<int32_t>, int> seen;
  for (Comm& c : s.comms) {
    std::vector<int32_t> set = c.ranks;
    std::sort(set.begin(), set.end());
    std::string t = "{";
    for (int32_t r : set) t += std::to_string(r) + ",";
    t += "}#" + std::to_string(seen[set]++);
    comm_name[c.id] = t;
    c.id = t;
  }
  std::sort(s.comms.begin(), s.comms.end(),
            [](const Comm& a, const Comm& b) { return a.id < b.id; });
  auto comm = [&](std::string& id) {
    if (auto it = comm_name.find(id); it != comm_name.end()) id = it->second;
  };
  for (RankSchedule& r : s.ranks) {
    for (Buffer& b : r.buffers) comm(b.replicated);
    for (Stream& st : r.streams)
      for (Op& op : st.ops) {
        if (Compute* c = op.compute()) comm(c->replicated);
        if (Collective* c = op.collective()) comm(c->comm);
      }
  }
  for (RankSchedule& r : s.ranks) {
    for (Buffer& b : r.buffers) rename(b.name);
    for (std::string& o : r.outputs) rename(o);
    for (Stream& st : r.streams)
      for (Op& op : st.ops) {
        if (Compute* c = op.compute()) {
          for (Slice& x : c->reads) rename(x.buffer);
          for (Slice& x : c->writes) rename(x.buffer);
          rename(c->label);
        }
        if (Collective* c = op.collective()) {
          rename(c->in.buffer);
          rename(c->out.buffer);
          rename(c->label);
        }
      }
  }
  std::string t;
  int64_t next = 0;
  for (RankSchedule& r : s.ranks)
    for (Stream& st : r.streams)
      for (Op& op : st.ops) {
        op.id = next++;
        for (int64_t& x : op.replaces) {
          auto it = in_parent.find(x);
          EXPECT_NE(it, in_parent.end()) << "replaced op " << x << " not in the parent";
          if (it == in_parent.end()) continue;
          const auto [a, b, c] = it->second;
          x = (int64_t{a} << 40) | (int64_t{b} << 20) | c;
        }
      }
  return to_json(s);
}

// The findings as values (pass, status, savings), ids left out.
std::set<std::tuple<std::string, std::string, Ns, int64_t>> finding_values(
    const PipelineResult& r) {
  std::set<std::tuple<std::string, std::string, Ns, int64_t>> v;
  auto add = [&](const std::vector<Finding>& fs, bool applied) {
    for (const Finding& f : fs)
      v.insert({f.pass, std::string(finding_status(f, applied)), f.saving_ns, f.saving_bytes});
  };
  add(r.applied, true);
  add(r.advice, false);
  add(r.rejected, false);
  return v;
}

TEST(RankClasses, EveryPresetAt64RanksExpandsAndFusesAsEveryRank) {
  const replay::SimProfile sp = replay::load_sim_profile("h100-nvlink");
  const analysis::CostModel cm(sp.profile);
  int folded = 0;
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    const Preset p = at_world(name, 64);
    const Schedule full = synthesize(p.model, p.layout, cm);
    const Schedule classes = synthesize_classes(p.model, p.layout, cm);
    ASSERT_EQ(full.ranks.size(), 64u);
    ASSERT_EQ(classes.ranks.size(), 64u);
    EXPECT_TRUE(validate(classes).empty()) << validate(classes).front();
    const Schedule expanded = expand(classes);
    EXPECT_FALSE(expanded.symmetry.on());
    EXPECT_EQ(canonical(expanded, expanded), canonical(full, full));
    if (!classes.symmetry.on()) continue;
    ++folded;
    EXPECT_LT(rank_classes(classes), 64);
    EXPECT_EQ(expanded_op_count(classes), full.op_count());
    // Folding the rank-by-rank schedule finds at least the synthesizer's classes.
    EXPECT_LE(rank_classes(fold(full)), rank_classes(classes));

    const analysis::CostModel& model = cm;
    EXPECT_EQ(replay::simulate(classes, model).step_ns(), replay::simulate(full, model).step_ns());
    const PipelineResult on_full = replay::fuse_simulated(full, sp);
    const PipelineResult on_classes = replay::fuse_simulated(classes, sp);
    EXPECT_EQ(on_classes.baseline_step_ns, on_full.baseline_step_ns);
    EXPECT_EQ(on_classes.fused_step_ns, on_full.fused_step_ns);
    EXPECT_TRUE(on_classes.schedule.symmetry.on());
    EXPECT_EQ(canonical(expand(on_classes.schedule), expanded), canonical(on_full.schedule, full));
    EXPECT_EQ(finding_values(on_classes), finding_values(on_full));
    EXPECT_GT(on_full.applied.size() + on_full.advice.size(), 0u);
  }
  // All but ZeRO's presets have DP replicas at 64 ranks.
  EXPECT_GE(folded, 4);
}

TEST(RankClasses, AReplicaThatDiffersInOneOpIsNotFolded) {
  const Preset p = at_world("tp-sp", 64);
  Schedule full = synthesize(p.model, p.layout);
  const Schedule folded = fold(full);
  ASSERT_TRUE(folded.symmetry.on());
  EXPECT_EQ(folded.symmetry.orbit(), p.layout.dp);
  // A straggler: one replica's rank 8 computes 1 ns longer once.
  for (Op& op : full.ranks[8].streams[0].ops)
    if (Compute* c = op.compute()) {
      c->duration_ns += 1;
      break;
    }
  const Schedule again = fold(full);
  EXPECT_FALSE(again.symmetry.on() && again.symmetry.orbit() == p.layout.dp &&
               !again.symmetry.stored(8))
      << "rank 8 would be folded into rank 0's class";
  EXPECT_EQ(canonical(expand(again), full), canonical(full, full));
  // A different bucket on one replica: its all-reduce counts differ.
  Schedule bucket = synthesize(p.model, p.layout);
  for (Stream& st : bucket.ranks[16].streams)
    for (Op& op : st.ops)
      if (Collective* c = op.collective(); c && c->comm.rfind("dp.", 0) == 0) c->label += "x";
  EXPECT_NE(fold(bucket).symmetry.orbit(), p.layout.dp);
}

TEST(RankClasses, JsonKeepsTheClassesAndRefusesBadOnes) {
  const Preset p = at_world("tp-sp", 32);  // tp 4, dp 8
  const Schedule classes = synthesize_classes(p.model, p.layout);
  ASSERT_TRUE(classes.symmetry.on());
  const std::string text = to_json(classes);
  EXPECT_NE(text.find("\"symmetry\": {\"world\": 32, \"block\": 32, \"shift\": 4"),
            std::string::npos)
      << text.substr(0, 600);
  const Schedule back = parse_schedule(text);
  EXPECT_EQ(back, classes);
  EXPECT_EQ(to_json(back), text);
  // A world the block does not divide.
  std::string bad = text;
  bad.replace(bad.find("\"world\": 32"), 11, "\"world\": 30");
  try {
    parse_schedule(bad, "x.json");
    FAIL() << "parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("$.symmetry"), std::string::npos) << e.what();
  }
  // An image rank with ops.
  Schedule s = classes;
  s.ranks[5] = s.ranks[1];
  s.ranks[5].rank = 5;
  const std::vector<std::string> problems = validate(s);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems.front().find("rank 5 is an image of rank 1"), std::string::npos)
      << problems.front();
}

TEST(RankClasses, ExpandSaysWhenEveryRankIsTooMany) {
  const Preset p = at_world("tp-sp", 32);
  const Schedule classes = synthesize_classes(p.model, p.layout);
  try {
    expand(classes, 10);
    FAIL() << "expanded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Usage);
    EXPECT_NE(std::string(e.what()).find("32 ranks in 4 rank classes"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace braid::fusion
