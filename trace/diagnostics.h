// Every diagnostics code braid writes into the `diagnostics` table, in one table: its severity,
// the layer that writes it and a one-line description of what it counts (the model is
// Perfetto's storage/stats.h). Call sites name a code by its id (diag::Code::kineto_bad_time) and
// build the row with diag::make, so a code cannot be misspelt, and `braid info`, the GUI and
// docs/schema.md (checked against this table by tests/trace/diagnostics_test.cc) describe every
// code the same way. Header only: the capture agent uses it without linking anything.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "trace/model.h"

namespace braid::diag {

// X(id, code, severity, layer, description)
#define BRAID_DIAGNOSTICS(X)                                                                       \
  X(kineto_unlinked_nccl_kernel, "kineto.unlinked_nccl_kernel", Warning, "trace/import",           \
    "NCCL kernels with no CPU-side communication op found through correlation or External id")     \
  X(kineto_collective_without_metadata, "kineto.collective_without_metadata", Info,                \
    "trace/import", "collectives without message sizes in the trace")                              \
  X(kineto_collective_sized_from_input_dims, "kineto.collective_sized_from_input_dims", Info,      \
    "trace/import", "collectives sized from the Input Dims of their CPU ops")                      \
  X(kineto_cpu_only_collective, "kineto.cpu_only_collective", Info, "trace/import",                \
    "record_param_comms ops with no NCCL kernel, stored with CPU times and stream -1")             \
  X(kineto_non_collective_comm_record, "kineto.non_collective_comm_record", Info, "trace/import",  \
    "record_param_comms entries that are not collectives (e.g. wait)")                             \
  X(kineto_malformed_event, "kineto.malformed_event", Warning, "trace/import",                     \
    "events without ph/ts or with unparseable timestamps, skipped")                                \
  X(kineto_negative_duration, "kineto.negative_duration", Warning, "trace/import",                 \
    "negative durations, set to 0")                                                                \
  X(kineto_bad_time, "kineto.bad_time", Warning, "trace/import",                                   \
    "events whose ts/dur overflow or lie over 130 years from the clock's origin, skipped")         \
  X(kineto_skipped_events, "kineto.skipped_events", Info, "trace/import",                          \
    "events not stored (flow arrows, instants, other categories)")                                 \
  X(kineto_late_time_base, "kineto.late_time_base", Info, "trace/import",                          \
    "baseTimeNanoseconds came after traceEvents; times were shifted after loading")                \
  X(kineto_bad_pg_config, "kineto.bad_pg_config", Warning, "trace/import",                         \
    "distributedInfo.pg_config could not be parsed")                                               \
  X(kineto_nccl_kernel_unparsed, "kineto.nccl_kernel_unparsed", Info, "trace/import",              \
    "NCCL kernel names whose operation could not be read")                                         \
  X(nsys_missing_table, "nsys.missing_table", Warning, "trace/import",                             \
    "export tables absent, not imported (info when only optional ones are missing)")               \
  X(nsys_rows_without_process, "nsys.rows_without_process", Warning, "trace/import",               \
    "GPU rows without globalPid in a multi-process export, skipped")                               \
  X(nsys_rank_guessed, "nsys.rank_guessed", Warning, "trace/import",                               \
    "processes without rank information, numbered in pid order")                                   \
  X(nsys_nvtx_mark_skipped, "nsys.nvtx_mark_skipped", Info, "trace/import",                        \
    "NVTX marks (instants), not imported as ranges")                                               \
  X(nsys_nvtx_unterminated, "nsys.nvtx_unterminated", Warning, "trace/import",                     \
    "NVTX ranges without an end, skipped")                                                         \
  X(nsys_nvtx_binary_payload, "nsys.nvtx_binary_payload", Info, "trace/import",                    \
    "binary NVTX payloads, not decoded")                                                           \
  X(nsys_nccl_kernel_unlinked, "nsys.nccl_kernel_unlinked", Warning, "trace/import",               \
    "NCCL kernels whose launching runtime call was not found (enqueue time unknown)")              \
  X(nsys_nccl_op_unresolved, "nsys.nccl_op_unresolved", Warning, "trace/import",                   \
    "SendRecv kernels without an enclosing NCCL NVTX range; op left as SendRecv")                  \
  X(nsys_nccl_size_unknown, "nsys.nccl_size_unknown", Info, "trace/import",                        \
    "collectives without a size (no NCCL NVTX payload, or communicator size unknown)")             \
  X(nsys_nccl_op_conflict, "nsys.nccl_op_conflict", Warning, "trace/import",                       \
    "NCCL NVTX ranges naming another operation than their kernel; kernel name kept")               \
  X(nsys_missing_column, "nsys.missing_column", Warning, "trace/import",                           \
    "columns the importer needs that the export lacks")                                            \
  X(nsys_unknown_string, "nsys.unknown_string", Warning, "trace/import",                           \
    "name ids not found in StringIds (names left empty)")                                          \
  X(nsys_bad_time, "nsys.bad_time", Warning, "trace/import",                                       \
    "rows whose start/end are not a time, skipped")                                                \
  X(nsys_unplaced_rows, "nsys.unplaced_rows", Warning, "trace/import",                             \
    "rows of processes without a rank in a multi-process export, skipped")                         \
  X(chakra_cpu_nodes_skipped, "chakra.cpu_nodes_skipped", Info, "trace/import",                    \
    "host-side (is_cpu_op) nodes, not imported")                                                   \
  X(chakra_kernels_without_duration, "chakra.kernels_without_duration", Info, "trace/import",      \
    "GPU compute nodes without a duration, not imported")                                          \
  X(chakra_other_nodes_skipped, "chakra.other_nodes_skipped", Info, "trace/import",                \
    "metadata, memory and other non-compute, non-communication nodes")                             \
  X(chakra_unknown_comm_op, "chakra.unknown_comm_op", Warning, "trace/import",                     \
    "communication nodes whose operation neither comm_type nor the name tells")                    \
  X(legacy_skipped_events, "legacy.skipped_events", Info, "trace/import",                          \
    "events that are not complete \"X\" events with a name, ts and dur")                           \
  X(legacy_collective_without_work, "legacy.collective_without_work", Warning, "trace/import",     \
    "c10d calls without a gloo event of the same operation; they end with the call")               \
  X(et_joined, "et.joined", Info, "trace/import",                                                  \
    "execution-trace ops joined to the trace's CPU ops (detail: how, and the step matched)")       \
  X(et_not_joined, "et.not_joined", Warning, "trace/import",                                       \
    "execution-trace ops joined to no CPU op of the trace (detail: the reasons, first names)")     \
  X(et_trace_ops_not_joined, "et.trace_ops_not_joined", Info, "trace/import",                      \
    "CPU ops inside the execution trace's window that no execution-trace op was joined to")        \
  X(et_layout_assumed, "et.layout_assumed", Info, "trace/import",                                  \
    "tensor arguments first seen without strides or a producing op, taken as dense")               \
  X(et_extent_bounded, "et.extent_bounded", Info, "trace/import",                                  \
    "views whose strides the execution trace does not give, bounded by the tensor they view")      \
  X(store_bad_time, "store.bad_time", Warning, "trace",                                            \
    "rows whose times are not a time, dropped by the writer")                                      \
  X(analysis_mismatched_collective, "analysis.mismatched_collective", Warning, "analysis",         \
    "matched collectives whose members disagree (op, size, communicator)")                         \
  X(analysis_duplicate_seq, "analysis.duplicate_seq", Warning, "analysis",                         \
    "a sequence number seen twice on a rank; the later one is left unmatched")                     \
  X(analysis_unmatched_collective, "analysis.unmatched_collective", Warning, "analysis",           \
    "collectives without their partner on every member rank")                                      \
  X(analysis_order_aligned, "analysis.order_aligned", Info, "analysis",                            \
    "collectives matched by aligning the ranks' orders (no sequence numbers, orders disagree)")    \
  X(analysis_call_order_differs, "analysis.call_order_differs", Warning, "analysis",               \
    "host collectives of a step a rank calls in another order or number than the others")          \
  X(analysis_p2p_without_peer, "analysis.p2p_without_peer", Warning, "analysis",                   \
    "send/recv operations whose peer the trace does not give; not matched")                        \
  X(analysis_clock_residual, "analysis.clock_residual", Warning, "analysis",                       \
    "a rank whose collective ends disagree with its fitted clock offset")                          \
  X(analysis_clock_unanchored, "analysis.clock_unanchored", Warning, "analysis",                   \
    "ranks sharing no matched collective with the reference rank; their clocks are kept")          \
  X(analysis_clock_outlier_anchor, "analysis.clock_outlier_anchor", Info, "analysis",              \
    "collective ends left out of the clock fit as outliers")                                       \
  X(analysis_critical_path_refused, "analysis.critical_path_refused", Warning, "analysis",         \
    "steps whose ranks' clocks are not aligned for them; no critical path reported")               \
  X(merge_not_carried, "merge.not_carried", Warning, "analysis",                                   \
    "an input's other runs or derived tables, not copied by braid merge")                          \
  X(merge_clock_unanchored, "merge.clock_unanchored", Warning, "analysis",                         \
    "ranks with no matched collective shared with the reference rank; offset 0 kept")              \
  X(replay_note, "replay.note", Info, "replay",                                                    \
    "a note of the replay (what it assumed or left out)")                                          \
  X(capture_cupti_unavailable, "capture.cupti_unavailable", Error, "capture",                      \
    "CUPTI could not be used in this process; only NCCL calls were recorded")                      \
  X(capture_steps_unavailable, "capture.steps_unavailable", Warning, "capture",                    \
    "a steps window was asked for in a process that cannot see NVTX step ranges")                  \
  X(capture_dropped_records, "capture.dropped_records", Warning, "capture",                        \
    "records dropped before they were stored (CUPTI's count, or undelivered to the daemon)")       \
  X(capture_buffer_refused, "capture.buffer_refused", Warning, "capture",                          \
    "activity buffers CUPTI asked for beyond the pool's cap (their records dropped)")              \
  X(capture_queue_overflow, "capture.queue_overflow", Warning, "capture",                          \
    "events dropped because the writer thread fell behind")                                        \
  X(capture_collective_without_kernel, "capture.collective_without_kernel", Warning, "capture",    \
    "NCCL calls whose kernel or copy was not seen, stored with host times")                        \
  X(capture_collective_no_gpu_work, "capture.collective_no_gpu_work", Info, "capture",             \
    "NCCL calls that do no GPU work, stored with host times")                                      \
  X(capture_incomplete_records, "capture.incomplete_records", Warning, "capture",                  \
    "activity records without a start or ending before it, not stored")                            \
  X(capture_clock_fit, "capture.clock_fit", Info, "capture",                                       \
    "number of GPU-to-host clock fits (detail: last slope, worst residual)")                       \
  X(capture_unmatched_marker_end, "capture.unmatched_marker_end", Info, "capture",                 \
    "NVTX range ends whose start was before CUPTI started")                                        \
  X(capture_unclosed_range, "capture.unclosed_range", Info, "capture",                             \
    "NVTX ranges still open when the capture ended, not stored")                                   \
  X(capture_unhandled_activity_kind, "capture.unhandled_activity_kind", Info, "capture",           \
    "CUPTI records of kinds braid does not store")                                                 \
  X(capture_cupti_contended, "capture.cupti_contended", Warning, "capture",                        \
    "another CUPTI client of the job was refused CUPTI because braid holds it")                    \
  X(capture_cupti_taken, "capture.cupti_taken", Error, "capture",                                  \
    "another CUPTI client took CUPTI's buffers or a kind braid records; braid's records stop")     \
  X(capture_cupti_yielded, "capture.cupti_yielded", Warning, "capture",                            \
    "braid handed CUPTI to the job's own profiler (--cupti yield): no CUDA records until it "      \
    "returns")                                                                                     \
  X(capture_cupti_callbacks_yielded, "capture.cupti_callbacks_yielded", Warning, "capture",        \
    "braid handed its CUPTI subscription to the job's own profiler (--cupti yield): CUDA records " \
    "go on; CUDA-graph launches of NCCL calls are not linked until it comes back")                 \
  X(capture_cupti_shared, "capture.cupti_shared", Info, "capture",                                 \
    "another CUPTI client subscribed beside braid (CUPTI with several subscribers): both record")  \
  X(capture_nccl_graph_captured, "capture.nccl_graph_captured", Info, "capture",                   \
    "NCCL calls made during CUDA stream capture; their collectives are the graph's replays")       \
  X(daemon_rank_conflict, "daemon.rank_conflict", Error, "capture/daemon",                         \
    "two processes of one capture claimed the same rank")                                          \
  X(daemon_agent_lost, "daemon.agent_lost", Error, "capture/daemon",                               \
    "a process disconnected before its window closed; its records up to then are kept")            \
  X(daemon_agent_timeout, "daemon.agent_timeout", Error, "capture/daemon",                         \
    "no end of window from a process within the grace period")                                     \
  X(view_overlap_clamped, "view.overlap_clamped", Warning, "app/view",                             \
    "events shortened to fit 64 rows of overlapping events (the GUI's, not stored)")

enum class Code : int {
#define BRAID_DIAG_ID(id, code, sev, layer, text) id,
  BRAID_DIAGNOSTICS(BRAID_DIAG_ID)
#undef BRAID_DIAG_ID
};

struct Info {
  std::string_view code;
  Severity severity;
  std::string_view layer;
  std::string_view description;
};

inline constexpr Info kTable[] = {
#define BRAID_DIAG_INFO(id, code, sev, layer, text) {code, Severity::sev, layer, text},
    BRAID_DIAGNOSTICS(BRAID_DIAG_INFO)
#undef BRAID_DIAG_INFO
};
inline constexpr size_t kCount = sizeof(kTable) / sizeof(kTable[0]);

constexpr const Info& info(Code c) { return kTable[static_cast<size_t>(c)]; }

// The table's entry for a code read from a file; nullptr for a code this braid does not know.
constexpr const Info* find(std::string_view code) {
  for (const Info& i : kTable)
    if (i.code == code) return &i;
  return nullptr;
}

// Sets `d`'s code and the table's severity (for rows built field by field).
inline void set_code(Diagnostic& d, Code c) {
  d.severity = info(c).severity;
  d.code = std::string(info(c).code);
}

// A diagnostics row of code `c` with the table's severity (or `severity` where a site decides).
inline Diagnostic make(Code c, int64_t count, std::string detail, int32_t rank = -1) {
  return Diagnostic{rank, info(c).severity, std::string(info(c).code), count, std::move(detail)};
}
inline Diagnostic make(Code c, Severity severity, int64_t count, std::string detail,
                       int32_t rank = -1) {
  return Diagnostic{rank, severity, std::string(info(c).code), count, std::move(detail)};
}

}  // namespace braid::diag
