// The Kineto importer's parts shared between its files (kineto.cc: the event parser;
// kineto_finish.cc: what happens at the end of a file). Internal to trace/import.
#pragma once

#include <simdjson.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "trace/diagnostics.h"
#include "trace/error.h"
#include "trace/import/et.h"
#include "trace/import/importer.h"
#include "trace/import/kineto_tokenizer.h"
#include "trace/time_range.h"

namespace braid::kineto {

namespace od = simdjson::ondemand;

struct CommOp {  // a CPU-side communication op (record_param_comms, nccl:*, c10d::*)
  int64_t tid = 0;
  Ns start = 0, end = 0;
  int64_t external_id = 0;
  bool is_record_param = false;
  bool op_is_annotation = false;  // nccl:* / gloo:* (lists the input tensor only)
  CollOp op = CollOp::Unknown;
  StrId name = 0;
  // Metadata (record_param_comms and new-style kernels).
  bool has_meta = false;
  std::string dtype, pg_name, pg_desc, pg_ranks;
  int64_t in_nelems = -1, out_nelems = -1, group_size = -1, seq = -1, root = -1;
  // The op's "Input Dims" (elements per tensor argument, -1 for a list or a scalar) and
  // "Input type" (normalized dtype per argument): where a trace without message-size metadata
  // still says how large the tensors were (nccl:* annotations, c10d::* operators).
  std::vector<int64_t> input_elems;
  std::vector<std::string> input_types;
  bool used = false;
};

struct PendingKernel {
  Collective coll;
  int64_t correlation = 0, external_id = 0;
  CollOp name_op = CollOp::Unknown;
  std::string name_dtype;
  CommOp meta;  // metadata carried by the kernel itself (has_meta)
};

// Records too large to move around cheaply (strings, vectors) live in a deque, which never moves
// them as it grows, and are sorted as pointers; ties keep the file's order. (A vector of them
// moved every record on each growth and again when sorted: 4% of a Kineto import, and twice the
// records' memory at the peak.)
template <typename T, typename Less>
std::vector<T*> sorted_pointers(std::deque<T>& records, Less less) {
  std::vector<T*> order;
  order.reserve(records.size());
  for (T& r : records) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(),
                   [&](const T* a, const T* b) { return less(*a, *b); });
  return order;
}

struct Launch {
  int64_t correlation;
  int64_t tid;
  Ns ts;
};

// One event's fields, and the args Braid reads.
struct EventFields {
  std::string_view ph, cat, name;
  int64_t pid = 0, tid = 0;
  int64_t ts = 0, dur = 0;
  bool has_ts = false;
  int64_t a_ext = 0, a_corr = 0, a_stream = -1, a_device = -1, a_bytes = -1;
  int64_t a_rf = -1, a_seq = -1;
  CommOp meta;
  std::string_view a_name, a_labels;
};

bool size_from_input_dims(const std::vector<CommOp*>& chain, CollOp op, int64_t& in, int64_t& out,
                          std::string& dtype);
bool is_comm_cpu_name(std::string_view n);

class KinetoFile final : public TokenSink {
 public:
  KinetoFile(ImportContext& ctx, const std::string& path, size_t index)
      : ctx_(ctx), w_(ctx.writer), run_(ctx.run), path_(path), index_(index) {
    rank_ = ctx.default_rank(index);
  }

  void run();

  // What the tokenizer hands over.
  void top_value(std::string_view key, std::string& text) override {
    try {
      handle_top_value(key, text);
    } catch (const simdjson::simdjson_error& e) {
      bad("unexpected content in \"" + std::string(key) + "\" (" + e.what() + ")");
    }
  }
  void event_batch(const char* p, size_t n) override;

 private:
  // Top level.
  void peek_time_base();
  void handle_top_value(std::string_view key, std::string& text);
  void handle_event(od::object obj);
  // One event's fields and args (false: malformed, counted).
  bool read_event(od::object obj, EventFields& e);
  void read_args(od::object args, EventFields& e);
  void on_kernel(EventFields& e, Ns start, Ns end);
  void on_copy(const EventFields& e, Ns start, Ns end);
  void on_host(EventFields& e, Ns start, Ns end);
  // The end of the file (kineto_finish.cc): rows fixed, NCCL kernels linked to their CPU-side
  // ops, the small tables and the diagnostics.
  void finish();
  void fix_rows(int32_t final_rank, Ns late_base);
  std::vector<Collective> link_nccl(int32_t final_rank, Ns late_base, int64_t& unlinked,
                                    int64_t& no_meta, int64_t& from_dims);
  int64_t cpu_only_collectives(int32_t final_rank, Ns late_base, std::vector<Collective>& colls,
                               int64_t& not_collective);
  void recategorize(int32_t final_rank, const std::vector<Collective>& colls);
  void small_tables(int32_t final_rank, Ns late_base);
  void put_diagnostics(int32_t final_rank, int64_t unlinked, int64_t no_meta, int64_t from_dims,
                       int64_t cpu_only, int64_t not_collective);

  [[noreturn]] void bad(const std::string& what) {
    throw Error(ErrorCode::BadFormat, path_ + ": " + what);
  }
  Ns t(int64_t ns_rel) const { return base_ns_ + ns_rel; }
  void note(diag::Code code, std::string detail) {
    diags_.push_back({code, std::move(detail)});  // written with the rank in finish()
  }
  void on_first_event() {
    if (events_started_) return;
    events_started_ = true;
    base_known_at_events_ = base_ns_;
    if (!dist_seen_) {
      // The rank is not known yet: write rows under a provisional rank; finish() renames them.
      provisional_ = true;
      rank_ = -1000000 - static_cast<int32_t>(index_);
    }
  }

  ImportContext& ctx_;
  TraceWriter& w_;
  int64_t run_;
  std::string path_;
  size_t index_;
  int32_t rank_;
  bool provisional_ = false;
  bool dist_seen_ = false;
  bool events_started_ = false;
  Ns base_ns_ = 0, base_known_at_events_ = 0;
  int64_t events_ = 0;
  int64_t stored_ = 0;

  RankInfo info_;
  int32_t dist_rank_ = -1;
  std::map<int64_t, std::string> device_names_;
  std::vector<Communicator> comms_;
  std::vector<std::pair<diag::Code, std::string>> diags_;  // noted before the rank is known
  std::vector<Step> steps_;
  std::map<std::pair<int64_t, bool>, std::string> streams_;          // (id, gpu) -> label
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names_;  // (pid, tid) -> name
  std::map<int64_t, bool> gpu_pids_;                                 // pid -> is a GPU process
  std::vector<Launch> launches_;
  std::vector<et::HostOp> host_ops_;  // kept only when execution traces are to be joined
  std::deque<CommOp> comm_ops_;
  std::deque<PendingKernel> nccl_;
  std::map<std::string, int64_t> skipped_;
  int64_t bad_events_ = 0, negative_ = 0, bad_time_ = 0;
  std::string bad_time_example_;
  Ns min_start_ = kMaxTimeNs, max_end_ = 0;  // of the stored events, before a late time base
  int64_t device_seen_ = -1;
  int64_t cpu_pid_ = -1;

  std::vector<int8_t> category_of_;  // by name id, -1: not classified yet
  od::parser parser_;
  std::string batch_;
};

}  // namespace braid::kineto
