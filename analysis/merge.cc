#include "analysis/merge.h"

#include <filesystem>
#include <map>
#include <optional>
#include <unordered_map>

#include "analysis/matching.h"
#include "analysis/run_data.h"
#include "trace/diagnostics.h"
#include "trace/error.h"
#include "trace/reader.h"
#include "trace/rows.h"
#include "trace/schema.h"
#include "trace/store_update.h"
#include "trace/temp_cleanup.h"
#include "trace/writer.h"

namespace braid::analysis {

namespace {

namespace fs = std::filesystem;

void copy_run(const TraceReader& r, int64_t src, TraceWriter& w, int64_t dst, int64_t& events) {
  std::unordered_map<StrId, StrId> ids;
  auto map = [&](StrId id) -> StrId {
    if (id == 0) return 0;
    auto it = ids.find(id);
    if (it != ids.end()) return it->second;
    StrId n = w.intern(r.str(id));
    ids.emplace(id, n);
    return n;
  };
  for (const StreamInfo& s : r.streams(src)) w.add_stream(dst, s);
  for (const Step& s : r.steps(src)) w.add_step(dst, s);
  for (const Diagnostic& d : r.diagnostics(src)) w.add_diagnostic(dst, d);
  r.kernels(src, [&](Kernel k) {
    k.name = map(k.name);
    w.add(dst, k);
    ++events;
    return true;
  });
  r.memcpys(src, [&](Memcpy m) {
    m.name = map(m.name);
    w.add(dst, m);
    ++events;
    return true;
  });
  r.api_calls(src, [&](ApiCall a) {
    a.name = map(a.name);
    w.add(dst, a);
    ++events;
    return true;
  });
  r.ranges(src, [&](Range x) {
    x.name = map(x.name);
    x.domain = map(x.domain);
    x.payload = map(x.payload);
    w.add(dst, x);
    ++events;
    return true;
  });
  r.collectives(src, [&](Collective c) {
    c.comm = map(c.comm);
    c.dtype = map(c.dtype);
    c.algo = map(c.algo);
    c.proto = map(c.proto);
    c.name = map(c.name);
    w.add(dst, c);
    ++events;
    return true;
  });
  // Capture tables. Ranks are not renumbered by merge and call ids are unique per process, so
  // the links (rank, comm_id, seq) to collectives and (rank, call_id) from proxy ops to calls
  // hold once the string ids go through the same map as the collectives'. Times stay in the
  // rank's own clock, like the kernels' (ranks.clock_offset_ns maps both).
  r.nccl_calls(src, [&](NcclCallRow c) {
    c.comm = map(c.comm);
    c.redop = map(c.redop);
    c.dtype = map(c.dtype);
    w.add(dst, c);
    ++events;
    return true;
  });
  r.proxy_ops(src, [&](ProxyOpRow p) {
    p.comm = map(p.comm);
    w.add(dst, p);
    ++events;
    return true;
  });
  for (const CaptureWindow& cw : r.capture_windows(src)) w.add(dst, cw);
  // Execution-trace tables: keyed by (rank, node), times in the rank's own clock.
  r.et_ops(src, [&](EtOp o) {
    o.name = map(o.name);
    o.schema = map(o.schema);
    w.add(dst, o);
    ++events;
    return true;
  });
  r.et_tensors(src, [&](EtTensor t) {
    t.dtype = map(t.dtype);
    t.device = map(t.device);
    t.shape = map(t.shape);
    t.strides = map(t.strides);
    w.add(dst, t);
    ++events;
    return true;
  });
}

// Meta keys that describe the file format, not the data: the merged file has its own.
bool format_key(const std::string& k) { return k == "schema_version" || k == "format"; }

std::vector<std::pair<std::string, std::string>> meta_of(const TraceReader& r) {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& kv : r.meta_rows())
    if (!format_key(kv.first)) out.push_back(std::move(kv));
  return out;
}

// What merge leaves out on purpose, for the merged file to say so: the input's other runs
// (merge takes one run per input) and results derived from the input alone (analysis_*,
// schedules, opportunities), which describe that one file rather than the job. "" if nothing.
std::string left_out(const TraceReader& r, int64_t run) {
  std::string out;
  auto add = [&](const std::string& what) { out += (out.empty() ? "" : ", ") + what; };
  std::string others;
  for (const RunRow& x : r.runs())
    if (x.run_id != run) others += (others.empty() ? "" : " ") + std::to_string(x.run_id);
  if (!others.empty()) add("runs " + others + " (only run " + std::to_string(run) + " is merged)");
  for (const auto& [name, n] : r.derived_tables())
    if (n > 0) add(name + " " + std::to_string(n) + " rows");
  return out;
}

}  // namespace

MergeResult merge_files(const std::vector<std::string>& inputs, const std::string& output,
                        bool solve_clocks) {
  if (inputs.size() < 2)
    throw Error(ErrorCode::Usage, "braid merge needs at least two input files");
  std::error_code ec;
  for (const std::string& in : inputs)
    if (fs::exists(output, ec) && fs::equivalent(in, output, ec))
      throw Error(ErrorCode::Usage, "the output " + output + " is also an input");

  // Open every input and check that no rank appears twice.
  std::vector<std::unique_ptr<TraceReader>> readers;
  std::vector<int64_t> runs;
  std::map<int32_t, std::string> owner;
  for (const std::string& in : inputs) {
    readers.push_back(std::make_unique<TraceReader>(in));
    // A table or column this braid does not know would not reach the output: refuse instead.
    schema::check_known_layout(readers.back()->db(), in);
    int64_t run = default_run(*readers.back());
    runs.push_back(run);
    auto ranks = readers.back()->ranks(run);
    if (ranks.empty())
      throw Error(ErrorCode::Empty, in + ": run " + std::to_string(run) + " has no ranks");
    for (const RankInfo& r : ranks) {
      auto [it, fresh] = owner.emplace(r.rank, in);
      if (!fresh)
        throw Error(ErrorCode::Usage, "rank " + std::to_string(r.rank) + " is in both " +
                                          it->second + " and " + in +
                                          "; merge takes each rank from one file");
    }
  }

  MergeResult res;
  for (auto& [r, _] : owner) res.ranks.push_back(r);
  const std::string tmp = output + ".merge-tmp";
  fs::remove(tmp, ec);
  register_temp_for_cleanup(tmp);
  try {
    {
      TraceWriter w(tmp, TraceWriter::Mode::Overwrite);
      const RunRow first = [&] {
        for (const RunRow& r : readers[0]->runs())
          if (r.run_id == runs[0]) return r;
        return RunRow{};
      }();
      std::string sources;
      for (size_t i = 0; i < inputs.size(); ++i) sources += (i ? ";" : "") + inputs[i];
      res.run_id = w.begin_run(first.kind, sources, first.backend,
                               "merged from " + std::to_string(inputs.size()) + " files");
      std::map<std::string, Communicator> comms;
      for (size_t i = 0; i < readers.size(); ++i) {
        for (RankInfo r : readers[i]->ranks(runs[i])) {
          r.clock_offset = 0;
          r.offset_error = -1;
          if (r.source.empty()) r.source = inputs[i];
          w.add_rank(res.run_id, r);
        }
        for (const Communicator& c : readers[i]->communicators(runs[i])) {
          auto [it, fresh] = comms.emplace(c.comm, c);
          if (!fresh && it->second.ranks.size() < c.ranks.size()) it->second = c;
        }
        copy_run(*readers[i], runs[i], w, res.run_id, res.events);
      }
      for (auto& [_, c] : comms) w.add_communicator(res.run_id, c);
      // Meta: each input's keys under input.<i>.<key> (i = its position, from 0), and under the
      // key itself when every input that has it agrees (capture.window of one recording).
      std::map<std::string, std::optional<std::string>> shared;
      Diagnostic skipped = diag::make(diag::Code::merge_not_carried, 0, "");
      for (size_t i = 0; i < readers.size(); ++i) {
        const std::string prefix = "input." + std::to_string(i) + ".";
        w.set_meta(prefix + "path", inputs[i]);
        for (auto& [k, v] : meta_of(*readers[i])) {
          w.set_meta(prefix + k, v);
          auto [it, fresh] = shared.emplace(k, v);
          if (!fresh && it->second && *it->second != v) it->second.reset();
        }
        std::string lost = left_out(*readers[i], runs[i]);
        if (!lost.empty()) {
          ++skipped.count;
          skipped.detail += (skipped.detail.empty() ? "" : "; ") + inputs[i] + ": " + lost;
        }
      }
      for (auto& [k, v] : shared)
        if (v) w.set_meta(k, *v);
      if (skipped.count > 0) w.add_diagnostic(res.run_id, skipped);
      w.commit();
    }
    // Clock alignment on the merged run, stored in the same file before it is renamed.
    {
      TraceReader merged(tmp);
      RunData run = load_run(merged, res.run_id);
      MatchResult match = match_trace_collectives(run);
      res.clocks = solve_clocks ? align_clocks(run, match) : stored_clocks(run);
    }
    {
      StoreUpdate u(tmp);
      rows::SmallTables small(u.db());
      for (const RankClock& c : res.clocks.ranks)
        if (c.aligned) small.clock_offset(res.run_id, c.rank, c.offset, c.error);
      auto add = [&](const Diagnostic& d) { small.diagnostic(res.run_id, d); };
      int unaligned = 0;
      for (const RankClock& c : res.clocks.ranks) unaligned += c.aligned ? 0 : 1;
      if (solve_clocks && unaligned > 0)
        add(diag::make(diag::Code::merge_clock_unanchored, unaligned,
                       (res.clocks.reference < 0
                            ? std::string("no two ranks share a matched collective: the ranks "
                                          "cannot be aligned")
                            : "ranks with no matched collective shared with rank " +
                                  std::to_string(res.clocks.reference)) +
                           ": their own clocks are kept (offset 0), so their times may "
                           "not line up"));
      for (const Diagnostic& d : res.clocks.diagnostics)
        if (d.code != diag::info(diag::Code::analysis_clock_unanchored).code) add(d);
      u.commit();
    }
    fs::rename(tmp, output);
    unregister_temp_for_cleanup();
  } catch (...) {
    unregister_temp_for_cleanup();
    fs::remove(tmp, ec);
    fs::remove(tmp + "-wal", ec);
    fs::remove(tmp + "-shm", ec);
    throw;
  }
  return res;
}

}  // namespace braid::analysis
