#include "trace/import/importer.h"

#include <cctype>
#include <cstring>
#include <filesystem>

#include "trace/error.h"
#include "trace/import/et.h"
#include "trace/input.h"

namespace braid {

std::string_view to_string(TraceFormat f) {
  switch (f) {
    case TraceFormat::Kineto: return "kineto";
    case TraceFormat::Nsys: return "nsys";
    case TraceFormat::Chakra: return "chakra";
    case TraceFormat::Legacy:
      return "legacy";
    case TraceFormat::Et:
      return "et";
    default: return "auto";
  }
}

TraceFormat trace_format_from_string(std::string_view s) {
  if (s == "auto") return TraceFormat::Auto;
  if (s == "kineto" || s == "pytorch" || s == "chrome") return TraceFormat::Kineto;
  if (s == "nsys") return TraceFormat::Nsys;
  if (s == "chakra") return TraceFormat::Chakra;
  if (s == "legacy") return TraceFormat::Legacy;
  if (s == "et") return TraceFormat::Et;
  throw Error(ErrorCode::Usage, "unknown format '" + std::string(s) +
                                    "' (expected auto, kineto, nsys, chakra, legacy or et)");
}

// Chakra protobuf ET: a varint length prefix, then the GlobalMetadata message, whose first field
// is `version` (tag 0x0a) or, from writers that leave version empty, `attr` (tag 0x12); the
// field's own length must fit in the message.
static bool looks_like_chakra_et(std::string_view h) {
  uint64_t len = 0;
  size_t i = 0;
  for (;; ++i) {
    if (i >= h.size() || i >= 5) return false;
    auto c = static_cast<unsigned char>(h[i]);
    len |= uint64_t(c & 0x7f) << (7 * i);
    if (c < 0x80) break;
  }
  ++i;
  if (len < 2 || i + 1 >= h.size()) return false;
  auto tag = static_cast<unsigned char>(h[i]);
  auto field_len = static_cast<unsigned char>(h[i + 1]);
  if (tag != 0x0a && tag != 0x12) return false;
  return field_len >= 0x80 || field_len + 2u <= len;
}

TraceFormat detect_format(const std::string& path) {
  const std::string text = read_head(path, 4096);
  const char* head = text.data();
  const size_t n = text.size();
  if (n == 0) throw Error(ErrorCode::Empty, path + ": empty file");
  std::string_view h(head, n);
  if (h.rfind("SQLite format 3", 0) == 0) return TraceFormat::Nsys;
  if (looks_like_json(h)) {
    // A PyTorch execution trace: "schema" and "nodes" at the top, no "workload_graph".
    if (et::looks_like_et(h)) return TraceFormat::Et;
    // Chakra's JSON has "workload_graph"/"nodes" near the top; Kineto has traceEvents and
    // usually schemaVersion/deviceProperties first. A Chrome trace may also be a bare array.
    if (h.find("\"workload_graph\"") != std::string_view::npos ||
        (h.find("\"nodes\"") != std::string_view::npos &&
         h.find("\"traceEvents\"") == std::string_view::npos &&
         h.find("\"schema\"") != std::string_view::npos))
      return TraceFormat::Chakra;
    // The legacy autograd profiler (PyTorch without Kineto): a bare array of events whose pid
    // is "CPU functions".
    if (h[h.find_first_not_of(" \t\r\n")] == '[' &&
        h.find("\"CPU functions\"") != std::string_view::npos)
      return TraceFormat::Legacy;
    return TraceFormat::Kineto;
  }
  // A tar archive (ustar magic at offset 257) holding Chakra traces.
  if (n > 262 && std::memcmp(head + 257, "ustar", 5) == 0) return TraceFormat::Chakra;
  if (looks_like_chakra_et(h)) return TraceFormat::Chakra;
  // By name: archives only the Chakra importer reads (bzip2/xz ones are not seen through
  // here), and .et files, so that a damaged one gets the Chakra importer's precise error.
  std::string lower_path;
  for (char c : path) lower_path += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* ext : {".et", ".et.gz", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz"})
    if (lower_path.size() >= std::strlen(ext) &&
        lower_path.compare(lower_path.size() - std::strlen(ext), std::string::npos, ext) == 0)
      return TraceFormat::Chakra;
  throw Error(ErrorCode::BadFormat,
              path + ": unrecognized trace format (expected Kineto/Chrome JSON, an Nsight Systems "
                     "SQLite export, or a Chakra execution trace)");
}

void ImportContext::claim_rank(int32_t rank, const std::string& file) {
  for (auto& [r, f] : claimed)
    if (r == rank)
      throw Error(ErrorCode::Usage, file + ": rank " + std::to_string(rank) + " was already imported from " + f +
                                        "; give each file its rank with --rank");
  claimed.emplace_back(rank, file);
}

namespace {

// Pairs the execution traces with the imported traces: `given` (--et) by position, `loose` (ETs
// among the trace files) by process id, else by the rank their file name gives.
std::vector<std::pair<std::string, size_t>> pair_ets(const std::vector<std::string>& given,
                                                     const std::vector<std::string>& loose,
                                                     const std::vector<std::string>& traces,
                                                     const std::vector<et::HostOps>& host) {
  std::vector<std::pair<std::string, size_t>> out;
  std::vector<std::string> owner(traces.size());
  auto claim = [&](const std::string& et_path, size_t i) {
    if (!owner[i].empty())
      throw Error(ErrorCode::Usage, et_path + ": " + traces[i] + " (rank " +
                                        std::to_string(host[i].rank) +
                                        ") already has an execution trace: " + owner[i]);
    owner[i] = et_path;
    out.emplace_back(et_path, i);
  };
  if (!given.empty() && given.size() != traces.size())
    throw Error(ErrorCode::Usage,
                "--et gives " + std::to_string(given.size()) + " execution trace" +
                    (given.size() == 1 ? "" : "s") + " for " + std::to_string(traces.size()) +
                    " trace file" + (traces.size() == 1 ? "" : "s") +
                    ": give one per trace file, in the same order (or put the execution traces "
                    "among the files to pair them by process id)");
  for (size_t i = 0; i < given.size(); ++i) claim(given[i], i);
  for (const std::string& f : loose) {
    int64_t pid = et::peek_pid(f);
    std::optional<size_t> at;
    for (size_t i = 0; i < host.size() && !at; ++i)
      if (pid >= 0 && host[i].pid == pid) at = i;
    std::optional<int32_t> r = at ? std::nullopt : rank_from_file_name(f);
    for (size_t i = 0; i < host.size() && !at && r; ++i)
      if (host[i].rank == *r) at = i;
    if (!at)
      throw Error(ErrorCode::Usage,
                  f + ": cannot tell which trace this execution trace belongs to (its process " +
                      std::to_string(pid) + " is no trace's" +
                      (r ? ", and no trace is rank " + std::to_string(*r) : std::string()) +
                      "); give it with --et, in the order of the traces");
    claim(f, *at);
  }
  return out;
}

}  // namespace

int64_t import_traces(TraceWriter& writer, const std::vector<std::string>& files,
                      TraceFormat format, const ImportOptions& options, ImportStats& stats) {
  if (files.empty()) throw Error(ErrorCode::Usage, "no input files");
  // Execution traces go with a trace of the same run, never alone.
  std::vector<std::string> traces, loose;
  std::vector<TraceFormat> formats;
  for (const auto& f : files) {
    TraceFormat d = format;
    try {
      d = detect_format(f);
    } catch (const Error&) {
      if (format == TraceFormat::Auto) throw;  // a named format's importer gives its own error
    }
    if (d == TraceFormat::Et && format != TraceFormat::Et) {
      loose.push_back(f);
      continue;
    }
    if (format == TraceFormat::Et)
      throw Error(ErrorCode::Usage, f + ": --format et names execution traces, which are imported "
                                        "with the profiler trace of the same run (--et)");
    traces.push_back(f);
    formats.push_back(format == TraceFormat::Auto ? d : format);
  }
  for (const auto& f : options.et_files)
    if (detect_format(f) != TraceFormat::Et)
      throw Error(ErrorCode::BadFormat,
                  f + ": given with --et but not a PyTorch execution trace (expected a JSON "
                      "object with \"schema\" and \"nodes\")");
  if (traces.empty())
    throw Error(ErrorCode::Usage,
                files[0] +
                    ": an execution trace is imported with the profiler trace of the same "
                    "run (braid import TRACE --et ET)");
  for (size_t i = 1; i < formats.size(); ++i)
    if (formats[i] != formats[0])
      throw Error(ErrorCode::Usage,
                  traces[i] + ": is " + std::string(to_string(formats[i])) + " but " + traces[0] +
                      " is " + std::string(to_string(formats[0])) + "; one run holds one format");
  const bool with_et = !loose.empty() || !options.et_files.empty();
  if (with_et && formats[0] != TraceFormat::Kineto && formats[0] != TraceFormat::Legacy)
    throw Error(ErrorCode::Usage, traces[0] + ": is " + std::string(to_string(formats[0])) +
                                      "; execution traces join the CPU ops of a PyTorch profiler "
                                      "trace (Kineto or legacy JSON)");
  std::string source;
  for (const auto& f : traces) source += (source.empty() ? "" : ";") + f;
  for (const auto& f : options.et_files) source += ";" + f;
  for (const auto& f : loose) source += ";" + f;
  int64_t run = writer.begin_run(RunKind::Imported, source, std::string(to_string(formats[0])));
  // Importers report (bytes of this file consumed, its size); the caller sees the whole import.
  uint64_t total = 0, base = 0;
  std::vector<uint64_t> sizes;
  for (const auto& f : traces) {
    std::error_code ec;
    sizes.push_back(std::filesystem::file_size(f, ec));
    if (ec) sizes.back() = 0;
    total += sizes.back();
  }
  ImportOptions per_file = options;
  if (options.progress)
    per_file.progress = [&](uint64_t done, uint64_t) { options.progress(base + done, total); };
  ImportContext ctx{writer, run, per_file, stats, {}};
  std::vector<et::HostOps> host(with_et ? traces.size() : 0);
  if (with_et) ctx.host_ops = &host;
  for (size_t i = 0; i < traces.size(); ++i) {
    switch (formats[i]) {
      case TraceFormat::Kineto:
        import_kineto(ctx, traces[i], i);
        break;
      case TraceFormat::Nsys:
        import_nsys(ctx, traces[i], i);
        break;
      case TraceFormat::Chakra:
        import_chakra(ctx, traces[i], i);
        break;
      case TraceFormat::Legacy:
        import_legacy(ctx, traces[i], i);
        break;
      default: break;
    }
    ++stats.files;
    base += sizes[i];
    if (options.progress) options.progress(base, total);
  }
  if (with_et)
    for (auto& [path, i] : pair_ets(options.et_files, loose, traces, host)) {
      et::Trace t = et::parse(path);
      et::JoinReport rep = et::join_and_store(ctx, t, host[i]);
      stats.notes.push_back(rep.line());
      ++stats.files;
      stats.events += static_cast<int64_t>(t.nodes.size());
      stats.rows += rep.nodes + rep.tensors;
    }
  return run;
}

}  // namespace braid
