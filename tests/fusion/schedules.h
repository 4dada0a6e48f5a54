// Small hand-written schedules and builders shared by the fusion tests.
#pragma once

#include <string>
#include <vector>

#include "fusion/ir.h"

namespace braid::fusion::testing {

inline Slice sl(std::string buf, int64_t off, int64_t n) { return Slice{std::move(buf), off, n}; }

inline Collective coll(CollOp op, std::string comm, int64_t count, Slice in, Slice out,
                       std::string label = "", std::string dtype = "float32") {
  Collective c;
  c.op = op;
  c.comm = std::move(comm);
  c.dtype = std::move(dtype);
  c.count = count;
  c.in = std::move(in);
  c.out = std::move(out);
  c.label = std::move(label);
  return c;
}

inline Collective p2p(CollOp op, std::string comm, int32_t peer, int64_t count, Slice s,
                      std::string label = "", std::string dtype = "float32") {
  Collective c = op == CollOp::Send ? coll(op, comm, count, s, {}, label, dtype)
                                    : coll(op, comm, count, {}, s, label, dtype);
  c.peer = peer;
  return c;
}

inline Compute comp(std::string label, Ns ns, std::vector<Slice> reads,
                    std::vector<Slice> writes, bool opaque = false) {
  Compute c;
  c.label = std::move(label);
  c.duration_ns = ns;
  c.reads = std::move(reads);
  c.writes = std::move(writes);
  c.opaque = opaque;
  return c;
}

// 2 ranks, two streams each: forward compute, event to the comm stream, an in-place all-reduce
// of the gradient, a host delay, and rank 0 sending half its activations to rank 1.
inline Schedule two_rank_schedule() {
  Schedule s;
  s.name = "dp2 \"toy\"";
  s.provenance = {"synthesized by hand for tests", "durations are made up"};
  s.comms.push_back({"world", {0, 1}});
  for (int32_t r = 0; r < 2; ++r) {
    s.add_buffer(r, "act", "float32", 8);
    s.add_buffer(r, "grad", "float32", 8);
    int compute = s.add_stream(r, "compute");
    int comm = s.add_stream(r, "comm");
    s.append(r, compute, comp("fwd", 1500, {sl("act", 0, 8)}, {sl("grad", 0, 8)}));
    s.append(r, compute, Record{"grad_ready"});
    s.append(r, comm, Wait{"grad_ready"});
    s.append(r, comm, coll(CollOp::AllReduce, "world", 8, sl("grad", 0, 8), sl("grad", 0, 8),
                           "grad sync"));
    s.append(r, compute, Delay{250});
    if (r == 0)
      s.append(r, comm, p2p(CollOp::Send, "world", 1, 4, sl("act", 0, 4), "act\thalf"));
    else
      s.append(r, comm, p2p(CollOp::Recv, "world", 0, 4, sl("act", 4, 4), "act\thalf"));
  }
  return s;
}

// 4 ranks, a world and two tensor-parallel communicators, one op of every collective kind.
inline Schedule four_rank_schedule() {
  Schedule s;
  s.name = "mix4";
  s.provenance = {"every collective kind once"};
  s.comms.push_back({"world", {0, 1, 2, 3}});
  s.comms.push_back({"tp0", {0, 1}});
  s.comms.push_back({"tp1", {3, 2}});  // communicator order differs from rank order
  for (int32_t r = 0; r < 4; ++r) {
    s.add_buffer(r, "x", "bfloat16", 16);
    s.add_buffer(r, "y", "bfloat16", 16);
    s.add_buffer(r, "shard", "bfloat16", 4);
    int st = s.add_stream(r, "main");
    s.append(r, st, comp("layer0", 1000, {}, {}, /*opaque=*/true));
    s.append(r, st, coll(CollOp::ReduceScatter, "world", 4, sl("x", 0, 16), sl("shard", 0, 4),
                         "rs", "bfloat16"));
    s.append(r, st, coll(CollOp::AllGather, "world", 4, sl("shard", 0, 4), sl("y", 0, 16), "ag",
                         "bfloat16"));
    s.append(r, st, coll(CollOp::AllToAll, "world", 2, sl("y", 0, 8), sl("x", 8, 8), "a2a",
                         "bfloat16"));
    bool tp0 = r < 2;
    int32_t root = tp0 ? 1 : 2;
    Collective b = coll(CollOp::Broadcast, tp0 ? "tp0" : "tp1", 4,
                        r == root ? sl("x", 0, 4) : Slice{}, sl("y", 0, 4), "bcast", "bfloat16");
    b.root = root;
    s.append(r, st, b);
    Collective red = coll(CollOp::Reduce, tp0 ? "tp0" : "tp1", 2, sl("y", 0, 2),
                          r == root ? sl("y", 4, 2) : Slice{}, "red", "bfloat16");
    red.root = root;
    s.append(r, st, red);
    Collective m = coll(CollOp::ManyToMany, "world", 0, sl("x", 0, 4), sl("y", 8, 4), "m2m",
                        "bfloat16");
    // Each rank sends element 0 to its right neighbour and elements 1..2 to its left one.
    m.sends = {{(r + 1) % 4, 0, 1}, {(r + 3) % 4, 1, 2}};
    m.recvs = {{(r + 3) % 4, 0, 1}, {(r + 1) % 4, 1, 2}};
    s.append(r, st, m);
    s.append(r, st, Delay{100});
  }
  return s;
}

}  // namespace braid::fusion::testing
