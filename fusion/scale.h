// Exact scale-down of schedules for the data check (docs/replay.md, "Real sizes in bounded
// memory"). A schedule at a real model size holds hundreds of GiB of buffers once every element
// is an int64, so the reference interpreter cannot run it as is. But its data flow is made of
// slices: when every offset and count that touches a buffer is a multiple of d, the buffer is a
// sequence of d-element blocks that every op moves, sums or hashes as whole blocks (position j of
// a block only ever meets position j of another), so the schedule is d interleaved copies
// ("lanes") of the same schedule with every element count divided by d. The interpreter's values
// on the full schedule are a fixed function of its values on that scaled copy (the lane only
// relabels indices), so two schedules compute the same outputs at full size exactly when their
// scaled copies do.
//
// The divisor is per class of buffers that exchange elements position by position: buffers
// linked by a positional compute (the interpreter's element j reads element j mod count of each
// read) or by a collective (its members' in and out slices), on every rank and in every schedule
// compared. Row-wise compute (Compute::write_rows) hashes whole rows and links nothing; its
// per-row slices need d to divide their row length (rows kept) or to be a multiple of it that
// merges whole rows, where every row-wise op still maps a scaled write row to a whole number of
// scaled read rows (row counts then divided too). A one-element slice of a positional compute (a
// loss, a scalar read) links nothing either: element 0 is the same element at every scale.
// Opaque compute leaves data alone in the interpreter and constrains nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fusion/ir.h"

namespace braid::fusion {

struct ExactScale {
  // (rank, buffer) -> divisor d >= 1 of every offset, count and size of that buffer; absent: 1.
  std::map<std::pair<int32_t, std::string>, int64_t> divisor;
  int64_t of(int32_t rank, const std::string& buffer) const;
  int64_t largest() const;  // 1 when nothing scales
};

// The largest divisors that keep every schedule of `schedules` exact (the same classes and
// divisors for all of them, so their scaled copies compare buffer by buffer). Collectives are
// linked through match_schedule_collectives; a collective without a complete match links only
// its own slices.
ExactScale exact_scale(const std::vector<const Schedule*>& schedules);

// `s` with every buffer size, slice offset and count, collective count and manytomany chunk
// divided by its buffer's divisor, and the row counts of merged per-row slices by d / row
// length (durations and everything else unchanged). Throws
// braid::Error(Internal) when a number is not divisible (a scale not computed for `s`).
Schedule scale_down(const Schedule& s, const ExactScale& k);

// Elements of all buffers of `ranks` of `s` (all ranks when empty).
int64_t buffer_elements(const Schedule& s, const std::vector<int32_t>& ranks = {});

}  // namespace braid::fusion
