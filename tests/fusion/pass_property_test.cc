// Property tests: on random valid schedules (fixed seeds), every legal finding of every pass,
// applied alone, and the whole pipeline give a valid schedule whose output buffers the
// reference interpreter finds identical to the baseline's on every rank.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "fusion/interpreter.h"
#include "fusion/pass.h"
#include "fusion/pipeline.h"
#include "fusion/validate.h"
#include "fusion/pass_schedules.h"

namespace braid::fusion {
namespace {

using testing::coll;
using testing::comp;
using testing::sl;

constexpr int64_t kSize = 16;  // elements per buffer
constexpr int kBuffers = 6;

class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}

  Schedule make() {
    Schedule s;
    s.name = "random";
    n_ = pick({2, 4});
    std::vector<int32_t> all;
    for (int r = 0; r < n_; ++r) all.push_back(r);
    s.comms.push_back({"w", all});
    if (n_ == 4) {
      s.comms.push_back({"a", {0, 1}});
      s.comms.push_back({"b", {3, 2}});
      s.comms.push_back({"c", {0, 2}});
      s.comms.push_back({"d", {1, 3}});
      s.comms.push_back({"p", {0, 3}});
      s.comms.push_back({"e", {2, 3}});
      s.comms.push_back({"q", {1, 2}});  // with "p": the EP groups of TP groups "a" and "b"
    }
    for (int32_t r = 0; r < n_; ++r) {
      for (int b = 0; b < kBuffers; ++b) s.add_buffer(r, buf(b), "float32", kSize);
      s.add_stream(r, "main");
      s.add_stream(r, "side");
      for (int b = 0; b < kBuffers; ++b)
        if (coin(0.4)) s.ranks[r].outputs.push_back(buf(b));
      if (s.ranks[r].outputs.empty() && coin(0.5)) s.ranks[r].outputs.push_back(buf(0));
    }
    int steps = pick({4, 6, 8, 10});
    for (int i = 0; i < steps; ++i) step(s, i);
    return s;
  }

 private:
  static std::string buf(int b) { return "b" + std::to_string(b); }
  int pick(std::vector<int> v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng_)]; }
  bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  Slice any_slice(int64_t count) {
    int64_t off = std::uniform_int_distribution<int64_t>(0, kSize - count)(rng_);
    return sl(buf(pick({0, 1, 2, 3, 4, 5})), off, count);
  }
  // Groups of ranks that run one collective each: the world, or two halves.
  std::vector<std::string> comm_of_rank() {
    std::vector<std::string> c(n_, "w");
    if (n_ == 4 && coin(0.5)) {
      bool ab = coin(0.5);
      for (int r = 0; r < 4; ++r) c[r] = ab ? (r < 2 ? "a" : "b") : (r % 2 ? "d" : "c");
    }
    return c;
  }

  // One collective per rank on `stream`, bracketed by events when on the side stream.
  void put(Schedule& s, int32_t r, bool side, const Collective& c, int step) {
    if (!side) {
      s.append(r, 0, c);
      return;
    }
    std::string e = "e" + std::to_string(step);
    s.append(r, 0, Record{e + ".go"});
    s.append(r, 1, Wait{e + ".go"});
    s.append(r, 1, c);
    s.append(r, 1, Record{e + ".done"});
    s.append(r, 0, Wait{e + ".done"});
  }

  void step(Schedule& s, int i) {
    int kind = pick({0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13});
    auto comms = comm_of_rank();
    const int gsize = comms[0] == "w" ? n_ : 2;
    const bool side = coin(0.25);
    const int64_t c = pick({2, 4, 8});  // per-rank count unit
    // Per-step random slices, the same shape on every rank.
    switch (kind) {
      case 0: {  // compute
        bool opaque = coin(0.1);
        int64_t w = pick({4, 8, 16});
        for (int32_t r = 0; r < n_; ++r) {
          std::vector<Slice> reads;
          int nr = pick({0, 1, 2});
          for (int k = 0; k < nr; ++k) reads.push_back(any_slice(pick({2, 4, 8, 16})));
          s.append(r, 0, comp("f" + std::to_string(i), 1000 + 100 * i, opaque ? std::vector<Slice>{} : reads,
                              opaque ? std::vector<Slice>{} : std::vector<Slice>{any_slice(w)}, opaque));
        }
        break;
      }
      case 1: {  // all-reduce (+ shard readers: the tp-sp pattern)
        int64_t count = c * gsize > kSize ? gsize : c * gsize / (coin(0.5) ? 1 : 1);
        Slice in = any_slice(count);
        Slice out = coin(0.5) ? in : any_slice(count);
        bool shard_read = coin(0.6);
        std::string dst = buf(pick({0, 1, 2, 3, 4, 5}));
        for (int32_t r = 0; r < n_; ++r) {
          put(s, r, side, coll(CollOp::AllReduce, comms[r], count, in, out, "ar"), i);
          if (shard_read) {
            const Comm* cm = s.find_comm(comms[r]);
            int64_t sh = count / gsize, idx = cm->index_of(r);
            s.append(r, 0, comp("shard" + std::to_string(i), 300, {out.sub(idx * sh, sh)}, {sl(dst, 0, sh)}));
          }
        }
        break;
      }
      case 2: {  // all-gather, maybe recomputed later
        int64_t count = std::min<int64_t>(c, kSize / gsize);
        Slice in = any_slice(count), out = any_slice(count * gsize);
        Slice out2 = any_slice(count * gsize);
        bool again = coin(0.5);
        for (int32_t r = 0; r < n_; ++r) {
          put(s, r, side, coll(CollOp::AllGather, comms[r], count, in, out, "ag"), i);
          if (again) {
            s.append(r, 0, comp("use" + std::to_string(i), 200, {out}, {sl("b5", 0, 4)}));
            s.append(r, 0, coll(CollOp::AllGather, comms[r], count, in, out2, "ag.again"));
            s.append(r, 0, comp("use2." + std::to_string(i), 200, {out2}, {sl("b4", 0, 4)}));
          }
        }
        break;
      }
      case 3: {  // reduce-scatter
        int64_t count = std::min<int64_t>(c, kSize / gsize);
        Slice in = any_slice(count * gsize), out = any_slice(count);
        for (int32_t r = 0; r < n_; ++r)
          put(s, r, side, coll(CollOp::ReduceScatter, comms[r], count, in, out, "rs"), i);
        break;
      }
      case 4: {  // all-to-all
        int64_t count = std::min<int64_t>(c, kSize / gsize);
        Slice in = any_slice(count * gsize), out = any_slice(count * gsize);
        for (int32_t r = 0; r < n_; ++r)
          put(s, r, side, coll(CollOp::AllToAll, comms[r], count, in, out, "a2a"), i);
        break;
      }
      case 5: {  // p2p: rank r sends to r ^ 1 ... then maybe an all-gather / all-to-all of it
        int64_t count = pick({4, 8});
        Slice from = any_slice(count), to = any_slice(count);
        for (int32_t r = 0; r < n_; ++r) {
          int32_t peer = r ^ 1;
          if (r % 2 == 0)
            s.append(r, 0, testing::p2p(CollOp::Send, "w", peer, count, from, "p2p"));
          else
            s.append(r, 0, testing::p2p(CollOp::Recv, "w", peer, count, to, "p2p"));
        }
        break;
      }
      case 6: {  // two adjacent all-reduces of contiguous slices (coalesce)
        int64_t count = gsize;
        Slice a = any_slice(2 * count);
        for (int32_t r = 0; r < n_; ++r) {
          s.append(r, 0, coll(CollOp::AllReduce, comms[r], count, a.sub(0, count), a.sub(0, count), "c0"));
          if (coin(0.3)) s.append(r, 0, comp("between", 100, {}, {sl("b5", 12, 4)}));
          s.append(r, 0, coll(CollOp::AllReduce, comms[r], count, a.sub(count, count), a.sub(count, count), "c1"));
        }
        break;
      }
      case 7: {  // GEMM -> all-reduce (coc)
        Slice y = any_slice(16);
        Slice x = any_slice(pick({4, 16}));
        if (x.buffer == y.buffer) x = sl(y.buffer == "b0" ? "b1" : "b0", 0, x.count);
        for (int32_t r = 0; r < n_; ++r) {
          s.append(r, 0, comp("gemm" + std::to_string(i), 2'000'000, {x}, {y}));
          s.append(r, 0, coll(CollOp::AllReduce, comms[r], 16, y, y, "gemm.ar"));
        }
        break;
      }
      case 8: {  // all-gather then send of the gathered data (pp-sp shape), n = 4 only
        if (n_ != 4) return;
        Slice in = sl("b0", 0, 4), out = sl("b1", 0, 8), to = sl("b2", 0, 8);
        for (int32_t r = 0; r < 4; ++r) {
          if (r < 2) {
            s.append(r, 0, coll(CollOp::AllGather, "a", 4, in, out, "sp.ag"));
            s.append(r, 0, testing::p2p(CollOp::Send, r == 0 ? "c" : "d", r + 2, 8, out, "pp"));
          } else {
            // ranks 2, 3 are on "b" / "c" / "d": receive on their channel
            s.append(r, 0, testing::p2p(CollOp::Recv, r == 2 ? "c" : "d", r - 2, 8, to, "pp"));
          }
        }
        break;
      }
      case 9: {  // receive then all-to-all (pp-ep shape), n = 4 only
        if (n_ != 4) return;
        Slice from = sl("b3", 0, 8), x = sl("b4", 0, 8), y = sl("b5", 0, 8);
        bool gate = coin(0.3);
        for (int32_t r = 0; r < 4; ++r) {
          const char* ch = r % 2 ? "d" : "c";
          if (r < 2) {
            s.append(r, 0, testing::p2p(CollOp::Send, ch, r + 2, 8, from, "pp"));
          } else {
            s.append(r, 0, testing::p2p(CollOp::Recv, ch, r - 2, 8, x, "pp"));
            if (gate) s.append(r, 0, comp("gate", 100, {x}, {sl("b0", 0, 8)}));
            s.append(r, 0, coll(CollOp::AllToAll, "b", 4, x, y, "dispatch"));
          }
        }
        break;
      }
      case 10: {  // GEMM -> reduce-scatter (coc)
        const int64_t count = pick({2, 4});
        Slice y = any_slice(count * gsize);
        Slice x = any_slice(pick({4, 16}));
        Slice out = sl(y.buffer == "b0" ? "b1" : "b0", 0, count);
        if (x.buffer == y.buffer) x = sl(y.buffer == "b2" ? "b3" : "b2", 0, x.count);
        for (int32_t r = 0; r < n_; ++r) {
          s.append(r, 0, comp("gemm" + std::to_string(i), 2'000'000, {x}, {y}));
          s.append(r, 0, coll(CollOp::ReduceScatter, comms[r], count, y, out, "gemm.rs"));
        }
        break;
      }
      case 11: {  // all-gather -> GEMM (coc)
        const int64_t count = pick({2, 4});
        Slice shard = sl("b4", 0, count), full = sl("b5", 0, count * gsize);
        // The GEMM's output at most the gathered size, so it can read it split in step.
        Slice w = sl(coin(0.5) ? "b0" : "b1", 0, coin(0.5) ? count * gsize : count * gsize / 2);
        for (int32_t r = 0; r < n_; ++r) {
          s.append(r, 0, coll(CollOp::AllGather, comms[r], count, shard, full, "ag.gemm"));
          s.append(r, 0, comp("gemm" + std::to_string(i), 2'000'000, {full, sl("b2", 0, 4)}, {w}));
        }
        break;
      }
      case 12: {  // all-reduce [-> replicated compute] -> send of the result (tp-pp), n = 4 only
        if (n_ != 4) return;
        const bool via = coin(0.5), replicated = coin(0.7);
        Slice partial = sl("b3", 0, 8), x = sl("b4", 0, 8), y = sl("b5", 0, 8);
        for (int32_t r = 0; r < 4; ++r) {
          const char* ch = r % 2 ? "d" : "c";
          if (r < 2) {
            s.append(r, 0, coll(CollOp::AllReduce, "a", 8, partial, x, "tp.ar"));
            if (via) {
              Compute c = comp("residual" + std::to_string(i), 200, {x}, {y});
              if (replicated) c.replicated = "a";
              s.append(r, 0, c);
            }
            s.append(r, 0, testing::p2p(CollOp::Send, ch, r + 2, 8, via ? y : x, "pp"));
          } else {
            s.append(r, 0, testing::p2p(CollOp::Recv, ch, r - 2, 8, x, "pp"));
            if (coin(0.5)) s.append(r, 0, comp("next" + std::to_string(i), 100, {x}, {sl("b1", 0, 8)}));
          }
        }
        break;
      }
      case 13:  // a replicated MoE block over TP x EP (tp-ep, or sp-ep with `sp`), n = 4 only
        if (n_ == 4) moe_block(s, i);
        break;
    }
  }

  // TP groups "a" = {0, 1}, "b" = {3, 2}; EP groups "p" = {0, 3} and "q" = {1, 2} (the TP
  // ranks of index 0 and 1). T = 4 tokens of h = 2, E = 2 experts, top-k 1 or 2, t = ep = 2.
  // Variations that make the rewrite illegal: per-rank expert compute, an extra reader of the
  // routing probabilities, a TP-rank-specific layer input (tp-ep).
  void moe_block(Schedule& s, int i) {
    const bool sp = coin(0.5), wgrad = coin(0.6), per_rank = coin(0.15), probe = coin(0.15);
    const bool replicated_x = coin(0.85);
    const int64_t T = 4, h = 2, E = 2, k = pick({1, 2}), R = T * k, M = T * h;
    const std::string p = "m" + std::to_string(i) + ".";
    for (int32_t r = 0; r < 4; ++r) {
      const std::string tp = r < 2 ? "a" : "b", ep = (r == 0 || r == 3) ? "p" : "q";
      const int idx = s.find_comm(tp)->index_of(r);
      auto buffer = [&](const std::string& nm, int64_t n, const std::string& repl = {}) {
        s.add_buffer(r, p + nm, "float32", n);
        s.ranks[r].buffers.back().replicated = repl;
        return sl(p + nm, 0, n);
      };
      auto op = [&](std::string label, std::vector<Slice> reads, std::vector<int64_t> rr,
                    std::vector<Slice> writes, std::vector<int64_t> wr, bool repl = true) {
        Compute c = comp(p + label, 500, std::move(reads), std::move(writes));
        c.read_rows = std::move(rr);
        c.write_rows = std::move(wr);
        if (repl) c.replicated = tp;
        return c;
      };
      Slice wr = buffer("w_router", h * E, tp), we = buffer("w_expert", 2 * h, tp);
      Slice in;
      Slice x = buffer("x", sp ? M / 2 : M, replicated_x ? tp : std::string());
      Slice hres = buffer("h", sp ? M / 2 : M);
      if (sp) {  // the sequence shard, all-gathered for the block
        Compute res = comp(p + "residual", 200, {x}, {hres});
        s.append(r, 0, res);
        Slice full = buffer("ln2_full", M);
        s.append(r, 0, coll(CollOp::AllGather, tp, M / 2, hres, full, "moe.ag"));
        in = full;
      } else {  // row-parallel output all-reduced, residual and norm replicated
        Slice partial = buffer("partial", M), attn = buffer("attn_out", M), ln2 = buffer("ln2", M);
        s.append(r, 0, comp(p + "out_proj", 1000, {x}, {partial}));
        s.append(r, 0, coll(CollOp::AllReduce, tp, M, partial, attn, "attn.ar"));
        Compute res = comp(p + "residual", 200, {x, attn}, {hres});
        res.replicated = tp;
        s.append(r, 0, res);
        Compute ln = comp(p + "ln", 200, {hres}, {ln2});
        ln.replicated = tp;
        s.append(r, 0, ln);
        in = ln2;
      }
      Slice probs = buffer("probs", T * E), disp_in = buffer("disp_in", R * h),
            disp_out = buffer("disp_out", R * h), act = buffer("act", R * h),
            comb = buffer("comb", R * h), out = buffer("out", M), y = buffer("y", sp ? M / 2 : M);
      s.append(r, 0, op("router", {in, wr}, {T, 0}, {probs}, {T}));
      Compute perm = op("permute", {in, probs}, {T, T}, {disp_in}, {R});
      perm.transpose = {2, 2};
      perm.transposed_reads = {0, 1};
      s.append(r, 0, perm);
      s.append(r, 0, coll(CollOp::AllToAll, ep, R * h / 2, disp_in, disp_out, "dispatch"));
      s.append(r, 0, op("experts", {disp_out, we}, {R, 0}, {act}, {R}, !per_rank));
      if (probe) s.append(r, 0, comp(p + "probe", 100, {probs}, {sl("b0", 0, T * E)}));
      s.append(r, 0, coll(CollOp::AllToAll, ep, R * h / 2, act, comb, "combine"));
      Compute un = op("unpermute", {comb, probs}, {R, T}, {out}, {T});
      un.transpose = {2, 2};
      un.transposed_reads = {0};
      s.append(r, 0, un);
      Compute res2 = comp(p + "residual2", 200, {hres, sp ? out.sub(idx * M / 2, M / 2) : out}, {y});
      if (!sp) res2.replicated = tp;
      s.append(r, 0, res2);
      s.ranks[r].outputs.push_back(y.buffer);
      if (wgrad) {
        Slice g = buffer("grad", 2 * h);
        Compute w = op("wgrad", {act, disp_out, g}, {R, R, 0}, {g}, {1});
        w.sum_rows = true;
        s.append(r, 0, w);
        s.ranks[r].outputs.push_back(g.buffer);
      }
    }
  }

  std::mt19937 rng_;
  int n_ = 2;
};

void expect_same(const Schedule& a, const Schedule& b, const std::string& what) {
  auto problems = validate(b);
  ASSERT_TRUE(problems.empty()) << what << ": " << problems.front() << "\n" << to_json(b);
  Interpretation ia = interpret(a), ib = interpret(b);
  ASSERT_FALSE(ib.deadlocked) << what << ": " << ib.deadlock_message();
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    std::vector<std::string> outs = a.ranks[r].outputs;
    if (outs.empty())
      for (const Buffer& buf : a.ranks[r].buffers) outs.push_back(buf.name);
    for (const std::string& o : outs)
      ASSERT_EQ(ia.buffers[r].at(o), ib.buffers[r].at(o))
          << what << ": rank " << r << " buffer " << o << "\nbaseline:\n" << to_json(a)
          << "\nfused:\n" << to_json(b);
  }
}

class PassProperty : public ::testing::TestWithParam<uint32_t> {};

TEST_P(PassProperty, EveryLegalRewriteAndThePipelineKeepOutputs) {
  Schedule s = Gen(GetParam()).make();
  auto problems = validate(s);
  ASSERT_TRUE(problems.empty()) << "generator bug: " << problems.front() << "\n" << to_json(s);
  ASSERT_FALSE(interpret(s).deadlocked);
  for (const analysis::CostModel& cm : {analysis::CostModel(), testing::slow_links()}) {
    for (const auto& p : all_passes())
      for (const Finding& f : p->find(s, cm)) {
        EXPECT_FALSE(f.pass.empty());
        if (!f.legal) {
          EXPECT_FALSE(f.assumption.empty()) << p->name();
          continue;
        }
        Schedule x = s;
        p->apply(x, f);
        expect_same(s, x, std::string(p->name()) + ": " + f.summary);
      }
    auto res = run_pipeline(s, cm);
    expect_same(s, res.schedule, "pipeline");
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, PassProperty, ::testing::Range<uint32_t>(1, 81));

}  // namespace
}  // namespace braid::fusion

namespace braid::fusion {
namespace {

// The generator exercises every rewrite that can be legal (otherwise the property above would
// hold vacuously for it).
TEST(PassPropertyCoverage, EveryApplicablePassFiresLegallyOnSomeSeed) {
  std::map<std::string, int> legal;
  for (uint32_t seed = 1; seed < 81; ++seed) {
    Schedule s = Gen(seed).make();
    for (const analysis::CostModel& cm : {analysis::CostModel(), testing::slow_links()})
      for (const auto& p : all_passes())
        for (const Finding& f : p->find(s, cm)) {
          legal[f.pass] += f.legal;
          // coc's three forms, told apart by their summaries.
          if (f.legal && f.summary.find("reduces to the shards' owners") != std::string::npos)
            ++legal["coc reduce-scatter"];
          if (f.legal && f.summary.find("broadcasts from the shards' owners") != std::string::npos)
            ++legal["coc all-gather"];
        }
  }
  for (const char* p :
       {"decompose", "reorder", "tp-sp", "tp-ep", "sp-ep", "pp-ep", "pp-sp", "tp-pp", "coalesce",
        "dedup", "coc", "coc reduce-scatter", "coc all-gather"})
    EXPECT_GT(legal[p], 0) << p;
}

}  // namespace
}  // namespace braid::fusion
