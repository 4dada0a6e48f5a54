// Helpers shared by the replay backends: element sizes, collective sizes, matching lookups.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fusion/ir.h"
#include "fusion/validate.h"
#include "trace/model.h"

namespace braid::replay {

// Bytes per element of a schedule dtype as the executors allocate it (fusion::dtype_bytes_of:
// a validated schedule names only dtypes braid knows).
int element_size(std::string_view dtype);

// The cost-model op of a collective (a recv is costed as its send).
CollOp cost_op(CollOp op);

// Sibling groups are the same collective of a parallel dimension on each of its communicators:
// the k-th collective of one kind on communicators of one size whose ids differ only in their
// numbers (the synthesizer's tp.pp0.dp0 ... tp.pp0.dp3, the calibration workload's c2.0 ...
// c2.3). This is their common key; point-to-point groups have none (empty).
std::string sibling_key(const fusion::MatchGroup& g);

// Validates `s` and returns its matching; throws braid::Error(BadFormat) naming the first
// problem (and how many more) when the schedule is not valid or not deadlock-free.
fusion::Matching checked_matching(const fusion::Schedule& s);

// A linear order of every op of the job consistent with the happens-before order (stream order,
// record -> wait, and collectives entered together by all members); executing each rank's ops
// in the order they appear here never deadlocks. Throws when the schedule deadlocks.
std::vector<fusion::OpRef> global_order(const fusion::Schedule& s, const fusion::Matching& m);

// Current time of CLOCK_MONOTONIC in ns (shared by all processes of one host).
Ns monotonic_ns();

}  // namespace braid::replay
