// Schedules and opportunities in a `.braid` file (tables `schedules` and `opportunities`,
// docs/schema.md): the one module that holds their DDL and writes and reads their rows (a family
// registered with trace/schema.h's owned_families). Writes are all-or-nothing (StoreUpdate);
// reads open the file read-only and take a missing table as empty.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fusion/ir.h"

namespace braid {
class TraceReader;
}

namespace braid::fusion {

struct StoredSchedule {
  int64_t id = -1;
  int64_t parent_id = -1;  // the schedule it was rewritten from, -1 for a root
  std::string name;
  std::string passes;      // JSON array of the passes applied to the parent, "[]" for a root
  std::string created_at;
};

// One finding of a pass on a schedule. `ranks` and `ops` (op ids of that schedule) say where;
// `detail` is a JSON object with the pass's own fields (applied or advice, assumption, ...).
struct StoredOpportunity {
  int64_t schedule_id = -1;
  std::string pass;
  std::vector<int32_t> ranks;
  std::vector<int64_t> ops;
  Ns predicted_saving_ns = 0;
  std::string detail = "{}";
};

// Creates both tables where missing, in the caller's transaction (the inserts below do).
void ensure_tables(sqlite3* db);

// Inside an open transaction (StoreUpdate::db()). Returns the new schedule id.
int64_t insert_schedule(sqlite3* db, const Schedule& s, int64_t parent_id = -1,
                        std::string_view passes_json = "[]");
void insert_opportunities(sqlite3* db, const std::vector<StoredOpportunity>& v);

// Stores `s` in `path` in one transaction; with `create`, a missing file is first created as
// an empty `.braid` store. Returns the schedule id. `cancel`, when set and true just before the
// commit (braid-view's background "Lift" and "Save"; the transaction may have waited for
// another writer's lock), rolls back and throws braid::Error "cancelled": the file is as it was.
int64_t store_schedule(const std::string& path, const Schedule& s, int64_t parent_id = -1,
                       std::string_view passes_json = "[]", bool create = false,
                       const std::atomic<bool>* cancel = nullptr);

struct PipelineResult;
// Stores what `braid fuse` stores, in one transaction: the fused schedule `res.schedule` (named
// after `input`, with `parent_id` = the schedule it was fused from and the passes run), the
// applied findings as opportunities of the parent (they name its ops, or those of an
// intermediate step), the advice (including deselected and skipped findings) as opportunities
// of the fused schedule, and the prediction as an opportunity of pass "pipeline" on the fused
// schedule (detail: simulated, baseline_step_ns, fused_step_ns, profile, local_saving_ns).
// Names `res.schedule` "<input's name> (fused)". Returns the fused schedule's id.
// `cancel` as store_schedule's.
int64_t store_fused(const std::string& path, int64_t parent_id, const Schedule& input,
                    PipelineResult& res, const std::string& profile,
                    const std::atomic<bool>* cancel = nullptr);

std::vector<StoredSchedule> list_schedules(const std::string& path);
// Whether the file open in `reader` holds at least one schedule (false for a file without the
// table).
bool has_schedules(const TraceReader& reader);
// Throws braid::Error(NotFound) naming the ids present when `id` is not stored. A schedule
// stored as rank classes (fusion/symmetry.h) comes back with every rank (expand(), which says
// when that is too large) unless `classes`: the representatives and the symmetry, for the
// commands that work on classes (braid fuse, the simulator).
Schedule load_stored_schedule(const std::string& path, int64_t id, bool classes = false);
// Opportunities of one schedule (all schedules when schedule_id < 0), largest saving first.
std::vector<StoredOpportunity> list_opportunities(const std::string& path,
                                                  int64_t schedule_id = -1);

// `braid fuse`'s prediction stored with a fused schedule (its "pipeline" opportunity): the
// simulated step saving, the two simulated steps and the profile; nullopt when the schedule has
// none (not fused by braid fuse).
struct StoredPrediction {
  Ns saving_ns = 0, baseline_step_ns = -1, fused_step_ns = -1;
  std::string profile;
};
std::optional<StoredPrediction> stored_prediction(const std::string& path, int64_t fused_id);

}  // namespace braid::fusion
