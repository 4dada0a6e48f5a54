// Where a capture's records go. The agent's writer thread is the only caller, so a sink needs no
// locking of its own. The file sink writes a `.braid` file durably as it goes; the node daemon
// (its own issue) will add a sink that forwards records instead.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "capture/records.h"
#include "trace/model.h"

namespace braid::capture {

class Sink {
 public:
  virtual ~Sink() = default;

  virtual StrId intern(std::string_view s) = 0;

  virtual void add(const Kernel& k) = 0;
  virtual void add(const Memcpy& m) = 0;
  virtual void add(const ApiCall& a) = 0;
  virtual void add(const Range& r) = 0;
  virtual void add(const Collective& c) = 0;
  virtual void add(const Step& s) = 0;
  virtual void add(const NcclCallRow& c) = 0;
  virtual void add(const ProxyOpRow& p) = 0;
  // A capture window (a later call for the same rank and start replaces the earlier one).
  virtual void add(const CaptureWindow& w) = 0;
  // The window stored as (w.rank, old_start) now starts at w.start (its row grew to cover a
  // record from before its opening): that row is replaced by `w`.
  virtual void replace_window(Ns old_start, const CaptureWindow& w) = 0;

  // Small tables: a later call for the same key replaces the earlier one.
  virtual void set_rank_info(const RankInfo& r) = 0;
  virtual void add_stream(const StreamInfo& s) = 0;
  virtual void add_communicator(const Communicator& c) = 0;
  // Sets the count of (rank, code); the caller keeps the running totals.
  virtual void set_diagnostic(const Diagnostic& d) = 0;
  virtual void set_meta(std::string_view key, std::string_view value) = 0;
  // The process learnt its rank late (from its largest communicator): rows written under
  // `from` are moved to `to`.
  virtual void renumber_rank(int32_t from, int32_t to) = 0;

  // Makes everything added so far durable: a crash or SIGKILL after it returns loses none of it.
  virtual void checkpoint() = 0;
  // Final checkpoint; the output is complete. Idempotent.
  virtual void close() = 0;
};

// A Sink whose event rows (every add()) all go one way: to Derived's
// `template <typename Row> void row(const Row& r)` (a friend of RowSink<Derived> when private).
// The row sinks implement the rest of Sink themselves.
template <typename Derived>
class RowSink : public Sink {
 public:
  void add(const Kernel& r) final { self().row(r); }
  void add(const Memcpy& r) final { self().row(r); }
  void add(const ApiCall& r) final { self().row(r); }
  void add(const Range& r) final { self().row(r); }
  void add(const Collective& r) final { self().row(r); }
  void add(const Step& r) final { self().row(r); }
  void add(const NcclCallRow& r) final { self().row(r); }
  void add(const ProxyOpRow& r) final { self().row(r); }
  void add(const CaptureWindow& r) final { self().row(r); }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

// The rank of a sink's state key: the key itself, or the first member of a pair or tuple.
inline int32_t& key_rank(int32_t& k) { return k; }
template <typename T>
int32_t& key_rank(std::pair<int32_t, T>& k) {
  return k.first;
}
template <typename... T>
int32_t& key_rank(std::tuple<int32_t, T...>& k) {
  return std::get<0>(k);
}

// Sink::renumber_rank on the state a sink keeps in maps keyed by rank first (rank infos,
// streams, diagnostics): every entry of rank `from` moves to rank `to`, replacing one already
// there, and a value with a rank of its own (RankInfo, StreamInfo, Diagnostic) is renumbered.
template <typename Map>
void renumber_keys(Map& m, int32_t from, int32_t to) {
  Map out, moved;
  for (auto& [k, v] : m) {
    typename Map::key_type key = k;
    if (key_rank(key) != from) {
      out.emplace(std::move(key), std::move(v));
      continue;
    }
    key_rank(key) = to;
    if constexpr (requires { v.rank; }) v.rank = to;
    moved.emplace(std::move(key), std::move(v));
  }
  for (auto& [k, v] : moved) out.insert_or_assign(k, std::move(v));
  m.swap(out);
}

}  // namespace braid::capture
