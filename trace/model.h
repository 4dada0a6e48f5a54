// The event model shared by importers, the capture agent, the store and the analyses.
// Records are plain structs of fixed-size fields; names are interned string ids, so a batch
// of records owns no heap memory per event.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace braid {

using Ns = int64_t;      // nanoseconds in the rank's own clock
using StrId = uint32_t;  // id in the `strings` table; 0 means "no string"

enum class RunKind : uint8_t { Captured, Imported, Replayed, Simulated };
std::string_view to_string(RunKind k);
std::optional<RunKind> run_kind_from_string(std::string_view s);

// Collective operations. The store keeps their names (to_string) as text.
enum class CollOp : uint8_t {
  Unknown,
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  Reduce,
  AllToAll,
  Send,
  Recv,
  SendRecv,  // a point-to-point kernel whose direction the trace does not say
  Gather,
  Scatter,
  Barrier,
  ManyToMany,  // grouped sends/receives to several peers (fused scatter / multicast)
};
inline constexpr int kNumCollOps = 14;
std::string_view to_string(CollOp op);
std::optional<CollOp> coll_op_from_string(std::string_view s);

// Kernel categories; stored as their integer code, with a `categories` lookup table.
// The classification rules live in trace/categories.cc and are pinned by tests.
enum class Category : uint8_t {
  Other = 0,
  Gemm = 1,
  Attention = 2,
  Elementwise = 3,  // elementwise, activation, norm, softmax, reductions that are not comm
  Memory = 4,       // memcpy / memset kernels and copy-like kernels
  CommAllReduce = 10,
  CommAllGather = 11,
  CommReduceScatter = 12,
  CommBroadcast = 13,
  CommReduce = 14,
  CommAllToAll = 15,
  CommSendRecv = 16,
  CommOther = 17,
};
std::string_view to_string(Category c);
std::optional<Category> category_from_string(std::string_view s);
inline bool is_comm(Category c) { return static_cast<uint8_t>(c) >= 10; }
// How time breakdowns and overlap count GPU activity (HTA's kernel types): communication (the
// comm.* categories), memory (memcpy / memset activity, which the `memcpys` table holds: it does
// not run kernels on the SMs) and computation: every kernel that is not communication, whatever
// its finer category (copy, transpose and layout kernels are `memory` for the kernel breakdown
// and the GUI's colours, but they occupy the SMs like any other kernel).
enum class TimeClass : uint8_t { Compute, Comm, Memory };
inline TimeClass time_class(Category kernel_category) {
  return is_comm(kernel_category) ? TimeClass::Comm : TimeClass::Compute;
}
Category comm_category(CollOp op);

// Normalized element types ("float32", "bfloat16", ...). Unknown names are kept verbatim.
std::string normalize_dtype(std::string_view name);
int dtype_size(std::string_view normalized);  // bytes per element, 0 if unknown

enum class ApiKind : uint8_t { CpuOp, Runtime, Driver, Python, Other };
std::string_view to_string(ApiKind k);

enum class MemKind : uint8_t { HtoD, DtoH, DtoD, HtoH, PtoP, Memset, Unknown };
std::string_view to_string(MemKind k);

enum class Severity : uint8_t { Info, Warning, Error };
std::string_view to_string(Severity s);

struct Kernel {
  int32_t rank = 0;
  int64_t stream = 0;
  Ns start = 0, end = 0;
  StrId name = 0;
  Category category = Category::Other;
  int64_t correlation = 0;  // CUPTI correlation id, 0 if unknown
  int64_t external_id = 0;  // framework (Kineto "External id") correlation, 0 if unknown
};

struct Memcpy {
  int32_t rank = 0;
  int64_t stream = 0;
  Ns start = 0, end = 0;
  MemKind kind = MemKind::Unknown;
  int64_t bytes = 0;
  StrId name = 0;
  int64_t correlation = 0;
};

// CPU-side activity: framework ops, CUDA runtime/driver calls, Python frames.
struct ApiCall {
  int32_t rank = 0;
  int64_t tid = 0;
  Ns start = 0, end = 0;
  StrId name = 0;
  ApiKind kind = ApiKind::Other;
  int64_t correlation = 0;
  int64_t external_id = 0;
};

// Annotation ranges (NVTX, PyTorch user annotations, ProfilerStep#N). `stream` is a thread id
// for CPU ranges and a CUDA stream for GPU-side ranges (on_gpu).
struct Range {
  int32_t rank = 0;
  int64_t stream = 0;
  bool on_gpu = false;
  Ns start = 0, end = 0;
  StrId name = 0;
  StrId domain = 0;
  StrId payload = 0;  // free-form payload text (NVTX payload, JSON args), 0 if none
};

struct Step {
  int32_t rank = 0;
  int64_t step = 0;
  Ns start = 0, end = 0;
};

// One collective (or point-to-point) operation as executed by one rank.
// Fields by size (8-byte, then 4-byte, then the op), so that it packs into 112 bytes: a large
// run holds millions (braid-view, analysis::load_skeleton).
struct Collective {
  int64_t seq = -1;  // per-communicator sequence number, -1 if the trace has none
  int64_t in_count = -1, out_count = -1;  // elements, -1 if unknown
  int64_t bytes = -1;   // nccl-tests "size": the larger of the in/out buffers, -1 if unknown
  int64_t stream = -1;  // -1: no GPU kernel was seen (times are CPU-side)
  Ns start = 0, end = 0;
  Ns enqueue = -1;         // host time of the launching call, -1 if unknown
  int64_t kernel_ref = 0;  // correlation id of the kernel that carried it
  int32_t rank = 0;
  StrId comm = 0;  // communicator identity shared by all its ranks (e.g. PG name)
  StrId dtype = 0;
  int32_t peer_or_root = -1;
  StrId algo = 0, proto = 0;
  int32_t channels = -1;
  int32_t group_size = -1;
  StrId name = 0;  // kernel name or CPU op name
  CollOp op = CollOp::Unknown;
};
static_assert(sizeof(Collective) == 112, "Collective packs into 112 bytes");

struct RankInfo {
  int32_t rank = 0;
  int32_t world_size = -1;
  std::string host;
  int64_t pid = -1;
  int32_t device = -1;
  std::string device_name;
  std::string backend;       // "nccl", "gloo", ...
  std::string nccl_version;
  std::string source;        // file the rank came from
  Ns clock_offset = 0;
  Ns offset_error = -1;
};

struct StreamInfo {
  int32_t rank = 0;
  int64_t stream = 0;
  bool gpu = true;
  std::string label;
};

struct Communicator {
  std::string comm;      // identity (matches Collective::comm text)
  int32_t nranks = -1;
  std::string ranks;     // JSON array of global ranks, "" if unknown
  std::string label;     // description, e.g. "default_pg"
  std::string backend;
};

struct Diagnostic {
  int32_t rank = -1;  // -1: the whole run
  Severity severity = Severity::Info;
  std::string code;   // stable machine-readable code, e.g. "kineto.unlinked_nccl_kernel"
  int64_t count = 1;
  std::string detail;
};

// A capture window as the agent opened and closed it on one rank (capture table
// `capture_windows`): host times in the rank's own clock. A window still open when the capture
// stopped ends at the stop.
struct CaptureWindow {
  int32_t rank = 0;
  Ns start = 0, end = 0;
};

// Rows of the two tables written by capture (docs/schema.md, "Tables added by braid record"):
// the arguments of each NCCL call as the application made it, and the proxy operations NCCL's
// profiler plugin reports. They live here, not in capture/, because merge and the readers copy
// them too.

// One NCCL API call (collective or point-to-point) on one rank.
struct NcclCallRow {
  int32_t rank = 0;
  StrId comm = 0;          // communicator identity shared by all its ranks
  int64_t seq = -1;        // per-communicator sequence number (the collectives.seq it joins)
  int64_t call_id = 0;     // process-unique id of the call
  int64_t group_id = 0;    // id of the ncclGroupStart/End group it was part of, 0 if none
  CollOp op = CollOp::Unknown;
  StrId redop = 0;         // "sum", "prod", "max", "min", "avg", "premulsum", 0 if none
  uint64_t sendbuff = 0, recvbuff = 0;
  int64_t count = 0;
  StrId dtype = 0;
  int32_t peer_or_root = -1;
  uint64_t stream_handle = 0;  // the cudaStream_t the application passed
  int64_t tid = 0;
  Ns enqueue = 0, ret = 0;     // host times of the call and its return
  int32_t result = 0;          // ncclResult_t
  int32_t comm_rank = -1, comm_size = -1;  // this process's rank in the communicator, its size
};

// One proxy operation (one channel of one collective on the network path).
struct ProxyOpRow {
  int32_t rank = 0;
  StrId comm = 0;
  int64_t seq = -1;     // the collective's sequence number, -1 if it could not be linked
  int64_t call_id = 0;  // the NCCL call it belongs to, 0 if it could not be linked
  int32_t channel = -1;
  int32_t peer = -1;
  bool is_send = false;
  int32_t steps = -1;
  int32_t chunk_size = -1;
  int64_t tid = 0;      // the proxy thread
  Ns start = 0, end = 0;
};

// Rows of the execution-trace tables (docs/schema.md, "Execution trace tables"; docs/import-et.md):
// the operators of a PyTorch execution trace (ET) that `braid import --et` read with a trace of the
// same run, each joined to the trace's CPU op it was (or not), and their tensor arguments.

// How an ET node was joined to a trace op.
enum class EtJoin : uint8_t {
  None,      // not joined
  RecordId,  // by record-function id (the trace's "Record function id" = the node's rf_id)
  Sequence,  // by sequence number and name (the trace's "Sequence number" = the node's seq_id)
  Order,     // by op-name order on the thread
};
std::string_view to_string(EtJoin j);
std::optional<EtJoin> et_join_from_string(std::string_view s);

// What an ET op does to data: computes (reads its inputs, writes its outputs), returns a view of an
// input (no data moves), allocates (writes nothing yet), communicates (c10d, gloo, NCCL, record
// of a collective's parameters), or annotates (a user or profiler scope, no tensors of its own).
enum class EtOpKind : uint8_t { Op, View, Alloc, Comm, Annotation };
std::string_view to_string(EtOpKind k);
std::optional<EtOpKind> et_op_kind_from_string(std::string_view s);

struct EtOp {
  int32_t rank = 0;
  int64_t node = 0;    // the ET node id (ids follow the order ops were entered)
  int64_t parent = 0;  // the node's parent id (its enclosing op, or the thread's root node)
  StrId name = 0;
  int64_t et_tid = 0;  // the ET's own thread number
  int64_t rf_id = -1, seq = -1;
  StrId schema = 0;  // the operator schema ("aten::add.Tensor(Tensor self, ...) -> Tensor")
  // The trace's CPU op it was joined to: its thread and host times (-1 when not joined), and the
  // step whose window holds it (-1: none).
  int64_t tid = -1;
  Ns op_start = -1, op_end = -1;
  int64_t step = -1;
  EtJoin join = EtJoin::None;
  EtOpKind kind = EtOpKind::Op;
};

// How a tensor argument's touched element range [lo, hi) was found.
enum class EtExtent : uint8_t {
  Strides,  // from the strides the ET recorded (schema 1.1.1 and later)
  View,     // derived through the view ops that made it (slice, transpose, as_strided, ...)
  Dense,    // a dense tensor (an op's fresh output, or one with no view in the ET): offset + numel
  Bound,    // a view whose layout the ET does not give: bounded by the tensor it views
};
std::string_view to_string(EtExtent e);
std::optional<EtExtent> et_extent_from_string(std::string_view s);

struct EtTensor {
  int32_t rank = 0;
  int64_t node = 0;
  int32_t arg = 0;    // argument position
  int32_t item = -1;  // position in a tensor-list argument, -1 for a plain tensor
  bool output = false;
  int64_t tensor = 0, storage = 0;  // the ET's ids (reused once freed, as PyTorch reuses memory)
  int64_t offset = 0, numel = 0;    // in elements of `itemsize` bytes
  int32_t itemsize = 0;
  StrId dtype = 0, device = 0;
  StrId shape = 0, strides = 0;  // JSON arrays ("[16,32]"); strides 0 when the ET has none
  int64_t lo = 0, hi = 0;        // the storage elements it touches: [lo, hi)
  EtExtent extent = EtExtent::Dense;
};

}  // namespace braid
