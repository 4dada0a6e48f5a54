// PyTorch execution traces (ET): what `braid import --et` reads beside a Kineto or legacy
// profiler trace of the same run (docs/import-et.md).
//
// An ET lists every operator the framework ran during its window (usually one iteration), with
// its input and output tensors as [tensor id, storage id, offset, numel, element size, device],
// their shapes (and strides from schema 1.1.1 on), its record-function id, sequence number and
// thread. Three parts, one file each:
//   et_parse.cc   the file (schema 1.0.x, 1.1.x, PyTorch 1.13's execution graph; plain or .gz)
//                 into Nodes;
//   et_layout.cc  the storage elements each tensor argument touches (strides, views);
//   et_join.cc    the join of the nodes to the trace's CPU ops and the rows it stores.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trace/model.h"

namespace braid {

struct ImportContext;

namespace et {

// One tensor value as the ET gives it, and the range of its storage it touches (et_layout.cc).
struct TensorValue {
  int64_t tensor = 0, storage = 0, offset = 0, numel = 0;
  int32_t itemsize = 0;
  std::string device, dtype;  // dtype normalized (float32, int64, ...)
  std::vector<int64_t> shape;
  std::optional<std::vector<int64_t>> strides;  // as recorded (schema 1.1.1+) or derived
  // Filled by resolve_layouts.
  int64_t lo = 0, hi = 0;
  EtExtent extent = EtExtent::Dense;
  bool defined() const { return storage != 0; }
};

// One argument of a node.
struct Arg {
  enum class Kind : uint8_t { Other, Tensor, TensorList, Int, IntList };
  Kind kind = Kind::Other;
  std::vector<TensorValue> tensors;  // one for Tensor
  int64_t i = 0;
  std::vector<int64_t> ints;
};

struct Node {
  int64_t id = 0, parent = 0;
  std::string name, schema;
  int64_t tid = 0, rf_id = -1, seq = -1;
  std::vector<Arg> inputs, outputs;
  bool root = false;  // the trace's process and thread root nodes
};

struct Trace {
  std::string path, schema;
  int64_t pid = -1;
  int64_t start_ms = -1, finish_ms = -1;  // the observer's start and stop (steady clock, ms)
  std::vector<Node> nodes;  // in file order (PyTorch writes a node when its op returns)
};

// Whether the first bytes of a (decompressed) file are a PyTorch ET: a JSON object whose first
// keys include "schema" and "nodes" but no "workload_graph" (Chakra's JSON) or "traceEvents".
bool looks_like_et(std::string_view head);

// Parses `path` (plain or gzip). Throws braid::Error naming the file: BadFormat for malformed or
// truncated JSON and for JSON that is not an ET, Unsupported for a schema major other than 1.
Trace parse(const std::string& path);

// The pid the ET names, from its first bytes (-1: none); for pairing ETs with traces by process.
int64_t peek_pid(const std::string& path);

// Fills lo, hi, extent and derived strides of every tensor value (et_layout.cc). Counts go to
// `assumed` (tensors first seen with no strides and no producing op, taken as dense) and
// `bounded` (views bounded by the tensor they view).
void resolve_layouts(Trace& t, int64_t& assumed, int64_t& bounded);

// Whether a node's op returns a view of an input (the schema's return is an alias such as
// "Tensor(a)", or a known view op by name when the ET has no schema).
bool is_view_op(const Node& n);

// What the node's op does to data (EtOpKind): by its name and schema.
EtOpKind kind_of(const Node& n);

// A CPU op of the trace an ET is joined to: what the Kineto and legacy importers keep of each
// (ImportContext::host_ops) when execution traces are given.
struct HostOp {
  int64_t tid = 0;
  Ns start = 0, end = 0;
  StrId name = 0;  // interned in the import's writer
  int64_t rf_id = -1, seq = -1;
};
struct HostOps {
  int32_t rank = -1;  // the rank the trace file was imported as
  int64_t pid = -1;   // the process the trace names, -1: none
  std::string path;
  std::vector<HostOp> ops;
  std::vector<Step> steps;
};

// What the join of one ET found, for `braid import`'s summary.
struct JoinReport {
  std::string et_path, trace_path;
  int32_t rank = -1;
  int64_t nodes = 0, joined = 0, tensors = 0;
  EtJoin how = EtJoin::None;
  std::vector<int64_t> steps;  // steps holding the joined ops (the iteration the ET covers)
  std::string line() const;    // "rank 0: 925 of 931 ET ops joined by op order (step 1) ..."
};

// Joins `t` to `host` and writes the et_ops / et_tensors rows and the et.* diagnostics through
// `ctx`. Throws braid::Error naming both files when the ET is not of that trace's run (another
// process, or no op sequence matches).
JoinReport join_and_store(ImportContext& ctx, Trace& t, const HostOps& host);

}  // namespace et
}  // namespace braid
