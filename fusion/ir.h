// The schedule IR (../shared/DESIGN.md, "The schedule IR"): per rank, ordered lists of operations
// per stream, events between streams, and collectives matched across ranks by (communicator, order
// within the communicator). Buffers are named per rank and collectives reference (buffer, offset,
// count) slices, so rewrite passes can follow data from one operation to the next.
//
// Every op carries an id that is unique in the schedule and survives rewrites of other ops, so
// passes, opportunities and diffs can name ops without depending on their position.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "trace/model.h"

namespace braid::fusion {

inline constexpr std::string_view kScheduleFormat = "braid-schedule/1";

// A contiguous range of elements of one rank's buffer. An empty buffer name means "no slice"
// (e.g. the input of a recv).
struct Slice {
  std::string buffer;
  int64_t offset = 0;
  int64_t count = 0;

  bool empty() const { return buffer.empty(); }
  int64_t end() const { return offset + count; }
  // True when both name the same buffer and share at least one element.
  bool overlaps(const Slice& o) const;
  // The sub-slice [offset + off, offset + off + n) of this slice.
  Slice sub(int64_t off, int64_t n) const { return {buffer, offset + off, n}; }
  bool operator==(const Slice&) const = default;
};

// One peer's part of a manytomany: `count` elements starting at `offset`, relative to the op's
// `in` slice (sends) or `out` slice (recvs). `peer` is a global rank.
struct PeerChunk {
  int32_t peer = -1;
  int64_t offset = 0;
  int64_t count = 0;
  bool operator==(const PeerChunk&) const = default;
};

struct Compute {
  std::string label;
  Ns duration_ns = 0;
  std::vector<Slice> reads, writes;
  bool opaque = false;  // may touch any buffer (compute lifted from a trace)
  // A communicator id, or empty: every member of it runs this compute as the same function (its
  // parameters are replicated too, as Megatron's layer norms and residual adds under TP), so
  // equal inputs give equal outputs on all of them. Data semantics use value_rank().
  std::string replicated;
  // Token-row semantics (docs/schedule-ir.md, "Row-wise compute"); empty: positional. One row
  // count per read (0: read whole, e.g. weights) and per write. A row's output depends on the
  // rows it reads, not on where they are stored, so a rewrite may compute any subset of rows,
  // in any buffer, and get the same values for them.
  std::vector<int64_t> read_rows, write_rows;
  // {a, b}: every row-wise slice forms a * b equal blocks; block x * b + y of a write reads
  // block y * a + x of the reads listed in `transposed_reads` and block x * b + y of the others
  // (the MoE permute between token order and destination order). Empty: no blocks.
  std::vector<int64_t> transpose;
  std::vector<int64_t> transposed_reads;
  // The writes are sums over the per-row reads' rows (weight gradients); a read equal to a
  // write slice is that write's accumulator.
  bool sum_rows = false;
  // "add": every write is the element-wise sum of the reads (mod 2^64). Empty: hashed.
  std::string fn;
  bool row_wise() const { return !write_rows.empty(); }
  bool operator==(const Compute&) const = default;
};

// One rank's part of a collective or point-to-point operation. `count` follows NCCL: elements
// per rank for allreduce/broadcast/reduce/send/recv, the per-rank send count for allgather, the
// per-rank receive count for reducescatter, the per-peer block for alltoall; unused (0) for
// manytomany, whose counts are per peer. Ranks (`root`, `peer`, chunk peers) are global ranks.
struct Collective {
  CollOp op = CollOp::Unknown;
  std::string comm;
  std::string dtype;
  int64_t count = 0;
  Slice in, out;
  int32_t root = -1;                    // broadcast, reduce
  int32_t peer = -1;                    // send, recv
  std::vector<PeerChunk> sends, recvs;  // manytomany
  std::string label;
  bool operator==(const Collective&) const = default;
};

struct Delay {
  Ns duration_ns = 0;  // a host-side gap
  bool operator==(const Delay&) const = default;
};

// Events are single-assignment per rank: one record, any number of waits on any stream of the
// same rank. A wait completes once the record has executed.
struct Record {
  std::string event;
  bool operator==(const Record&) const = default;
};
struct Wait {
  std::string event;
  bool operator==(const Wait&) const = default;
};

enum class OpKind : uint8_t { Compute, Collective, Delay, Record, Wait };
std::string_view to_string(OpKind k);

struct Op {
  int64_t id = -1;
  std::variant<Compute, Collective, Delay, Record, Wait> body;
  // Ids of the ops of the parent schedule this op replaces (set by rewrite passes, so the GUI and
  // reports can link a fused op to what it stands for); empty for ops carried over unchanged.
  std::vector<int64_t> replaces;

  OpKind kind() const { return static_cast<OpKind>(body.index()); }
  Compute* compute() { return std::get_if<Compute>(&body); }
  const Compute* compute() const { return std::get_if<Compute>(&body); }
  Collective* collective() { return std::get_if<Collective>(&body); }
  const Collective* collective() const { return std::get_if<Collective>(&body); }
  const Delay* delay() const { return std::get_if<Delay>(&body); }
  const Record* record() const { return std::get_if<Record>(&body); }
  const Wait* wait() const { return std::get_if<Wait>(&body); }
  bool operator==(const Op&) const = default;
};

struct Buffer {
  std::string name;
  std::string dtype;
  int64_t size = 0;  // elements
  // A communicator id, or empty: the buffer starts with the same data on every member of it
  // (e.g. the embedding output every TP rank holds).
  std::string replicated;
  bool operator==(const Buffer&) const = default;
};

struct Stream {
  std::string name;
  std::vector<Op> ops;
  bool operator==(const Stream&) const = default;
};

struct RankSchedule {
  int32_t rank = 0;
  std::vector<Buffer> buffers;
  // Buffers whose final contents are the step's result on this rank (gradients, outputs). A
  // rewrite must leave them bit-identical (the interpreter's and replay's data check compare
  // them); other buffers are scratch a pass may change. Empty: every buffer is an output.
  std::vector<std::string> outputs;
  std::vector<Stream> streams;

  const Buffer* find_buffer(std::string_view name) const;
  bool operator==(const RankSchedule&) const = default;
};

struct Comm {
  std::string id;
  std::vector<int32_t> ranks;  // global ranks in communicator order

  // Position of `rank` in the communicator, -1 if it is not a member.
  int index_of(int32_t rank) const;
  bool operator==(const Comm&) const = default;
};

// Where an op lives: rank, stream index, position in the stream. Positions change when a pass
// inserts or removes ops; ids do not.
struct OpRef {
  int32_t rank = -1;
  int32_t stream = -1;
  int32_t index = -1;
  bool valid() const { return rank >= 0; }
  auto operator<=>(const OpRef&) const = default;
};

// The trace run (and step, -1: the whole run) a lifted schedule came from; run -1 when the
// schedule was not lifted. fusion::lift sets it, the passes keep it (a fused schedule names it
// too), and replay finds its original by it. JSON: "lifted_from": {"run", "step"}.
struct LiftSource {
  int64_t run = -1;
  int64_t step = -1;
  bool operator==(const LiftSource&) const = default;
};

// Rank symmetry (docs/schedule-ir.md, "Rank classes"): the schedule is invariant under the
// rank permutation pi that, within each block of `block` consecutive ranks, moves every rank
// `shift` places on, cyclically (pi(r) = b + (r - b + shift) mod block, b = r - r mod block):
// rank pi(r)'s schedule is rank r's with every rank number p read as pi(p), every communicator c
// as pi(c) and every op id x as x + id_stride. The data-parallel replicas of a Megatron layout
// (rank = tp + tp*(dp + dp*stage)) are such a symmetry with block tp*dp and shift tp (tp*ep
// with expert parallelism). A schedule with a symmetry stores only its representatives, the
// ranks r with r mod block < shift (one per rank class); the other ranks are present in
// `ranks` but empty, and fusion/symmetry.h expands them. block 0: no symmetry.
struct Symmetry {
  int32_t block = 0;
  int32_t shift = 0;
  int64_t id_stride = 0;  // image i of op id x is x + i * id_stride; every stored id is below it

  bool on() const { return block > 0; }
  // Ranks per class (the orbit of a representative), 1 without a symmetry.
  int32_t orbit() const { return on() ? block / shift : 1; }
  bool stored(int32_t r) const { return !on() || r % block < shift; }
  int32_t representative(int32_t r) const { return on() ? r - r % block + r % block % shift : r; }
  // i with pi^i(representative(r)) == r.
  int32_t image_index(int32_t r) const { return on() ? r % block / shift : 0; }
  // pi^i(r).
  int32_t image(int32_t r, int64_t i) const {
    if (!on()) return r;
    const int32_t b = r - r % block;
    return b + static_cast<int32_t>((r % block + i % orbit() * shift) % block);
  }
  bool operator==(const Symmetry&) const = default;
};

struct Schedule {
  std::string name;
  std::vector<std::string> provenance;  // assumptions made when the schedule was built
  LiftSource lifted;
  Symmetry symmetry;  // JSON: "symmetry": {"block", "shift", "id_stride"}, when on
  std::vector<Comm> comms;
  std::vector<RankSchedule> ranks;  // ranks[i].rank == i; with a symmetry, images are empty

  const Comm* find_comm(std::string_view id) const;
  const Op& op(OpRef r) const { return ranks[r.rank].streams[r.stream].ops[r.index]; }
  Op& op(OpRef r) { return ranks[r.rank].streams[r.stream].ops[r.index]; }
  std::optional<OpRef> find_op(int64_t id) const;  // indexed; a stale index is rebuilt
  int64_t next_op_id() const;                      // 1 + the largest id, 0 when empty
  // The id for the next new op, to be incremented by whoever takes it (make_op(next, ...) does):
  // above every id in the schedule and every id it handed out before, without a scan per
  // rewrite. It rescans when the schedule has more ops than the ids it handed out explain (ops
  // added with ids of their own).
  int64_t& op_id_counter();
  size_t op_count() const;

  // Building helpers. add_rank appends ranks up to `rank`; add_stream returns the stream index;
  // append gives the op the next free id and returns it.
  RankSchedule& add_rank(int32_t rank);
  int add_stream(int32_t rank, std::string name);
  void add_buffer(int32_t rank, std::string name, std::string dtype, int64_t size);
  int64_t append(int32_t rank, int stream, decltype(Op::body) body);

  bool operator==(const Schedule& o) const {
    return name == o.name && provenance == o.provenance && lifted == o.lifted &&
           symmetry == o.symmetry && comms == o.comms && ranks == o.ranks;
  }

 private:
  // op_id_counter's state: the counter, its value and the op count when last checked (SIZE_MAX:
  // never), so a check knows how many ids were handed out since.
  int64_t id_counter_ = 0;
  int64_t id_counter_checked_ = 0;
  size_t id_counter_ops_ = SIZE_MAX;
  // find_op's index of op positions by id: rebuilt when a looked-up position no longer holds
  // the id (rewrites insert and remove ops), so passes that look ops up by id stay linear.
  mutable std::unordered_map<int64_t, OpRef> op_index_;
};

// The buffer elements an op reads and writes on its rank. `any` marks opaque compute, which may
// touch every buffer. Collective slices are those this rank actually uses (e.g. a broadcast's
// `in` only on its root, a manytomany's per-peer chunks).
struct Access {
  std::vector<Slice> reads, writes;
  bool any = false;
};
Access access_of(const Schedule& s, int32_t rank, const Op& op);

// Ops of `rank` that read (consumers) or write (producers) an element of `slice`, opaque compute
// included, in (stream, position) order.
std::vector<OpRef> consumers_of(const Schedule& s, int32_t rank, const Slice& slice);
std::vector<OpRef> producers_of(const Schedule& s, int32_t rank, const Slice& slice);

// Sizes of a collective on one rank, nccl-tests' "size" (the larger of its input and output):
// in elements on a communicator of `comm_size` ranks (n × count for all-gather, reduce-scatter
// and all-to-all; a manytomany's sends in total; else count), and in bytes with the dtype's size
// (dtype_bytes_of) on the communicator the schedule gives it (1 rank when it names none). Every
// layer sizes messages with these.
int64_t collective_elements(const Collective& c, int64_t comm_size);
int64_t collective_bytes(const Schedule& s, const Collective& c);
// Bytes per element of a schedule's dtype. The one rule for an unknown dtype: a schedule may name
// only dtypes braid knows (trace/model.h dtype_size; validate() refuses others, naming them), so
// this throws braid::Error(Internal) for an unknown one. Trace data, where a size may simply be
// unknown, use dtype_size's 0.
int64_t dtype_bytes_of(const std::string& dtype);

// "rank 1 stream 'comm' op 3 (id 12: allreduce 'grad' on 'dp')", for messages.
std::string describe(const Schedule& s, OpRef r);

// JSON (`braid-schedule/1`). The writer is deterministic: fixed key order, integers only,
// 2-space indentation, one communicator / buffer / op per line. parse_schedule(to_json(s)) == s
// and to_json(parse_schedule(t)) == t for canonical text t. Parse errors throw braid::Error
// (BadFormat, or Unsupported for another braid-schedule version) naming `source` and the JSON
// path of the problem, e.g. "$.ranks[0].streams[1].ops[2].count".
std::string to_json(const Schedule& s);
Schedule parse_schedule(std::string_view json, std::string_view source = "<schedule>");
Schedule load_schedule(const std::string& path);
// Writes to a temporary file and renames it, so a failure leaves no half-written file.
void save_schedule(const Schedule& s, const std::string& path);

}  // namespace braid::fusion
