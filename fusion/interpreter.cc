#include "fusion/interpreter.h"

#include <algorithm>
#include <set>

#include "fusion/symmetry.h"
#include "fusion/validate.h"
#include "trace/error.h"

namespace braid::fusion {

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t mix(uint64_t h, uint64_t v) { return splitmix(h ^ splitmix(v)); }

uint64_t hash_str(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

class Machine {
 public:
  Machine(const Schedule& s, const Matching& m, const InterpreterOptions& opt) : s_(s), m_(m) {
    const size_t n = s.ranks.size();
    result_.buffers.resize(n);
    pc_.resize(n);
    arrived_at_pc_.resize(n);
    recorded_.resize(n);
    arrived_.assign(m.groups.size(), 0);
    for (size_t r = 0; r < n; ++r) {
      for (const Buffer& b : s.ranks[r].buffers) {
        auto& v = result_.buffers[r][b.name];
        v.resize(static_cast<size_t>(b.size));
        const int32_t vr = value_rank(s, static_cast<int32_t>(r), b.replicated);
        if (!opt.init) {
          fill_initial_values(vr, b.name, v.data(), b.size);
          continue;
        }
        for (int64_t i = 0; i < b.size; ++i) v[i] = opt.init(vr, b.name, i);
      }
      pc_[r].assign(s.ranks[r].streams.size(), 0);
      arrived_at_pc_[r].assign(s.ranks[r].streams.size(), false);
    }
  }

  Interpretation run() {
    bool progress = true;
    while (progress) {
      progress = false;
      for (int32_t r = 0; r < static_cast<int32_t>(s_.ranks.size()); ++r)
        for (int32_t st = 0; st < static_cast<int32_t>(s_.ranks[r].streams.size()); ++st)
          progress |= advance(r, st);
    }
    for (int32_t r = 0; r < static_cast<int32_t>(s_.ranks.size()); ++r)
      for (int32_t st = 0; st < static_cast<int32_t>(s_.ranks[r].streams.size()); ++st)
        if (pc_[r][st] < static_cast<int32_t>(s_.ranks[r].streams[st].ops.size())) {
          result_.deadlocked = true;
          OpRef ref{r, st, pc_[r][st]};
          result_.stuck.push_back({ref, describe(s_, ref), why_stuck(ref)});
        }
    return std::move(result_);
  }

 private:
  // Runs stream (r, st) as far as it can; true when anything executed.
  bool advance(int32_t r, int32_t st) {
    const auto& ops = s_.ranks[r].streams[st].ops;
    bool progress = false;
    while (pc_[r][st] < static_cast<int32_t>(ops.size())) {
      OpRef ref{r, st, pc_[r][st]};
      const Op& op = ops[ref.index];
      if (const Compute* c = op.compute()) {
        if (!c->opaque) compute(r, *c);
      } else if (const Record* e = op.record()) {
        recorded_[r].insert(e->event);
      } else if (const Wait* w = op.wait()) {
        if (!recorded_[r].count(w->event)) break;
      } else if (op.collective()) {
        int g = m_.group_of(ref);
        if (g < 0) break;
        if (!arrived_at_pc_[r][st]) {
          arrived_at_pc_[r][st] = true;
          ++arrived_[g];
        }
        const MatchGroup& grp = m_.groups[g];
        if (arrived_[g] < static_cast<int>(grp.members.size())) break;
        collective(grp);
        for (const OpRef& mem : grp.members) {
          ++pc_[mem.rank][mem.stream];
          arrived_at_pc_[mem.rank][mem.stream] = false;
        }
        result_.executed += static_cast<int64_t>(grp.members.size());
        progress = true;
        continue;
      }
      ++pc_[r][st];
      ++result_.executed;
      progress = true;
    }
    return progress;
  }

  std::span<const int64_t> view(int32_t r, const Slice& sl) const {
    return {result_.buffers[r].at(sl.buffer).data() + sl.offset, static_cast<size_t>(sl.count)};
  }
  std::vector<int64_t> read(int32_t r, const Slice& sl) const {
    const std::span<const int64_t> v = view(r, sl);
    return std::vector<int64_t>(v.begin(), v.end());
  }
  void write(int32_t r, const Slice& sl, const int64_t* data) {
    auto& v = result_.buffers[r].at(sl.buffer);
    std::copy(data, data + sl.count, v.begin() + sl.offset);
  }

  void compute(int32_t r, const Compute& c) {
    std::vector<std::span<const int64_t>> in;
    for (const Slice& sl : c.reads) in.push_back(view(r, sl));
    const std::vector<std::vector<int64_t>> out = compute_outputs(s_, r, c, in);
    for (size_t k = 0; k < c.writes.size(); ++k) write(r, c.writes[k], out[k].data());
  }

  static std::vector<int64_t> sum(const std::vector<std::vector<int64_t>>& xs) {
    std::vector<uint64_t> acc(xs.empty() ? 0 : xs[0].size(), 0);
    for (const auto& x : xs)
      for (size_t i = 0; i < acc.size(); ++i) acc[i] += static_cast<uint64_t>(x[i]);
    return std::vector<int64_t>(acc.begin(), acc.end());
  }

  void collective(const MatchGroup& g) {
    std::vector<const Collective*> cs;
    for (const OpRef& r : g.members) cs.push_back(s_.op(r).collective());
    const Collective& c0 = *cs[0];
    const size_t n = cs.size();
    const int64_t k = c0.count;
    // Inputs first: a collective may run in place.
    std::vector<std::vector<int64_t>> in(n);
    for (size_t i = 0; i < n; ++i)
      if (!cs[i]->in.empty()) in[i] = read(g.members[i].rank, cs[i]->in);
    auto rank = [&](size_t i) { return g.members[i].rank; };
    switch (g.op) {
      case CollOp::AllReduce: {
        auto total = sum(in);
        for (size_t i = 0; i < n; ++i) write(rank(i), cs[i]->out, total.data());
        break;
      }
      case CollOp::AllGather: {
        std::vector<int64_t> all;
        for (const auto& x : in) all.insert(all.end(), x.begin(), x.end());
        for (size_t i = 0; i < n; ++i) write(rank(i), cs[i]->out, all.data());
        break;
      }
      case CollOp::ReduceScatter: {
        auto total = sum(in);
        for (size_t i = 0; i < n; ++i) write(rank(i), cs[i]->out, total.data() + i * k);
        break;
      }
      case CollOp::Broadcast: {
        const std::vector<int64_t>* src = nullptr;
        for (size_t i = 0; i < n; ++i)
          if (rank(i) == c0.root) src = &in[i];
        for (size_t i = 0; i < n; ++i) write(rank(i), cs[i]->out, src->data());
        break;
      }
      case CollOp::Reduce: {
        auto total = sum(in);
        for (size_t i = 0; i < n; ++i)
          if (rank(i) == c0.root) write(rank(i), cs[i]->out, total.data());
        break;
      }
      case CollOp::AllToAll: {
        // Block j of member i's output is block i of member j's input.
        for (size_t i = 0; i < n; ++i) {
          std::vector<int64_t> v(n * k);
          for (size_t j = 0; j < n; ++j)
            std::copy(in[j].begin() + i * k, in[j].begin() + (i + 1) * k, v.begin() + j * k);
          write(rank(i), cs[i]->out, v.data());
        }
        break;
      }
      case CollOp::Send:  // {send, recv}
        write(rank(1), cs[1]->out, in[0].data());
        break;
      case CollOp::ManyToMany: {
        std::vector<std::pair<int32_t, std::vector<int64_t>>> writes;
        for (size_t b = 0; b < n; ++b) {
          std::map<int32_t, int> seen;  // recv chunks already taken per sender
          for (const PeerChunk& rc : cs[b]->recvs) {
            int nth = seen[rc.peer]++;
            for (size_t a = 0; a < n; ++a) {
              if (rank(a) != rc.peer) continue;
              for (const PeerChunk& sc : cs[a]->sends)
                if (sc.peer == rank(b) && nth-- == 0) {
                  write_chunk(rank(b), cs[b]->out.sub(rc.offset, rc.count),
                              in[a].data() + sc.offset);
                  break;
                }
            }
          }
        }
        break;
      }
      default:
        break;  // validation rejects other ops
    }
  }
  // Writes of manytomany chunks; inputs were all read before the first write.
  void write_chunk(int32_t r, const Slice& sl, const int64_t* data) { write(r, sl, data); }

  std::string why_stuck(OpRef ref) const {
    const Op& op = s_.op(ref);
    if (const Wait* w = op.wait()) {
      for (int32_t st = 0; st < static_cast<int32_t>(s_.ranks[ref.rank].streams.size()); ++st) {
        const auto& ops = s_.ranks[ref.rank].streams[st].ops;
        for (int32_t i = 0; i < static_cast<int32_t>(ops.size()); ++i)
          if (const Record* e = ops[i].record(); e && e->event == w->event)
            return "waits for event '" + w->event + "', recorded by " +
                   describe(s_, {ref.rank, st, i}) + ", which has not run";
      }
      return "waits for event '" + w->event + "', which is never recorded";
    }
    int g = m_.group_of(ref);
    if (g < 0) return "has no matching partner";
    std::string t = "waits for";
    for (const OpRef& mem : m_.groups[g].members) {
      if (pc_[mem.rank][mem.stream] == mem.index && arrived_at_pc_[mem.rank][mem.stream])
        continue;
      OpRef at{mem.rank, mem.stream, pc_[mem.rank][mem.stream]};
      t += " rank " + std::to_string(mem.rank) + " (blocked at " + describe(s_, at) + ")";
    }
    return t;
  }

  const Schedule& s_;
  const Matching& m_;
  Interpretation result_;
  std::vector<std::vector<int32_t>> pc_;
  std::vector<std::vector<bool>> arrived_at_pc_;
  std::vector<std::set<std::string>> recorded_;
  std::vector<int> arrived_;
};

}  // namespace

int32_t value_rank(const Schedule& s, int32_t rank, const std::string& replicated) {
  if (replicated.empty()) return rank;
  const Comm* c = s.find_comm(replicated);
  return c && !c->ranks.empty() ? c->ranks[0] : rank;
}

int64_t initial_value(int32_t rank, std::string_view buffer, int64_t index) {
  uint64_t h = mix(mix(hash_str(buffer), static_cast<uint64_t>(rank)), static_cast<uint64_t>(index));
  return static_cast<int64_t>(h % 1000000);
}

void fill_initial_values(int32_t rank, std::string_view buffer, int64_t* out, int64_t n) {
  const uint64_t seed = mix(hash_str(buffer), static_cast<uint64_t>(rank));
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<int64_t>(mix(seed, static_cast<uint64_t>(i)) % 1000000);
}

namespace {

// compute_value in two parts: the seed of (label, rank, buffer), hashed once per write, and
// the element's value from it.
uint64_t value_seed(std::string_view label, int32_t rank, std::string_view buffer) {
  return mix(mix(hash_str(label), static_cast<uint64_t>(rank)), hash_str(buffer));
}

template <typename Inputs>
int64_t value_from_seed(uint64_t seed, int64_t index, const Inputs& inputs) {
  uint64_t h = mix(seed, static_cast<uint64_t>(index));
  for (int64_t x : inputs) h = mix(h, static_cast<uint64_t>(x));
  return static_cast<int64_t>(h % 1000000);
}

}  // namespace

int64_t compute_value(std::string_view label, int32_t rank, std::string_view buffer, int64_t index,
                      const std::vector<int64_t>& inputs) {
  return value_from_seed(value_seed(label, rank, buffer), index, inputs);
}

namespace {

using Reads = std::vector<std::span<const int64_t>>;

// Digest of elements [a, b) of `v`.
uint64_t digest(std::span<const int64_t> v, size_t a, size_t b) {
  uint64_t h = mix(11, b - a);
  for (size_t i = a; i < b; ++i) h = mix(h, static_cast<uint64_t>(v[i]));
  return h;
}

// Element `col` of a row written by write `wi` of a row-wise compute: a function of the rows
// it reads (their digests), never of where the row is stored.
// row_seed(label, vr, wi) is hashed once per write.
uint64_t row_seed(std::string_view label, int32_t vr, size_t wi) {
  return mix(mix(hash_str(label), static_cast<uint64_t>(vr)), wi + 0x5157);
}
int64_t row_value(uint64_t seed, int64_t col, const std::vector<uint64_t>& args) {
  uint64_t h = mix(seed, static_cast<uint64_t>(col));
  for (uint64_t x : args) h = mix(h, x);
  return static_cast<int64_t>(h % 1000000);
}

std::vector<std::vector<int64_t>> add_outputs(const Compute& c, const Reads& in) {
  std::vector<std::vector<int64_t>> out;
  for (const Slice& w : c.writes) {
    std::vector<uint64_t> acc(static_cast<size_t>(w.count), 0);
    for (const auto& x : in)
      for (size_t j = 0; j < acc.size() && j < x.size(); ++j) acc[j] += static_cast<uint64_t>(x[j]);
    out.emplace_back(acc.begin(), acc.end());
  }
  return out;
}

// sum_rows: write w's element j is acc[j] + c_j * D, with D the sum over rows of a digest of
// each row (all per-row reads) and c_j a hash of the op, the element and the whole reads. The
// product form keeps the sum exact and splittable: the rows' partial sums on several ranks,
// added by an All-Reduce, give the same D.
std::vector<std::vector<int64_t>> sum_outputs(const Compute& c, int32_t vr, const Reads& in) {
  std::vector<int> acc_of(c.writes.size(), -1);
  std::vector<bool> is_acc(c.reads.size(), false);
  for (size_t w = 0; w < c.writes.size(); ++w)
    for (size_t k = 0; k < c.reads.size(); ++k)
      if (c.read_rows[k] == 0 && c.reads[k] == c.writes[w]) {
        acc_of[w] = static_cast<int>(k);
        is_acc[k] = true;
        break;
      }
  std::vector<uint64_t> whole;
  int64_t rows = 0;
  for (size_t k = 0; k < c.reads.size(); ++k) {
    if (c.read_rows[k] > 0) rows = c.read_rows[k];
    else if (!is_acc[k]) whole.push_back(digest(in[k], 0, in[k].size()));
  }
  uint64_t d = 0;
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t h = 13;
    for (size_t k = 0; k < c.reads.size(); ++k) {
      if (c.read_rows[k] == 0) continue;
      const size_t len = in[k].size() / static_cast<size_t>(rows);
      h = mix(h, digest(in[k], r * len, (r + 1) * len));
    }
    d += h % 1000000;
  }
  std::vector<std::vector<int64_t>> out;
  for (size_t w = 0; w < c.writes.size(); ++w) {
    std::vector<int64_t> v(static_cast<size_t>(c.writes[w].count));
    const uint64_t seed = row_seed(c.label, vr, w);
    for (int64_t j = 0; j < c.writes[w].count; ++j) {
      uint64_t x = static_cast<uint64_t>(row_value(seed, j, whole)) * d;
      if (acc_of[w] >= 0) x += static_cast<uint64_t>(in[acc_of[w]][j]);
      v[j] = static_cast<int64_t>(x);
    }
    out.push_back(std::move(v));
  }
  return out;
}

// Row-wise map: row r of write w (in block beta = x * b + y of the transpose, or block 0)
// reads, from each per-row read, the matching rows of its block beta, or of block y * a + x for
// a transposed read: a run of rows when the
// read has more rows than the write (an un-permute gathering a token's k copies), one row when
// fewer (a permute copying a token k times).
std::vector<std::vector<int64_t>> row_outputs(const Compute& c, int32_t vr, const Reads& in) {
  const int64_t ta = c.transpose.empty() ? 1 : c.transpose[0];
  const int64_t tb = c.transpose.empty() ? 1 : c.transpose[1];
  const int64_t blocks = ta * tb;
  std::vector<uint64_t> whole(c.reads.size(), 0);
  for (size_t k = 0; k < c.reads.size(); ++k)
    if (c.read_rows[k] == 0) whole[k] = digest(in[k], 0, in[k].size());
  std::vector<std::vector<int64_t>> out;
  std::vector<uint64_t> args(c.reads.size());
  for (size_t w = 0; w < c.writes.size(); ++w) {
    const int64_t rw = c.write_rows[w];
    const int64_t len = c.writes[w].count / rw;
    const int64_t per_block = rw / blocks;
    std::vector<int64_t> v(static_cast<size_t>(c.writes[w].count));
    const uint64_t seed = row_seed(c.label, vr, w);
    for (int64_t r = 0; r < rw; ++r) {
      const int64_t beta = r / per_block, rho = r % per_block;
      const int64_t swapped = (beta % tb) * ta + beta / tb;
      for (size_t k = 0; k < c.reads.size(); ++k) {
        const int64_t rk = c.read_rows[k];
        if (rk == 0) {
          args[k] = whole[k];
          continue;
        }
        const bool tr = std::find(c.transposed_reads.begin(), c.transposed_reads.end(),
                                  static_cast<int64_t>(k)) != c.transposed_reads.end();
        const int64_t src = tr ? swapped : beta;
        const int64_t kb = rk / blocks;  // the read's rows per block
        const int64_t klen = static_cast<int64_t>(in[k].size()) / rk;
        int64_t first, n;
        if (kb >= per_block) {
          n = kb / per_block;
          first = src * kb + rho * n;
        } else {
          n = 1;
          first = src * kb + rho / (per_block / kb);
        }
        args[k] = digest(in[k], first * klen, (first + n) * klen);
      }
      for (int64_t col = 0; col < len; ++col) v[r * len + col] = row_value(seed, col, args);
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> compute_outputs(const Schedule& s, int32_t rank, const Compute& c,
                                                  const Reads& in) {
  if (c.fn == "add") return add_outputs(c, in);
  if (c.row_wise()) {
    const int32_t vr = value_rank(s, rank, c.replicated);
    return c.sum_rows ? sum_outputs(c, vr, in) : row_outputs(c, vr, in);
  }
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> args(in.size());
  const int32_t vr = value_rank(s, rank, c.replicated);
  for (const Slice& w : c.writes) {
    std::vector<int64_t> v(static_cast<size_t>(w.count));
    const uint64_t seed = value_seed(c.label, vr, w.buffer);
    for (int64_t j = 0; j < w.count; ++j) {
      for (size_t k = 0; k < in.size(); ++k)
        args[k] = in[k].empty() ? 0 : in[k][static_cast<size_t>(j) % in[k].size()];
      v[j] = value_from_seed(seed, w.offset + j, args);
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::string Interpretation::deadlock_message() const {
  if (!deadlocked) return "";
  std::string t = "deadlock:";
  for (size_t i = 0; i < stuck.size(); ++i)
    t += (i ? "; " : " ") + stuck[i].op + " " + stuck[i].reason;
  return t;
}

Interpretation interpret(const Schedule& s, const InterpreterOptions& opt) {
  // Every rank holds its own data (the replicas of a rank class differ in their inputs).
  if (s.symmetry.on()) return interpret(expand(s), opt);
  ValidateOptions vo;
  vo.check_deadlock = false;
  std::vector<std::string> problems = validate(s, vo);
  if (!problems.empty()) {
    std::string msg = "schedule '" + s.name + "' is not valid: " + problems[0];
    if (problems.size() > 1) msg += " (and " + std::to_string(problems.size() - 1) + " more)";
    throw Error(ErrorCode::BadFormat, msg);
  }
  Matching m = match_schedule_collectives(s);
  return Machine(s, m, opt).run();
}

}  // namespace braid::fusion
