// The processes of one analysis and what they send one another. A job stored as one file per
// rank or node is analyzed by one process (this class as it is: everything is here) or by the
// processes of an MPI job (analysis/mpi_exchange.h), each loading some of the files: they
// exchange the ranks' collectives (keys and times) for matching and clock alignment, answer the
// critical path's questions about the ranks they hold, and gather the per-rank results, so that
// every process ends with the result a single process computes.
//
// Every process calls each exchange in the same order (the calls are collective, as MPI's).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace braid::analysis {

class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual int size() const { return 1; }   // processes
  virtual int index() const { return 0; }  // this process, 0 .. size() - 1
  // Every process's bytes, in process order.
  virtual std::vector<std::string> allgather(std::string bytes) { return {std::move(bytes)}; }
  // `root`'s bytes, on every process (the others' argument is ignored).
  virtual std::string broadcast(std::string bytes, int /*root*/) { return bytes; }
};

// What processes send: integers and doubles as the build stores them (the processes of one job
// run one build), strings with their length. WireIn throws braid::Error(Internal) past the end.
class WireOut {
 public:
  WireOut& i64(int64_t v) { return raw(&v, sizeof v); }
  WireOut& f64(double v) { return raw(&v, sizeof v); }
  WireOut& str(std::string_view s) {
    i64(static_cast<int64_t>(s.size()));
    b_.append(s.data(), s.size());
    return *this;
  }
  std::string take() { return std::move(b_); }

 private:
  WireOut& raw(const void* p, size_t n) {
    b_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string b_;
};

class WireIn {
 public:
  explicit WireIn(std::string_view b) : b_(b) {}
  int64_t i64() { return get<int64_t>(); }
  double f64() { return get<double>(); }
  std::string str();
  bool done() const { return at_ == b_.size(); }

 private:
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  void need(size_t n) const;
  std::string_view b_;
  size_t at_ = 0;
};

}  // namespace braid::analysis
