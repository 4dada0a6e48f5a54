// The Kineto importer at the end of a file (trace/import/kineto_file.h): the rows written
// before the rank or the time base were known fixed, NCCL kernels linked to their CPU-side
// communication ops (by the launch call's correlation and time, else External id) and sized from
// their metadata or the Input Dims around them, collectives seen only on the CPU side, the small
// tables and the diagnostics.
#include "trace/categories.h"
#include "trace/import/kineto_file.h"
#include "trace/rows.h"

namespace braid::kineto {

void KinetoFile::finish() {
  if (events_ == 0 && stored_ == 0) throw Error(ErrorCode::Empty, path_ + ": no trace events");
  if (stored_ == 0) {  // events, but none Braid reads: an error, not an empty run
    std::string saw;
    for (const auto& [what, n] : skipped_)
      saw += (saw.empty() ? "" : ", ") + std::to_string(n) + " " + what;
    bool no_cat = skipped_.count("(no category)") > 0;
    throw Error(
        ErrorCode::BadFormat,
        path_ + ": 0 of " + std::to_string(events_) + " events recognized (" + saw + ")" +
            (no_cat ? ": no cat field; is this a legacy profiler trace? (--format legacy)" : ""));
  }
  if (dist_rank_ >= 0 && index_ >= ctx_.options.ranks.size())
    info_.rank = dist_rank_;
  else
    info_.rank = ctx_.default_rank(index_);
  const int32_t final_rank = info_.rank;
  ctx_.claim_rank(final_rank, path_);
  const Ns late_base = base_ns_ - base_known_at_events_;
  fix_rows(final_rank, late_base);
  int64_t unlinked = 0, no_meta = 0, from_dims = 0, not_collective = 0;
  std::vector<Collective> colls = link_nccl(final_rank, late_base, unlinked, no_meta, from_dims);
  const int64_t cpu_only = cpu_only_collectives(final_rank, late_base, colls, not_collective);
  std::sort(colls.begin(), colls.end(),
            [](const Collective& a, const Collective& b) { return a.start < b.start; });
  for (auto& c : colls) w_.add(run_, c);
  recategorize(final_rank, colls);
  small_tables(final_rank, late_base);
  put_diagnostics(final_rank, unlinked, no_meta, from_dims, cpu_only, not_collective);
  ctx_.stats.rows += stored_ + static_cast<int64_t>(colls.size());
}

// Rows written before the rank or the time base were known get fixed in SQL.
void KinetoFile::fix_rows(int32_t final_rank, Ns late_base) {
  if (late_base != 0 && max_end_ >= min_start_) {
    auto lo = checked_add(min_start_, late_base), hi = checked_add(max_end_, late_base);
    if (!lo || !hi || !valid_span(*lo, *hi))
      bad("baseTimeNanoseconds " + std::to_string(base_ns_) +
          " puts the events over 130 years from the epoch (not a time)");
  }
  if (provisional_ || late_base != 0) {
    int32_t from = rank_;
    w_.submit([from, final_rank, late_base, run = run_](sqlite3* db) {
      rows::move_events(db, run, from, final_rank, late_base);
    });
  }
}

// NCCL kernels linked to their CPU-side communication ops, as collectives.
std::vector<Collective> KinetoFile::link_nccl(int32_t final_rank, Ns late_base, int64_t& unlinked,
                                              int64_t& no_meta, int64_t& from_dims) {
  auto fix = [&](Ns v) { return v + late_base; };
  std::sort(launches_.begin(), launches_.end(),
            [](const Launch& a, const Launch& b) { return a.correlation < b.correlation; });
  const std::vector<CommOp*> ops = sorted_pointers(comm_ops_, [](const CommOp& a, const CommOp& b) {
    return a.tid != b.tid ? a.tid < b.tid : a.start < b.start;
  });
  Ns max_comm_dur = 0;
  for (const CommOp* o : ops) max_comm_dur = std::max(max_comm_dur, o->end - o->start);
  std::unordered_map<int64_t, CommOp*> by_ext;
  for (CommOp* o : ops)
    if (o->external_id) by_ext.emplace(o->external_id, o);

  std::map<std::string, int64_t> seq_by_comm;
  const std::vector<PendingKernel*> kernels = sorted_pointers(
      nccl_,
      [](const PendingKernel& a, const PendingKernel& b) { return a.coll.start < b.coll.start; });
  std::vector<Collective> colls;
  for (PendingKernel* k : kernels) {
    PendingKernel& pk = *k;
    // The comm ops enclosing the launch call, innermost last.
    std::vector<CommOp*> chain;
    auto it = std::lower_bound(launches_.begin(), launches_.end(), pk.correlation,
                               [](const Launch& l, int64_t c) { return l.correlation < c; });
    if (pk.correlation && it != launches_.end() && it->correlation == pk.correlation) {
      // Ops of this thread that start at or before the launch, scanned backwards only as far
      // as the longest comm op reaches (keeps this linear in the number of kernels).
      auto hi =
          std::upper_bound(ops.begin(), ops.end(), std::make_pair(it->tid, it->ts),
                           [](const std::pair<int64_t, Ns>& k, const CommOp* o) {
                             return k.first != o->tid ? k.first < o->tid : k.second < o->start;
                           });
      for (auto o = hi; o != ops.begin();) {
        --o;
        if ((*o)->tid != it->tid || (*o)->start < it->ts - max_comm_dur) break;
        if ((*o)->end >= it->ts) chain.insert(chain.begin(), *o);
      }
    }
    if (chain.empty() && pk.external_id) {
      auto e = by_ext.find(pk.external_id);
      if (e != by_ext.end()) chain.push_back(e->second);
    }
    if (chain.empty()) ++unlinked;

    const CommOp* meta = pk.meta.has_meta ? &pk.meta : nullptr;
    CollOp cpu_op = CollOp::Unknown;
    for (auto* o : chain) {
      o->used = true;
      if (o->is_record_param && o->has_meta && !meta) meta = o;
      if (o->op != CollOp::Unknown) cpu_op = o->op;  // innermost wins
    }
    if (meta && meta->op != CollOp::Unknown && pk.name_op == CollOp::SendRecv) cpu_op = meta->op;
    Collective c = pk.coll;
    c.rank = final_rank;
    c.start = fix(c.start);
    c.end = fix(c.end);
    // The kernel name decides, except for SendRecv kernels, whose operation is the CPU op's.
    c.op = pk.name_op != CollOp::SendRecv && pk.name_op != CollOp::Unknown ? pk.name_op
           : cpu_op != CollOp::Unknown                                     ? cpu_op
           : meta && meta->op != CollOp::Unknown                           ? meta->op
                                                                           : pk.name_op;
    if (it != launches_.end() && it->correlation == pk.correlation && pk.correlation)
      c.enqueue = fix(it->ts);
    std::string dtype;
    if (meta) {
      dtype = meta->dtype;
      c.in_count = meta->in_nelems;
      c.out_count = meta->out_nelems;
      c.group_size = static_cast<int32_t>(meta->group_size);
      c.seq = meta->seq;
      if (meta->root >= 0) c.peer_or_root = static_cast<int32_t>(meta->root);
      c.comm = w_.intern(meta->pg_name);
      if (!meta->pg_name.empty() &&
          std::none_of(comms_.begin(), comms_.end(),
                       [&](const Communicator& x) { return x.comm == meta->pg_name; })) {
        Communicator cm;
        cm.comm = meta->pg_name;
        cm.label = meta->pg_desc;
        cm.nranks = static_cast<int32_t>(meta->group_size);
        cm.ranks = meta->pg_ranks;
        comms_.push_back(cm);
      }
    } else {
      if (pk.name_op != CollOp::SendRecv) dtype = pk.name_dtype;
    }
    if (c.in_count < 0 && c.out_count < 0) {
      if (size_from_input_dims(chain, c.op, c.in_count, c.out_count, dtype))
        ++from_dims;
      else
        ++no_meta;
    }
    c.dtype = w_.intern(dtype);
    int sz = dtype_size(dtype);
    int64_t n = std::max(c.in_count, c.out_count);
    if (sz > 0 && n >= 0) c.bytes = n * sz;
    colls.push_back(c);
  }
  return colls;
}

// Collectives recorded on the CPU side with full metadata but no GPU kernel (e.g. world size 1,
// where NCCL launches nothing): kept with CPU timing and stream -1.
int64_t KinetoFile::cpu_only_collectives(int32_t final_rank, Ns late_base,
                                         std::vector<Collective>& colls, int64_t& not_collective) {
  auto fix = [&](Ns v) { return v + late_base; };
  const std::vector<CommOp*> ops = sorted_pointers(comm_ops_, [](const CommOp& a, const CommOp& b) {
    return a.tid != b.tid ? a.tid < b.tid : a.start < b.start;
  });
  int64_t cpu_only = 0;
  for (const CommOp* op : ops) {
    const CommOp& o = *op;
    if (!o.is_record_param || !o.has_meta || o.used) continue;
    if (o.op == CollOp::Unknown) {  // "wait", "coalesced" and other bookkeeping records
      ++not_collective;
      continue;
    }
    Collective c;
    c.rank = final_rank;
    c.op = o.op;
    c.start = fix(o.start);
    c.end = fix(o.end);
    c.in_count = o.in_nelems;
    c.out_count = o.out_nelems;
    c.group_size = static_cast<int32_t>(o.group_size);
    c.seq = o.seq;
    c.comm = w_.intern(o.pg_name);
    c.dtype = w_.intern(o.dtype);
    c.name = o.name;
    int sz = dtype_size(o.dtype);
    int64_t n = std::max(c.in_count, c.out_count);
    if (sz > 0 && n >= 0) c.bytes = n * sz;
    colls.push_back(c);
    ++cpu_only;
  }
  return cpu_only;
}

// SendRecv kernels whose operation came from the CPU side take that operation's category, so
// kernel categories and collectives tell the same story. Found through the window index.
void KinetoFile::recategorize(int32_t final_rank, const std::vector<Collective>& colls) {
  std::vector<std::tuple<int64_t, Ns, int>> recategorize;
  for (auto& c : colls)
    if (c.stream >= 0 && c.name < category_of_.size() &&
        category_of_[c.name] == static_cast<int8_t>(Category::CommSendRecv) &&
        comm_category(c.op) != Category::CommSendRecv)
      recategorize.emplace_back(c.stream, c.start, static_cast<int>(comm_category(c.op)));
  if (!recategorize.empty())
    w_.submit([list = std::move(recategorize), final_rank, run = run_](sqlite3* db) {
      rows::recategorize_kernels(db, run, final_rank, Category::CommSendRecv, list);
    });
}

void KinetoFile::small_tables(int32_t final_rank, Ns late_base) {
  auto fix = [&](Ns v) { return v + late_base; };
  info_.source = path_;
  info_.pid = cpu_pid_;
  info_.device = static_cast<int32_t>(device_seen_);
  if (auto d = device_names_.find(device_seen_); d != device_names_.end())
    info_.device_name = d->second;
  w_.add_rank(run_, info_);
  for (auto& [key, label] : streams_) {
    StreamInfo s;
    s.rank = final_rank;
    s.stream = key.first;
    s.gpu = key.second;
    for (auto& [pt, tn] : thread_names_) {
      bool pid_is_gpu = gpu_pids_.count(pt.first) ? gpu_pids_[pt.first] : false;
      if (pt.second == key.first && pid_is_gpu == key.second) s.label = tn;
    }
    w_.add_stream(run_, s);
  }
  for (auto& s : steps_) {
    s.rank = final_rank;
    s.start = fix(s.start);
    s.end = fix(s.end);
    w_.add_step(run_, s);
  }
  if (ctx_.host_ops) {
    et::HostOps& h = (*ctx_.host_ops)[index_];
    h.rank = final_rank;
    h.pid = cpu_pid_;
    h.path = path_;
    h.steps = steps_;
    for (et::HostOp& o : host_ops_) o.start = fix(o.start), o.end = fix(o.end);
    h.ops = std::move(host_ops_);
  }
  for (auto& c : comms_) w_.add_communicator(run_, c);
}

void KinetoFile::put_diagnostics(int32_t final_rank, int64_t unlinked, int64_t no_meta,
                                 int64_t from_dims, int64_t cpu_only, int64_t not_collective) {
  auto put = [&](diag::Code code, int64_t n, std::string detail) {
    ctx_.diagnose(code, n, std::move(detail), final_rank);
  };
  for (auto& [code, detail] : diags_) put(code, 1, std::move(detail));
  put(diag::Code::kineto_unlinked_nccl_kernel, unlinked,
      "NCCL kernels with no CPU-side communication op found through correlation/External id");
  put(diag::Code::kineto_collective_without_metadata, no_meta,
      "collectives without message sizes in the trace (profiler run without record_shapes or an "
      "older PyTorch)");
  put(diag::Code::kineto_collective_sized_from_input_dims, from_dims,
      "collectives without message-size metadata sized from the Input Dims of their CPU ops "
      "(nccl:* annotation, record_param_comms, c10d operator)");
  put(diag::Code::kineto_cpu_only_collective, cpu_only,
      "record_param_comms ops with no NCCL kernel; stored with CPU timing and stream -1");
  put(diag::Code::kineto_non_collective_comm_record, not_collective,
      "record_param_comms entries that are not collectives (e.g. wait), not stored as such");
  put(diag::Code::kineto_malformed_event, bad_events_,
      "events without ph/ts or with unparseable timestamps, skipped");
  put(diag::Code::kineto_negative_duration, negative_, "negative durations set to 0");
  put(diag::Code::kineto_bad_time, bad_time_,
      "events whose ts/dur overflow or are over 130 years from the clock's origin were "
      "skipped; first: " +
          bad_time_example_);
  int64_t skipped = 0;
  std::string what;
  for (auto& [kind, n] : skipped_) {
    skipped += n;
    what += (what.empty() ? "" : ", ") + kind + ": " + std::to_string(n);
  }
  put(diag::Code::kineto_skipped_events, skipped,
      "events not stored (flow arrows, instants, other categories): " + what);
}

}  // namespace braid::kineto
