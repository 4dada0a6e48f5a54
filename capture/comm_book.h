// NCCL communicator bookkeeping, free of NCCL's headers: which communicator a handle is, the
// identity all of its ranks share, its members, and its per-communicator sequence numbers.
//
// Identity: a handle is a pointer, meaningless across processes. A communicator made from
// unique id(s) is named by a hash of the id bytes, which every rank passes identically; one made
// by splitting (or shrinking) a parent is named after the parent's identity, the how-many-th
// split of that parent it came from (every member splits its parent in the same order) and its
// colour. Both are therefore equal on all ranks and differ between communicators.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace braid::capture {

struct CommRecord {
  std::string identity;
  std::string parent;   // identity of the communicator it was split from, "" if none
  std::string how;      // "uid", "uids", "split", "shrink", "all"
  // -1 until known: a non-blocking communicator's shape is learnt after ncclCommSplit returns
  // (from NCCL's profiler plugin, or asked again at its first call); read by the writer thread.
  std::atomic<int> rank{-1}, nranks{-1};
  int device = -1;
  // Taken by calls as they are recorded (through const pointers too: records in flight keep one).
  mutable std::atomic<int64_t> next_seq{0};
  // The sequence number of the next call: collectives count per communicator (next_seq);
  // point-to-point calls per (peer, direction), so that the n-th send from r to p and the n-th
  // receive on p from r (the pair NCCL matches) carry the same number whatever else either rank
  // does on the communicator (pipeline stages send and receive different amounts).
  int64_t take_seq(bool p2p, int peer, bool send) const;
  std::atomic<int64_t> children{0};  // splits/shrinks made from it so far
  bool destroyed = false;

 private:
  mutable std::mutex p2p_mu_;
  mutable std::unordered_map<int64_t, int64_t> p2p_next_;  // (peer, direction) -> next seq
};

class CommBook {
 public:
  // "nccl:" + 16 hex digits of a 64-bit FNV-1a hash of the bytes.
  static std::string identity_from_unique_ids(const void* bytes, size_t n);

  // Registers (or re-registers) `comm`. The record lives until the process ends, so pointers to
  // it stay valid for records still in flight after ncclCommDestroy.
  CommRecord* add(const void* comm, std::string identity, std::string how, int rank, int nranks,
                  std::string parent = "");
  // The identity of the next communicator made from `parent` by `how` ("split", "shrink") with
  // `color`; counts the call even when the caller gets no communicator (NCCL_SPLIT_NOCOLOR).
  std::string child_identity(const void* parent, std::string_view how, int64_t color);
  // The record of a live handle; an unknown handle (made before capture began) is registered
  // under a process-local identity so its calls still get sequence numbers.
  CommRecord* find_or_add_unknown(const void* comm);
  CommRecord* find(const void* comm) const;
  void destroyed(const void* comm);

  // The live communicator with the most ranks (ties: the first made), or nullptr.
  const CommRecord* largest() const;
  std::vector<const CommRecord*> all() const;

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<const void*, CommRecord*> live_;
  std::vector<std::unique_ptr<CommRecord>> records_;  // every record ever made, in order
};

}  // namespace braid::capture
